"""Bad input gets one line naming what is wrong; the backend is found without torch."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from d5_plugin_torch.operators import TorchBackend
from d5_plugin_torch.ops import Slot, TorchOperator
from d5_plugin_torch.ops._base import Kernel, Signature

from d5core.api import UsageError
from d5core.testing.operators import OperatorErrorTests, create_operator, one_line_error

TORCH = TorchBackend()


def create(op_type: str, attributes: Mapping[str, Any], shapes: Sequence[Any]) -> TorchOperator:
    """Create from (shape, dtype) pairs or bare shapes (float32)."""
    op = create_operator(TORCH, op_type, attributes, shapes)
    assert isinstance(op, TorchOperator)
    return op


class TestTorchRefusesBadInputInOneLine(OperatorErrorTests):
    backend = TORCH
    float16_refusal = "input X has dtype float16; the torch backend supports float32"


class _Unchecked(TorchOperator):
    """A matrix product that leaves every shape check to torch."""

    op_type = "UncheckedMatMul"
    slots: ClassVar[tuple[Slot, ...]] = (Slot("A"), Slot("B"))

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        return lambda a, b: (torch.mm(a, b),)


def test_torch_runtime_errors_become_one_line_usage_errors() -> None:
    op = _Unchecked()
    inputs = [np.ones((2, 3)), np.ones((4, 5))]
    with pytest.raises(RuntimeError):  # what torch itself says, for comparison
        torch.mm(torch.ones(2, 3), torch.ones(4, 5))
    for call in (
        lambda: op.forward(inputs),
        op.prepare_forward(inputs),
        lambda: op.backward([np.ones((2, 5))], inputs),
    ):
        with pytest.raises(UsageError) as excinfo:
            call()
        message = one_line_error(excinfo)
        assert message.startswith("UncheckedMatMul: torch rejected inputs of shapes (2, 3), (4, 5)")
        assert "cannot be multiplied" in message


# -- the backend ----------------------------------------------------------------------


def test_backend_describes_itself() -> None:
    assert TorchBackend.name == "torch"
    assert TorchBackend.dtypes == ("float32", "float64")
    assert TORCH.device == "cpu"
    op = create("Relu", {}, [(2,)])
    assert op.device == "cpu" and op.op_type == "Relu" and op.differentiable


@pytest.mark.parametrize("device", ["tpu", "not a device"])
def test_unknown_devices_are_usage_errors(device: str) -> None:
    with pytest.raises(UsageError) as excinfo:
        TorchBackend(device)
    assert repr(device) in one_line_error(excinfo)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here")
def test_cuda_without_cuda_is_a_usage_error() -> None:
    with pytest.raises(UsageError) as excinfo:
        TorchBackend("cuda")
    assert "CUDA is not available; use 'cpu'" in one_line_error(excinfo)


def test_backend_is_registered_in_the_operators_group() -> None:
    (entry,) = [
        ep for ep in importlib.metadata.entry_points(group="d5.operators") if ep.name == "torch"
    ]
    assert entry.value == "d5_plugin_torch.operators:TorchBackend"
    assert entry.load() is TorchBackend


def test_importing_the_plugin_module_does_not_import_torch() -> None:
    code = "import sys, d5_plugin_torch.plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
