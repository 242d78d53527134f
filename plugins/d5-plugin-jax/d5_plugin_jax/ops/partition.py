"""Operators that keep a part of an array: ``Split`` (consecutive pieces along an axis)
and ``Trilu`` (a triangle of the last two axes). Their integer inputs (``split``, ``k``)
are read when the kernel is built."""

from __future__ import annotations

import numpy as np

from d5_plugin_jax.ops._base import JaxOperator, Kernel, Signature, jax
from d5core.onnx import SplitRules, TriluRules

__all__ = ["Split", "Trilu"]


class Split(SplitRules, JaxOperator):
    """ONNX ``Split`` (opset 18): pieces of the sizes the ``split`` input gives, or
    ``num_outputs`` pieces of ``ceil(length / num_outputs)`` with a smaller last one;
    exactly one of the two is given. Each piece is a ``lax.slice_in_dim``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        sizes = self._sizes(sig)
        data = sig.shapes[0]
        assert sizes is not None and data is not None
        axis = self.axis % len(data)
        starts = [int(s) for s in np.cumsum([0, *sizes[:-1]])]
        piece = jax.lax.slice_in_dim
        bounds = list(zip(starts, sizes, strict=True))
        return lambda x: tuple(piece(x, s, s + n, axis=axis) for s, n in bounds)


class Trilu(TriluRules, JaxOperator):
    """ONNX ``Trilu`` (opset 14): the upper (``upper=1``) or lower triangle of the last
    two axes, from diagonal ``k`` (the optional scalar input, 0 when absent) on, the rest
    zero: ``jnp.triu`` or ``jnp.tril``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        k = self._k(sig)
        assert k is not None
        tri = jax.numpy.triu if self.upper else jax.numpy.tril
        return lambda x: (tri(x, k),)
