"""jax-* optimizers reproduce the numpy reference optimizers, natively and on numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from d5_plugin_jax._jax import jax as _jax
from d5_plugin_jax._jax import x64
from d5_plugin_jax.optimizers import FusedStep, JaxAdam, JaxOptimizer

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

jax = _jax()
jnp = jax.numpy

NAMES = ("sgd", "momentum", "nesterov", "adam", "adamw", "adagrad", "rmsprop")


class TestJaxOptimizersMatchTheReference(OptimizerReferenceTests):
    prefix = "jax-"


class _FakeExecutor:
    """Stands in for JaxExecutor: a mutable mapping of live jax arrays by name."""

    name = "jax"

    def __init__(self, dtype: Any = np.float64) -> None:
        with x64(np.dtype(dtype) == np.float64):
            self.arrays: dict[str, Any] = {k: jnp.asarray(v) for k, v in _params(dtype).items()}

    def native_parameters(self) -> dict[str, Any]:
        return self.arrays

    def numpy(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.arrays.items()}


def _native_run(
    name: str, hyper: dict[str, Any], grads: list[dict[str, np.ndarray]], dtype: Any = np.float64
) -> tuple[_FakeExecutor, JaxOptimizer]:
    opt, ex = _load(f"jax-{name}")(**hyper), _FakeExecutor(dtype)
    assert isinstance(opt, JaxOptimizer)
    opt.bind(ex)
    with x64(np.dtype(dtype) == np.float64):
        for i, g in enumerate(grads):
            opt.lr = lr_at(hyper, i)
            native = {k: jnp.asarray(v) for k, v in g.items()}
            opt.native_step(native if i % 2 else [native["w"], native["b"]])
    return ex, opt


@pytest.mark.parametrize(("name", "hyper"), CASES, ids=IDS)
def test_jax_optimizer_native_step_matches_the_reference_over_five_steps(
    name: str, hyper: dict[str, Any]
) -> None:
    grads = _gradients(5)
    expected, ref = reference_run(name, hyper, grads)
    ex, opt = _native_run(name, hyper, grads)
    for k, v in ex.numpy().items():
        assert v.dtype == np.float64
        np.testing.assert_allclose(v, expected[k], rtol=1e-12, atol=1e-14)
    # the state is the reference's: same names, same step counts, same arrays
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
def test_jax_optimizer_in_float32_stays_float32_and_matches_the_reference_run(
    name: str, hyper: dict[str, Any]
) -> None:
    grads = _gradients(5, np.float32)
    expected, _ = reference_run(name, hyper, grads, np.float32)
    ex, _ = _native_run(name, hyper, grads, np.float32)
    for k, v in ex.numpy().items():
        assert v.dtype == np.float32
        np.testing.assert_allclose(v, expected[k], rtol=1e-5, atol=1e-6)


def test_a_changing_learning_rate_does_not_recompile_the_update() -> None:
    traced: list[int] = []

    class CountingAdam(JaxAdam):
        """Counts the Python calls of chain: one per trace of the update."""

        def chain(self, learning_rate: Any) -> Any:
            traced.append(1)
            return super().chain(learning_rate)

    grads = _gradients(6)
    opt, ex = CountingAdam(lr=0.01), _FakeExecutor()
    opt.bind(ex)
    with x64():
        for i, g in enumerate(grads):
            opt.lr = 0.01 / (i + 1)
            opt.native_step({k: jnp.asarray(v) for k, v in g.items()})
    calls_after_first = len(traced)
    with x64():
        opt.lr = 0.5
        opt.native_step({k: jnp.asarray(v) for k, v in grads[0].items()})
    assert len(traced) == calls_after_first  # no new trace for a new learning rate
    ref, params = _load("adam")(), _params()
    for i, g in enumerate(grads):
        ref.lr = 0.01 / (i + 1)
        ref.step(params, g)
    ref.lr = 0.5
    ref.step(params, grads[0])
    for k, v in ex.numpy().items():
        np.testing.assert_allclose(v, params[k], rtol=1e-12, atol=1e-14)


def test_native_step_updates_only_the_parameters_given_and_counts_none_as_zeros() -> None:
    g = _gradients(1)[0]
    opt, ex = _load("jax-momentum")(lr=0.5), _FakeExecutor()
    opt.bind(ex)
    before = ex.numpy()
    with x64():
        opt.native_step({"w": jnp.asarray(g["w"])})
    np.testing.assert_array_equal(ex.numpy()["b"], before["b"])
    np.testing.assert_allclose(ex.numpy()["w"], before["w"] - 0.5 * g["w"], rtol=1e-15)
    assert opt.state_dict()["steps"] == {"w": 1}
    opt.native_step({"w": None, "b": g["b"]})  # numpy float64, outside an x64 block
    assert ex.numpy()["w"].dtype == ex.numpy()["b"].dtype == np.float64
    # w: velocity 0.9 * g stepped with a zero gradient
    np.testing.assert_allclose(ex.numpy()["w"], before["w"] - 0.5 * g["w"] * 1.9, rtol=1e-15)
    np.testing.assert_allclose(ex.numpy()["b"], before["b"] - 0.5 * g["b"], rtol=1e-15)
    assert opt.state_dict()["steps"] == {"w": 2, "b": 1}


def test_a_fused_step_marker_is_not_applied_again() -> None:
    opt, ex = _load("jax-sgd")(lr=0.5), _FakeExecutor()
    opt.bind(ex)
    before = ex.numpy()
    opt.native_step(FusedStep())
    for k, v in ex.numpy().items():
        np.testing.assert_array_equal(v, before[k])


def test_state_dict_resumes_the_same_trajectory_across_both_ways_of_use() -> None:
    grads = _gradients(4)
    a, pa = _load("jax-adam")(lr=0.01), _params()
    for g in grads[:2]:
        a.step(pa, g)
    # numpy state -> a bound optimizer, which resumes on the executor's arrays
    b, ex = _load("jax-adam")(), _FakeExecutor()
    with x64():
        ex.arrays.update({k: jnp.asarray(v) for k, v in pa.items()})
    b.load_state_dict(a.state_dict())
    b.bind(ex)
    assert b.lr == 0.01
    with x64():
        for g in grads[2:]:
            a.step(pa, g)
            b.native_step({k: jnp.asarray(v) for k, v in g.items()})
    for k, v in ex.numpy().items():
        np.testing.assert_allclose(v, pa[k], rtol=1e-14, atol=0)
    assert b.state_dict()["steps"] == {"w": 4, "b": 4}


def test_the_numpy_reference_state_loads_and_continues_identically() -> None:
    grads = _gradients(5)
    ref, pr = _load("rmsprop")(lr=0.01, momentum=0.5, centered=True), _params()
    for g in grads[:3]:
        ref.step(pr, g)
    opt = _load("jax-rmsprop")(lr=0.01, momentum=0.5, centered=True)
    po = {k: v.copy() for k, v in pr.items()}
    opt.load_state_dict({**ref.state_dict(), "name": "jax-rmsprop"})
    for g in grads[3:]:
        ref.step(pr, g)
        opt.step(po, g)
    for k in pr:
        np.testing.assert_allclose(po[k], pr[k], rtol=1e-12, atol=1e-14)


def test_reset_forgets_the_state_and_keeps_the_binding() -> None:
    with x64():
        g = {k: jnp.asarray(v) for k, v in _gradients(1)[0].items()}
        opt, ex = _load("jax-momentum")(lr=0.1), _FakeExecutor()
        opt.bind(ex)
        opt.native_step(g)
        opt.reset()
        assert opt.state_dict()["steps"] == {} and opt.state_dict()["state"] == {}
        before = ex.numpy()
        opt.native_step(g)  # a fresh velocity: a plain SGD step
    np.testing.assert_allclose(ex.numpy()["w"], before["w"] - 0.1 * np.asarray(g["w"]))


def test_jax_optimizers_are_native_and_take_the_references_options() -> None:
    for name in NAMES:
        cls = _load(f"jax-{name}")
        assert issubclass(cls, JaxOptimizer) and cls.native == "jax"
        assert cls.name == f"jax-{name}"
        assert cls().lr == _load(name)().lr
        assert cls().hyper == _load(name)().hyper


def test_misuse_is_a_one_line_usage_error() -> None:
    opt = _load("jax-sgd")()
    with pytest.raises(
        UsageError, match=r"^optimizer 'jax-sgd': call bind\(executor\) before native_step$"
    ):
        opt.native_step({})
    with pytest.raises(UsageError, match=r"^optimizer 'jax-adam' has no option 'betas'"):
        _load("jax-adam")(betas=0.9)
    with pytest.raises(UsageError, match=r"^optimizer 'jax-sgd' binds to the jax executor"):
        opt.bind(object())
    ints = _FakeExecutor()
    ints.arrays["n"] = jnp.asarray(3, dtype=jnp.int32)
    with pytest.raises(UsageError, match=r"^optimizer 'jax-sgd': parameter 'n' is int32; only"):
        opt.bind(ints)
    numpy_valued = _FakeExecutor()
    numpy_valued.arrays["w"] = np.zeros((3, 2))
    with pytest.raises(UsageError, match=r"^optimizer 'jax-sgd': parameter 'w' of .* not a jax"):
        opt.bind(numpy_valued)
    opt.bind(_FakeExecutor())
    with pytest.raises(
        UsageError, match=r"^optimizer 'jax-sgd' is bound to an executor; call native_step$"
    ):
        opt.step({}, {})
    with pytest.raises(UsageError, match=r"^optimizer 'jax-sgd': gradient 'x' has no parameter$"):
        opt.native_step({"x": jnp.zeros(2)})
    with pytest.raises(UsageError, match=r"^optimizer 'jax-sgd': 1 gradients for 2 bound"):
        opt.native_step([jnp.zeros((3, 2))])
    with pytest.raises(
        UsageError, match=r"^optimizer 'jax-sgd': gradient 'b' has shape \(5,\), parameter has"
    ):
        opt.native_step({"w": np.zeros((3, 2)), "b": np.zeros(5)})
    free = _load("jax-sgd")()
    with pytest.raises(UsageError, match=r"^optimizer 'jax-sgd': gradient 'w' has shape \(2,\)"):
        free.step(_params(), {"w": np.zeros(2)})
    adam = _load("jax-adam")()
    adam.load_state_dict({"state": {"w": {"velocity": np.zeros((3, 2))}}})
    with pytest.raises(UsageError, match=r"^optimizer 'jax-adam': the loaded state of 'w' holds"):
        adam.step(_params(), _gradients(1)[0])
    changed = _load("jax-momentum")()
    changed.step(_params(), _gradients(1)[0])
    with pytest.raises(UsageError, match=r"^optimizer 'jax-momentum': parameter 'w' is float32"):
        changed.step(_params(np.float32), _gradients(1, np.float32)[0])
