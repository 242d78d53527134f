"""Element-wise arithmetic with ONNX (numpy) broadcasting: ``Add``, ``Sub``, ``Mul``,
``Div``, ``Sum``, and ``Identity``."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5core.onnx import BroadcastingRules, onnx_signature

__all__ = ["Add", "Div", "Identity", "Mul", "Sub", "Sum"]


class _Broadcasting(BroadcastingRules, TorchOperator):
    """An element-wise operator whose inputs broadcast together (numpy's rules)."""


class _Binary(_Broadcasting):
    function: ClassVar[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        function = type(self).function
        return lambda a, b: (function(a, b),)


class Add(_Binary):
    """ONNX ``Add``: ``torch.add``."""

    op_type = "Add"
    slots, attribute_defaults = onnx_signature("Add")
    function = torch.add


class Sub(_Binary):
    """ONNX ``Sub``: ``torch.sub``."""

    op_type = "Sub"
    slots, attribute_defaults = onnx_signature("Sub")
    function = torch.sub


class Mul(_Binary):
    """ONNX ``Mul``: ``torch.mul``."""

    op_type = "Mul"
    slots, attribute_defaults = onnx_signature("Mul")
    function = torch.mul


class Div(_Binary):
    """ONNX ``Div``: ``torch.div``."""

    op_type = "Div"
    slots, attribute_defaults = onnx_signature("Div")
    function = torch.div


class Sum(_Broadcasting):
    """ONNX ``Sum`` of one or more inputs: a chain of ``torch.add``."""

    op_type = "Sum"
    slots, attribute_defaults = onnx_signature("Sum")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        add = torch.add

        def kernel(first: torch.Tensor, *rest: torch.Tensor) -> tuple[torch.Tensor]:
            total = first
            for x in rest:
                total = add(total, x)
            return (total,)

        return kernel


class Identity(TorchOperator):
    """ONNX ``Identity``: the input tensor itself."""

    op_type = "Identity"
    slots, attribute_defaults = onnx_signature("Identity")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        return lambda x: (x,)
