"""torch.optim wrappers reproduce the numpy reference optimizers, natively and on numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from d5_plugin_torch.optimizers import TorchOptimizer

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


class TestTorchOptimizersMatchTheReference(OptimizerReferenceTests):
    prefix = "torch-"


class _FakeExecutor:
    """Stands in for TorchExecutor: live tensors that require grad."""

    def __init__(self) -> None:
        self.tensors = {k: torch.tensor(v, requires_grad=True) for k, v in _params().items()}

    def native_parameters(self) -> dict[str, torch.Tensor]:
        return self.tensors


@pytest.mark.parametrize(("name", "hyper"), CASES, ids=IDS)
def test_torch_optimizer_native_step_matches_the_reference_over_five_steps(
    name: str, hyper: dict[str, Any]
) -> None:
    grads = _gradients(5)
    expected, _ = reference_run(name, hyper, grads)
    opt, ex = _load(f"torch-{name}")(**hyper), _FakeExecutor()
    opt.bind(ex)
    for i, g in enumerate(grads):
        opt.lr = lr_at(hyper, i)
        native = {k: torch.from_numpy(v) for k, v in g.items()}
        opt.native_step(native if i % 2 else [native["w"], native["b"]])
    for k, t in ex.tensors.items():
        np.testing.assert_allclose(t.detach().numpy(), expected[k], rtol=1e-12, atol=1e-14)


def test_native_step_updates_the_torch_executor_parameters_in_place() -> None:
    from d5_plugin_torch.executor import TorchExecutor
    from onnx import TensorProto, helper, numpy_helper

    from d5core.onnx.network import Network

    w = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["loss"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [1, 2])],
        [numpy_helper.from_array(w, "W")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    ex = TorchExecutor(Network(model))
    x = np.array([[1.0, -1.0]], dtype=np.float32)
    _, grads = ex.inference_and_backprop({"x": x}, "loss")
    opt = _load("torch-sgd")(lr=0.5)
    opt.bind(ex)
    opt.native_step({k: torch.from_numpy(v) for k, v in grads.items()})
    np.testing.assert_allclose(ex.get_parameters()["W"], w - 0.5 * grads["W"])


def test_state_dict_resumes_the_same_trajectory() -> None:
    grads = _gradients(4)
    a, pa = _load("torch-adam")(lr=0.01), _params()
    for g in grads[:2]:
        a.step(pa, g)
    b, pb = _load("torch-adam")(), {k: v.copy() for k, v in pa.items()}
    b.load_state_dict(a.state_dict())
    assert b.lr == 0.01
    for g in grads[2:]:
        a.step(pa, g)
        b.step(pb, g)
    for k in pa:
        np.testing.assert_array_equal(pa[k], pb[k])


def test_torch_optimizers_are_native_and_registered_with_the_torch_prefix() -> None:
    for name in ("sgd", "momentum", "nesterov", "adam", "adamw", "adagrad", "rmsprop"):
        cls = _load(f"torch-{name}")
        assert issubclass(cls, TorchOptimizer) and cls.native == "torch"
        assert cls.name == f"torch-{name}"
        assert cls().lr == _load(name)().lr
        assert cls().hyper == _load(name)().hyper


def test_misuse_is_a_one_line_usage_error() -> None:
    opt = _load("torch-sgd")()
    with pytest.raises(
        UsageError, match=r"^optimizer 'torch-sgd': call bind\(executor\) before native_step$"
    ):
        opt.native_step({})
    with pytest.raises(UsageError, match=r"^optimizer 'torch-adam' has no option 'betas'"):
        _load("torch-adam")(betas=(0.9, 0.99))
    opt.bind(_FakeExecutor())
    with pytest.raises(
        UsageError, match=r"^optimizer 'torch-sgd' is bound to an executor; call native_step$"
    ):
        opt.step({}, {})
