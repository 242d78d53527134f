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
from d5core.onnx import integer_values, normalize_axes, onnx_signature

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


class Gelu(TorchOperator):
    """ONNX ``Gelu`` (opset 20): ``F.gelu``, exact (``approximate="none"``, with the
    error function) or with the tanh approximation (``"tanh"``)."""

    op_type = "Gelu"
    slots, attribute_defaults = onnx_signature("Gelu")

    def configure(self) -> None:
        approximate = str(self.attr("approximate"))
        if approximate not in ("none", "tanh"):
            raise self.fail(f"approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        gelu, approximate = F.gelu, self.approximate
        return lambda x: (gelu(x, approximate=approximate),)


class _Reduce(TorchOperator):
    """A reduction over ``axes``: an attribute (ReduceMean and ReduceMax before opset
    18) or an optional input (ReduceSum since 13, every reduction since 18), not both.
    Without axes every axis is reduced, or none with ``noop_with_empty_axes``;
    ``keepdims`` keeps the reduced axes with size 1."""

    function: ClassVar[Callable[..., torch.Tensor]]

    def configure(self) -> None:
        self.keepdims = bool(int(self.attr("keepdims")))
        self.noop = bool(int(self.attr("noop_with_empty_axes")))
        given = self.ints("axes") if "axes" in self.attribute_defaults else None
        self.axes_attribute = given

    def _dims(self, sig: Signature) -> tuple[int, ...] | None:
        """The reduced axes, non-negative; ``None`` when there is nothing to reduce or
        the values of the axes input are not known yet."""
        data = sig.shapes[0]
        assert data is not None
        given: list[int] | None = self.axes_attribute
        array = sig.arrays[1] if len(sig.arrays) > 1 else None
        if array is not None:
            self.require_rank(sig, 1, (1,), what="(the axes to reduce)")
            if given is not None:
                raise self.fail("axes given both as an attribute and as an input; give one")
            if not sig.values_known:
                return None
            given = integer_values(self.op_type, sig.slots[1].name, array)
        if not given:
            return () if self.noop else tuple(range(len(data)))
        return tuple(normalize_axes(self.op_type, given, len(data)))

    def check(self, sig: Signature) -> None:
        dims = self._dims(sig)
        data = sig.shapes[0]
        assert data is not None
        if dims and type(self).empty_refused and any(data[d] == 0 for d in dims):
            raise self.fail(
                f"cannot reduce data {self.format_shape(data)} along an empty axis of {dims}"
            )

    #: Whether reducing an axis of size 0 is refused (a maximum of nothing).
    empty_refused: ClassVar[bool] = False

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        dims = self._dims(sig)
        data = sig.shapes[0]
        assert dims is not None and data is not None
        if not dims and (self.noop or not data):
            return lambda x, *_: (x,)
        function, keepdim = type(self).function, self.keepdims
        return lambda x, *_: (function(x, dims, keepdim=keepdim),)


class ReduceMean(_Reduce):
    """ONNX ``ReduceMean``: ``torch.mean``."""

    op_type = "ReduceMean"
    slots, attribute_defaults = onnx_signature("ReduceMean")
    function = torch.mean


class ReduceSum(_Reduce):
    """ONNX ``ReduceSum``: ``torch.sum``."""

    op_type = "ReduceSum"
    slots, attribute_defaults = onnx_signature("ReduceSum")
    function = torch.sum


class ReduceMax(_Reduce):
    """ONNX ``ReduceMax``: ``torch.amax``, whose gradient is shared evenly among the
    entries that tie for a maximum."""

    op_type = "ReduceMax"
    slots, attribute_defaults = onnx_signature("ReduceMax")
    function = torch.amax
    empty_refused = True
