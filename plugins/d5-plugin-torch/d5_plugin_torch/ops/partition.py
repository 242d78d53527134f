"""Operators that keep a part of a tensor: ``Split`` (consecutive pieces along an axis,
by ``torch.split``) and ``Trilu`` (a triangle of the last two axes, by ``torch.triu`` or
``torch.tril``). Their integer inputs (``split``, ``k``) are read when the kernel is
built, as ``Slice``'s bounds are."""

from __future__ import annotations

import torch

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5core.onnx import SplitRules, TriluRules

__all__ = ["Split", "Trilu"]


class Split(SplitRules, TorchOperator):
    """ONNX ``Split`` (opset 18): pieces of the sizes the ``split`` input gives, or
    ``num_outputs`` pieces of ``ceil(length / num_outputs)`` with a smaller last one;
    exactly one of the two is given. ``torch.split`` returns views, whose gradients
    autograd concatenates."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        sizes = self._sizes(sig)
        data = sig.shapes[0]
        assert sizes is not None and data is not None
        split, axis = torch.split, self.axis % len(data)
        return lambda x, *_: tuple(split(x, sizes, axis))


class Trilu(TriluRules, TorchOperator):
    """ONNX ``Trilu`` (opset 14): the upper (``upper=1``) or lower triangle of the last
    two axes, from diagonal ``k`` (the optional scalar input, 0 when absent) on, the rest
    zero: ``torch.triu`` or ``torch.tril`` with ``diagonal=k``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        k = self._k(sig)
        assert k is not None
        tri = torch.triu if self.upper else torch.tril
        return lambda x, *_: (tri(x, diagonal=k),)
