"""The ``mx-*`` optimizers run MXNet's ``mx.optimizer`` and follow the numpy reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from d5core.api import UsageError
from d5core.testing.optimizers import (
    CASES,
    gradients,
    load_optimizer,
    lr_at,
    parameters,
    reference_run,
)

pytest.importorskip("mxnet")

#: MXNet 1.9.1 has no AdamW. Centered RMSprop: MXNet puts eps inside the root, which no
#: setting moves out; the rules coincide at eps = 0 (see d5_plugin_mxnet.optimizers).
MX_CASES = [
    (name, {**hyper, "eps": 0.0} if hyper.get("centered") else hyper)
    for name, hyper in CASES
    if name != "adamw"
]
MX_IDS = [f"{n}-{i}" for i, (n, _) in enumerate(MX_CASES)]
#: What the acceptance asks in float64 (MXNet keeps its hyper-parameters in float32).
TOLERANCE = 1e-6


def _mx():
    from d5_plugin_mxnet._mx import mxnet

    return mxnet()


def _run(opt, params, grads, hyper, first: int = 0) -> None:
    for i, g in enumerate(grads, start=first):
        opt.lr = lr_at(hyper, i)
        opt.step(params, g)


def _close(got: dict[str, np.ndarray], expected: dict[str, np.ndarray], rtol: float = 0) -> None:
    """Parameters within :data:`TOLERANCE`; state (which grows, as ``g / d`` sums) also
    within ``rtol`` of itself."""
    assert sorted(got) == sorted(expected)
    for k in expected:
        np.testing.assert_allclose(got[k], expected[k], rtol=rtol, atol=TOLERANCE, err_msg=k)


@pytest.mark.parametrize(("name", "hyper"), MX_CASES, ids=MX_IDS)
def test_mx_optimizer_on_numpy_matches_the_reference_over_five_steps(name, hyper):
    grads = gradients(5)
    expected, reference = reference_run(name, hyper, grads)
    opt, params = load_optimizer(f"mx-{name}")(**hyper), parameters()
    _run(opt, params, grads, hyper)
    _close(params, expected)
    for key, arrays in reference.state.items():
        _close(opt.state_dict()["state"][key], arrays, rtol=TOLERANCE)  # type: ignore[index]


@pytest.mark.parametrize(("name", "hyper"), MX_CASES, ids=MX_IDS)
def test_state_saved_by_either_resumes_in_the_other(name, hyper):
    grads = gradients(5)
    expected, _ = reference_run(name, hyper, grads)
    # the reference's state after three steps, resumed by MXNet
    reference, params = load_optimizer(name)(**hyper), parameters()
    _run(reference, params, grads[:3], hyper)
    mine = load_optimizer(f"mx-{name}")(**hyper)
    mine.load_state_dict({**reference.state_dict(), "name": f"mx-{name}"})
    _run(mine, params, grads[3:], hyper, first=3)
    _close(params, expected)
    # MXNet's state after three steps, resumed by the reference
    mine, params = load_optimizer(f"mx-{name}")(**hyper), parameters()
    _run(mine, params, grads[:3], hyper)
    reference = load_optimizer(name)(**hyper)
    reference.load_state_dict({**mine.state_dict(), "name": name})
    _run(reference, params, grads[3:], hyper, first=3)
    _close(params, expected)


def test_centered_rmsprop_differs_from_the_reference_only_by_where_eps_sits():
    hyper = {"lr": 0.01, "momentum": 0.5, "centered": True, "eps": 1e-8}
    grads = gradients(5)
    expected, _ = reference_run("rmsprop", hyper, grads)
    opt, params = load_optimizer("mx-rmsprop")(**hyper), parameters()
    _run(opt, params, grads, hyper)
    gap = max(float(np.max(np.abs(params[k] - expected[k]))) for k in params)
    assert 0 < gap < 1e-4


@pytest.mark.parametrize("name", ["momentum", "nesterov"])
def test_a_step_at_lr_zero_keeps_the_velocity_and_the_weights(name):
    rates = [0.1, 0.0, 0.0, 0.05, 0.2]
    grads = gradients(len(rates))
    reference, mine = load_optimizer(name)(), load_optimizer(f"mx-{name}")()
    expected, got = parameters(), parameters()
    for lr, g in zip(rates, grads, strict=True):
        reference.lr = mine.lr = lr
        reference.step(expected, g)
        mine.step(got, g)
        _close(got, expected)
    _close(mine.state_dict()["state"]["w"], reference.state["w"], rtol=TOLERANCE)  # type: ignore[index]


class _Executor:
    """What the optimizers take from the mxnet executor: its live NDArrays."""

    name = "mxnet"

    def __init__(self, params: dict[str, np.ndarray]) -> None:
        mx = _mx()
        self.params = {k: mx.nd.array(v, dtype=v.dtype) for k, v in params.items()}

    def native_parameters(self) -> dict[str, Any]:
        return self.params


@pytest.mark.parametrize(("name", "hyper"), MX_CASES, ids=MX_IDS)
def test_native_steps_update_the_bound_ndarrays_in_place(name, hyper):
    mx = _mx()
    grads = gradients(5)
    expected, _ = reference_run(name, hyper, grads)
    executor = _Executor(parameters())
    live = dict(executor.params)
    opt = load_optimizer(f"mx-{name}")(**hyper)
    assert opt.native == "mxnet"
    opt.bind(executor)
    for i, g in enumerate(grads):
        opt.lr = lr_at(hyper, i)
        as_list = i % 2 == 1  # a sequence in bound order, or a mapping by name
        native = {k: mx.nd.array(v, dtype=v.dtype) for k, v in g.items()}
        opt.native_step([native[k] for k in live] if as_list else native)
    assert all(executor.params[k] is live[k] for k in live)
    _close({k: v.asnumpy() for k, v in live.items()}, expected)


def test_there_is_no_mx_adamw():
    with pytest.raises(Exception, match="mx-adamw"):
        load_optimizer("mx-adamw")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: load_optimizer("mx-rmsprop")(momentum=0.9), "needs centered|centered=1"),
        (lambda: load_optimizer("mx-adam")(weight_decay=0.1), "no option 'weight_decay'"),
        (lambda: load_optimizer("mx-sgd")().step(parameters(), {"w": np.ones(3)}), "shape"),
        (lambda: load_optimizer("mx-sgd")().step(parameters(), {"v": np.ones(3)}), "'v'"),
        (lambda: load_optimizer("mx-sgd")().bind(object()), "native_parameters"),
        (lambda: load_optimizer("mx-sgd")().native_step({}), "bind"),
    ],
    ids=["rmsprop-momentum", "option", "shape", "name", "bind", "unbound"],
)
def test_bad_use_is_a_usage_error_naming_it(make, message):
    with pytest.raises(UsageError, match=message):
        make()


def test_a_loaded_state_of_the_wrong_shape_is_refused():
    opt = load_optimizer("mx-momentum")()
    opt.load_state_dict({"name": "mx-momentum", "steps": {"w": 1},
                         "state": {"w": {"velocity": np.zeros(5)}}})  # fmt: skip
    with pytest.raises(UsageError, match="'velocity' has shape"):
        opt.step(parameters(), gradients(1)[0])
