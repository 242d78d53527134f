"""Element-wise math: the comparisons ``Equal``, ``Less`` and ``Greater`` (boolean
results, zero gradients), ``Pow``, ``Sqrt``, ``Erf``, ``Exp``, ``Log`` and ``Gelu``; and
the reductions ``ReduceMean``, ``ReduceSum`` and ``ReduceMax``."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import torch
import torch.nn.functional as F

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5_plugin_torch.ops.elementwise import _Binary, _Broadcasting
from d5core.onnx import (
    GeluRules,
    ReduceMaxRules,
    ReduceMeanRules,
    ReduceRules,
    ReduceSumRules,
    onnx_signature,
)

__all__ = [
    "Equal",
    "Erf",
    "Exp",
    "Gelu",
    "Greater",
    "Less",
    "Log",
    "Pow",
    "ReduceMax",
    "ReduceMean",
    "ReduceSum",
    "Sqrt",
]


class _Comparison(_Binary):
    """A comparison: its bool result is piecewise constant, so the floating inputs get
    zero gradients (exact away from the points where the result flips)."""


class Equal(_Comparison):
    """ONNX ``Equal``: ``torch.eq``, a bool tensor."""

    op_type = "Equal"
    slots, attribute_defaults = onnx_signature("Equal")
    function = torch.eq


class Less(_Comparison):
    """ONNX ``Less``: ``torch.lt``, a bool tensor."""

    op_type = "Less"
    slots, attribute_defaults = onnx_signature("Less")
    function = torch.lt


class Greater(_Comparison):
    """ONNX ``Greater``: ``torch.gt``, a bool tensor."""

    op_type = "Greater"
    slots, attribute_defaults = onnx_signature("Greater")
    function = torch.gt


class Pow(_Broadcasting):
    """ONNX ``Pow``: ``torch.pow``, with gradients for the base and the exponent (the
    latter ``X**Y * log X``, defined for a positive base)."""

    op_type = "Pow"
    slots, attribute_defaults = onnx_signature("Pow")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        power = torch.pow
        return lambda x, y: (power(x, y),)


class _Unary(TorchOperator):
    function: ClassVar[Callable[[torch.Tensor], torch.Tensor]]

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        function = type(self).function
        return lambda x: (function(x),)


class Sqrt(_Unary):
    """ONNX ``Sqrt``: ``torch.sqrt``."""

    op_type = "Sqrt"
    slots, attribute_defaults = onnx_signature("Sqrt")
    function = torch.sqrt


class Erf(_Unary):
    """ONNX ``Erf``: ``torch.erf``."""

    op_type = "Erf"
    slots, attribute_defaults = onnx_signature("Erf")
    function = torch.erf


class Exp(_Unary):
    """ONNX ``Exp``: ``torch.exp``."""

    op_type = "Exp"
    slots, attribute_defaults = onnx_signature("Exp")
    function = torch.exp


class Log(_Unary):
    """ONNX ``Log``: ``torch.log``."""

    op_type = "Log"
    slots, attribute_defaults = onnx_signature("Log")
    function = torch.log


class Gelu(GeluRules, TorchOperator):
    """ONNX ``Gelu`` (opset 20): ``F.gelu``, exact (``approximate="none"``, with the
    error function) or with the tanh approximation (``"tanh"``)."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        gelu, approximate = F.gelu, self.approximate
        return lambda x: (gelu(x, approximate=approximate),)


class _Reduce(ReduceRules, TorchOperator):
    """A reduction over ``axes`` (read by :class:`~d5core.onnx.ReduceRules`), by
    :attr:`function` with the dims and ``keepdim``."""

    function: ClassVar[Callable[..., torch.Tensor]]

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        dims = self._dims(sig)
        data = sig.shapes[0]
        assert dims is not None and data is not None
        if not dims and (self.noop or not data):
            return lambda x, *_: (x,)
        function, keepdim = type(self).function, self.keepdims
        return lambda x, *_: (function(x, dims, keepdim=keepdim),)


class ReduceMean(ReduceMeanRules, _Reduce):
    """ONNX ``ReduceMean``: ``torch.mean``."""

    function = torch.mean


class ReduceSum(ReduceSumRules, _Reduce):
    """ONNX ``ReduceSum``: ``torch.sum``."""

    function = torch.sum


class ReduceMax(ReduceMaxRules, _Reduce):
    """ONNX ``ReduceMax``: ``torch.amax``, whose gradient is shared evenly among the
    entries that tie for a maximum."""

    function = torch.amax
