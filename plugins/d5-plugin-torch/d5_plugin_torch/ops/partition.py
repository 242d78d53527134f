"""Operators that keep a part of a tensor: ``Split`` (consecutive pieces along an axis,
by ``torch.split``) and ``Trilu`` (a triangle of the last two axes, by ``torch.triu`` or
``torch.tril``). Their integer inputs (``split``, ``k``) are read when the kernel is
built, as ``Slice``'s bounds are."""

from __future__ import annotations

import numpy as np
import torch

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5core.onnx import integer_values, onnx_signature

__all__ = ["Split", "Trilu"]


class Split(TorchOperator):
    """ONNX ``Split`` (opset 18): pieces of the sizes the ``split`` input gives, or
    ``num_outputs`` pieces of ``ceil(length / num_outputs)`` with a smaller last one;
    exactly one of the two is given. ``torch.split`` returns views, whose gradients
    autograd concatenates."""

    op_type = "Split"
    slots, attribute_defaults = onnx_signature("Split")

    def configure(self) -> None:
        self.axis = int(self.attr("axis"))
        count = self.attr("num_outputs")
        self.num_outputs = None if count is None else int(count)
        if self.num_outputs is not None and self.num_outputs < 1:
            raise self.fail(f"num_outputs must be 1 or more, not {self.num_outputs}")

    def _sizes(self, sig: Signature) -> list[int] | None:
        data = sig.shapes[0]
        assert data is not None
        rank = len(data)
        if not -rank <= self.axis < rank:
            raise self.fail(f"axis {self.axis} is out of range for rank {rank}")
        length = data[self.axis % rank]
        given = len(sig.shapes) > 1 and sig.shapes[1] is not None
        if given == (self.num_outputs is not None):
            raise self.fail("give either the input split or the attribute num_outputs, not both")
        if given:
            self.require_rank(sig, 1, (1,))
            if not sig.values_known:
                return None
            sizes = integer_values(self.op_type, "split", sig.arrays[1])
            if any(s < 0 for s in sizes) or sum(sizes) != length:
                raise self.fail(
                    f"split {sizes} must be non-negative sizes adding up to the axis length "
                    f"{length}"
                )
            return sizes
        assert self.num_outputs is not None
        chunk = -(-length // self.num_outputs)
        last = length - chunk * (self.num_outputs - 1)
        if last < 0:
            raise self.fail(
                f"an axis of length {length} cannot be cut into {self.num_outputs} pieces of "
                f"{chunk}; give split, or fewer outputs"
            )
        return [chunk] * (self.num_outputs - 1) + [last]

    def check(self, sig: Signature) -> None:
        self._sizes(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        sizes = self._sizes(sig)
        data = sig.shapes[0]
        assert sizes is not None and data is not None
        split, axis = torch.split, self.axis % len(data)
        return lambda x, *_: tuple(split(x, sizes, axis))


class Trilu(TorchOperator):
    """ONNX ``Trilu`` (opset 14): the upper (``upper=1``) or lower triangle of the last
    two axes, from diagonal ``k`` (the optional scalar input, 0 when absent) on, the rest
    zero: ``torch.triu`` or ``torch.tril`` with ``diagonal=k``."""

    op_type = "Trilu"
    slots, attribute_defaults = onnx_signature("Trilu")

    def configure(self) -> None:
        upper = int(self.attr("upper"))
        if upper not in (0, 1):
            raise self.fail(f"upper must be 0 or 1, not {upper}")
        self.upper = bool(upper)

    def _k(self, sig: Signature) -> int | None:
        self.require_rank(sig, 0, at_least=2)
        shape = sig.shapes[1] if len(sig.shapes) > 1 else None
        if shape is None:
            return 0
        if int(np.prod(shape, dtype=np.int64)) != 1:
            raise self.fail(f"k must hold one value, but has shape {self.format_shape(shape)}")
        if not sig.values_known:
            return None
        return integer_values(self.op_type, "k", sig.arrays[1])[0]

    def check(self, sig: Signature) -> None:
        self._k(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        k = self._k(sig)
        assert k is not None
        tri = torch.triu if self.upper else torch.tril
        return lambda x, *_: (tri(x, diagonal=k),)
