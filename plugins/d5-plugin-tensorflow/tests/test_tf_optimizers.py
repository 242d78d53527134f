"""tf-* optimizers reproduce the numpy reference optimizers, natively and on numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.optimizers import TFAdam, TFOptimizer

from d5core.api import UsageError
from d5core.testing.optimizers import (
    CASES,
    IDS,
    OptimizerReferenceTests,
    lr_at,
    reference_run,
)
from d5core.testing.optimizers import gradients as _gradients
from d5core.testing.optimizers import load_optimizer as _load
from d5core.testing.optimizers import parameters as _params

tf = tensorflow()

NAMES = ("sgd", "momentum", "nesterov", "adam", "adamw", "adagrad", "rmsprop")


class TestTFOptimizersMatchTheReference(OptimizerReferenceTests):
    prefix = "tf-"


class _FakeExecutor:
    """Stands in for TensorFlowExecutor: live tf.Variables by name, trainable order."""

    name = "tensorflow"

    def __init__(self, dtype: Any = np.float64) -> None:
        self.variables = {k: tf.Variable(v) for k, v in _params(dtype).items()}

    def native_parameters(self) -> dict[str, Any]:
        return self.variables


def _native_run(
    name: str, hyper: dict[str, Any], grads: list[dict[str, np.ndarray]], dtype: Any = np.float64
) -> tuple[_FakeExecutor, TFOptimizer]:
    opt, ex = _load(f"tf-{name}")(**hyper), _FakeExecutor(dtype)
    assert isinstance(opt, TFOptimizer)
    opt.bind(ex)
    for i, g in enumerate(grads):
        opt.lr = lr_at(hyper, i)
        native = {k: tf.constant(v) for k, v in g.items()}
        opt.native_step(native if i % 2 else [native["w"], native["b"]])
    return ex, opt


@pytest.mark.parametrize("jit", [True, False], ids=["xla", "kernels"])
@pytest.mark.parametrize(("name", "hyper"), CASES, ids=IDS)
def test_tf_optimizer_native_step_matches_the_reference_over_five_steps(
    name: str, hyper: dict[str, Any], jit: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(TFOptimizer, "jit_compile", jit)
    grads = _gradients(5)
    expected, ref = reference_run(name, hyper, grads)
    ex, opt = _native_run(name, hyper, grads)
    for k, v in ex.variables.items():
        np.testing.assert_allclose(v.numpy(), expected[k], rtol=1e-12, atol=1e-14)
    # the state itself is the reference's: same names, same step counts, same arrays
    got, want = opt.state_dict(), ref.state_dict()
    assert got["steps"] == want["steps"] == {"w": 5, "b": 5}
    got_state, want_state = got["state"], want["state"]
    assert isinstance(got_state, dict) and isinstance(want_state, dict)
    assert {k: sorted(v) for k, v in got_state.items()} == {
        k: sorted(v) for k, v in want_state.items()
    }
    for k, slots in want_state.items():
        for s, a in slots.items():
            np.testing.assert_allclose(got_state[k][s], a, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize(("name", "hyper"), CASES, ids=IDS)
def test_tf_optimizer_in_float32_stays_float32_and_matches_thereference_run(
    name: str, hyper: dict[str, Any]
) -> None:
    grads = _gradients(5, np.float32)
    expected, _ = reference_run(name, hyper, grads, np.float32)
    ex, _ = _native_run(name, hyper, grads, np.float32)
    for k, v in ex.variables.items():
        assert v.dtype == tf.float32
        np.testing.assert_allclose(v.numpy(), expected[k], rtol=1e-5, atol=1e-6)


def test_a_changing_learning_rate_does_not_retrace_the_compiled_step() -> None:
    traced: list[str] = []

    class CountingAdam(TFAdam):
        """Counts the Python calls of apply: each happens while tracing only."""

        def apply(self, p: Any, g: Any, slots: Any, lr: Any, t: Any) -> None:
            traced.append(p.name)
            super().apply(p, g, slots, lr, t)

    grads = _gradients(6)
    opt, ex = CountingAdam(lr=0.01), _FakeExecutor()
    opt.bind(ex)
    for i, g in enumerate(grads):
        opt.lr = 0.01 / (i + 1)
        opt.native_step({k: tf.constant(v) for k, v in g.items()})
    assert len(traced) == 2  # w and b, traced once
    ref, params = _load("adam")(), _params()
    for i, g in enumerate(grads):
        ref.lr = 0.01 / (i + 1)
        ref.step(params, g)
    for k, v in ex.variables.items():
        np.testing.assert_allclose(v.numpy(), params[k], rtol=1e-12, atol=1e-14)


def test_native_step_updates_only_the_parameters_given_and_counts_none_as_zeros() -> None:
    g = _gradients(1)[0]
    opt, ex = _load("tf-momentum")(lr=0.5), _FakeExecutor()
    opt.bind(ex)
    before = {k: v.numpy().copy() for k, v in ex.variables.items()}
    opt.native_step({"w": tf.constant(g["w"])})
    np.testing.assert_array_equal(ex.variables["b"].numpy(), before["b"])
    np.testing.assert_allclose(ex.variables["w"].numpy(), before["w"] - 0.5 * g["w"])
    assert opt.state_dict()["steps"] == {"w": 1}
    opt.native_step({"w": None, "b": tf.constant(g["b"])})
    # w: velocity 0.9 * g stepped with a zero gradient
    np.testing.assert_allclose(ex.variables["w"].numpy(), before["w"] - 0.5 * g["w"] * 1.9)
    assert opt.state_dict()["steps"] == {"w": 2, "b": 1}


def test_native_step_takes_indexed_slices_and_other_float_dtypes() -> None:
    opt, ex = _load("tf-sgd")(lr=0.5), _FakeExecutor()
    opt.bind(ex)
    before = ex.variables["w"].numpy().copy()
    rows = tf.IndexedSlices(
        tf.constant([[1.0, 2.0]], dtype=tf.float32), tf.constant([2]), tf.constant([3, 2])
    )
    opt.native_step({"w": rows, "b": np.ones(4)})
    expected = before.copy()
    expected[2] -= [0.5, 1.0]
    np.testing.assert_allclose(ex.variables["w"].numpy(), expected)


def test_state_dict_resumes_the_same_trajectory_across_both_ways_of_use() -> None:
    grads = _gradients(4)
    a, pa = _load("tf-adam")(lr=0.01), _params()
    for g in grads[:2]:
        a.step(pa, g)
    # numpy state -> a bound optimizer, which resumes on the executor's variables
    b, ex = _load("tf-adam")(), _FakeExecutor()
    for k, v in pa.items():
        ex.variables[k].assign(v)
    b.load_state_dict(a.state_dict())
    b.bind(ex)
    assert b.lr == 0.01
    for g in grads[2:]:
        a.step(pa, g)
        b.native_step({k: tf.constant(v) for k, v in g.items()})
    for k in pa:
        np.testing.assert_array_equal(pa[k], ex.variables[k].numpy())
    assert b.state_dict()["steps"] == {"w": 4, "b": 4}


def test_the_numpy_reference_state_loads_and_continues_identically() -> None:
    grads = _gradients(5)
    ref, pr = _load("rmsprop")(lr=0.01, momentum=0.5, centered=True), _params()
    for g in grads[:3]:
        ref.step(pr, g)
    opt = _load("tf-rmsprop")(lr=0.01, momentum=0.5, centered=True)
    po = {k: v.copy() for k, v in pr.items()}
    opt.load_state_dict({**ref.state_dict(), "name": "tf-rmsprop"})
    for g in grads[3:]:
        ref.step(pr, g)
        opt.step(po, g)
    for k in pr:
        np.testing.assert_allclose(po[k], pr[k], rtol=1e-12, atol=1e-14)


def test_reset_forgets_the_state_and_keeps_the_binding() -> None:
    g = {k: tf.constant(v) for k, v in _gradients(1)[0].items()}
    opt, ex = _load("tf-momentum")(lr=0.1), _FakeExecutor()
    opt.bind(ex)
    opt.native_step(g)
    opt.reset()
    assert opt.state_dict()["steps"] == {} and opt.state_dict()["state"] == {}
    before = ex.variables["w"].numpy().copy()
    opt.native_step(g)  # a fresh velocity: a plain SGD step
    np.testing.assert_allclose(ex.variables["w"].numpy(), before - 0.1 * g["w"].numpy())


def test_tf_optimizers_are_native_and_take_the_references_options() -> None:
    for name in NAMES:
        cls = _load(f"tf-{name}")
        assert issubclass(cls, TFOptimizer) and cls.native == "tensorflow"
        assert cls.name == f"tf-{name}"
        assert cls().lr == _load(name)().lr
        assert cls().hyper == _load(name)().hyper


def test_misuse_is_a_one_line_usage_error() -> None:
    opt = _load("tf-sgd")()
    with pytest.raises(
        UsageError, match=r"^optimizer 'tf-sgd': call bind\(executor\) before native_step$"
    ):
        opt.native_step({})
    with pytest.raises(UsageError, match=r"^optimizer 'tf-adam' has no option 'betas'"):
        _load("tf-adam")(betas=0.9)
    with pytest.raises(UsageError, match=r"^optimizer 'tf-sgd' binds to the tensorflow executor"):
        opt.bind(object())
    ints = _FakeExecutor()
    ints.variables["n"] = tf.Variable(3)
    with pytest.raises(UsageError, match=r"^optimizer 'tf-sgd': parameter 'n' is int32; only"):
        opt.bind(ints)
    opt.bind(_FakeExecutor())
    with pytest.raises(
        UsageError, match=r"^optimizer 'tf-sgd' is bound to an executor; call native_step$"
    ):
        opt.step({}, {})
    with pytest.raises(UsageError, match=r"^optimizer 'tf-sgd': gradient 'x' has no parameter$"):
        opt.native_step({"x": tf.zeros(2)})
    with pytest.raises(UsageError, match=r"^optimizer 'tf-sgd': 1 gradients for 2 bound"):
        opt.native_step([tf.zeros((3, 2))])
    with pytest.raises(
        UsageError, match=r"^optimizer 'tf-sgd': gradient 'b' has shape \(5,\), parameter has"
    ):
        opt.native_step({"w": tf.zeros((3, 2), tf.float64), "b": tf.zeros(5, tf.float64)})
    free = _load("tf-sgd")()
    with pytest.raises(UsageError, match=r"^optimizer 'tf-sgd': gradient 'w' has shape \(2,\)"):
        free.step(_params(), {"w": np.zeros(2)})
    adam = _load("tf-adam")()
    adam.load_state_dict({"state": {"w": {"velocity": np.zeros((3, 2))}}})
    with pytest.raises(UsageError, match=r"^optimizer 'tf-adam': the loaded state of 'w' holds"):
        adam.step(_params(), _gradients(1)[0])


class _LaidOutExecutor:
    """A variable kept in another layout than ONNX's, as the executor keeps a Gemm
    weight read after a channels-last Flatten."""

    name = "tensorflow"

    def __init__(self, onnx_value: np.ndarray, layout: Any) -> None:
        self.layout = layout
        stored = onnx_value if layout is None else layout.to_native(onnx_value)
        self.variables = {"w": tf.Variable(stored)}

    def native_parameters(self) -> dict[str, Any]:
        return self.variables

    def native_layouts(self) -> dict[str, Any]:
        return {} if self.layout is None else {"w": self.layout}


def test_state_of_a_laid_out_variable_is_saved_and_loaded_in_onnx_layout() -> None:
    from d5_plugin_tensorflow.graph.layout import flat_weight_layout

    layout = flat_weight_layout(3, (2, 2), 2, trans_b=True)  # w (2, 12), K in (H, W, C)
    rng = np.random.default_rng(3)
    value = rng.normal(size=(2, 12))
    grads = [rng.normal(size=(2, 12)) for _ in range(3)]
    runs = {}
    for key, lay in (("plain", None), ("laid out", layout)):
        ex, opt = _LaidOutExecutor(value, lay), _load("tf-adam")(lr=0.1)
        opt.bind(ex)
        for g in grads:
            opt.native_step({"w": tf.constant(g if lay is None else lay.to_native(g))})
        runs[key] = (ex, opt)
    (plain, plain_opt), (laid, laid_opt) = runs["plain"], runs["laid out"]
    np.testing.assert_allclose(
        layout.to_onnx(laid.variables["w"].numpy()), plain.variables["w"].numpy(), rtol=1e-12
    )
    saved = laid_opt.state_dict()
    for slot, array in plain_opt.state_dict()["state"]["w"].items():
        np.testing.assert_allclose(saved["state"]["w"][slot], array, rtol=1e-12)
    # loaded into a fresh optimizer on the laid-out variable, it continues the same way
    resumed_ex, resumed = (
        _LaidOutExecutor(layout.to_onnx(laid.variables["w"].numpy()), layout),
        _load("tf-adam")(lr=0.1),
    )
    resumed.bind(resumed_ex)
    resumed.load_state_dict(saved)
    step = rng.normal(size=(2, 12))
    resumed.native_step({"w": tf.constant(layout.to_native(step))})
    plain_opt.native_step({"w": tf.constant(step)})
    np.testing.assert_allclose(
        layout.to_onnx(resumed_ex.variables["w"].numpy()), plain.variables["w"].numpy(), rtol=1e-12
    )
