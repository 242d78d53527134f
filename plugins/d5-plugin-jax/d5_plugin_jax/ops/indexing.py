"""Indexing and shape-valued operators: ``Gather``, ``GatherElements``, ``Slice``,
``Shape``, ``ConstantOfShape``, ``Expand``, ``Where`` and ``Cast``.

Index arrays reach the compiled program as integers (int32 outside x64 mode, where JAX
has no int64; int64 under it); ONNX's negative indices are wrapped inside the program,
and only when the indices hold one. Integer inputs that fix the result's shape
(``Slice``'s bounds, ``Expand``'s and ``ConstantOfShape``'s shape) are read when the
kernel is built. Outputs JAX computes in 32 bits outside x64 mode (a ``Shape``, a
``Cast`` to int64) are given back in ONNX's type.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from d5_plugin_jax.ops._base import JaxOperator, Kernel, Signature, jnp
from d5core.onnx import (
    CastRules,
    ConstantOfShapeRules,
    ExpandRules,
    GatherElementsRules,
    GatherRules,
    ShapeRules,
    SliceRules,
    WhereRules,
)

__all__ = [
    "Cast",
    "ConstantOfShape",
    "Expand",
    "Gather",
    "GatherElements",
    "Shape",
    "Slice",
    "Where",
    "narrow_type",
]

#: What a 64-bit type is computed as outside x64 mode.
_NARROW = {"int64": "int32", "uint64": "uint32", "float64": "float32"}


def narrow_type(name: str, wide: bool) -> str:
    """The type JAX computes ``name`` as: itself under x64 mode, else its 32-bit kin."""
    return name if wide else _NARROW.get(name, name)


def _wrap(values: Any, n: int, negative: bool) -> Any:
    """``values`` with negative indices counted from the end (when any is negative)."""
    return jnp.where(values < 0, values + n, values) if negative else values


class Gather(GatherRules, JaxOperator):
    """ONNX ``Gather``: entries of ``data`` along ``axis`` picked by ``indices`` of any
    shape (``jnp.take``; the indices are checked to lie in range when prepared); the
    output has shape ``data[:axis] + indices + data[axis+1:]``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        axis = self._axis(sig)
        data = sig.shapes[0]
        assert data is not None
        n, negative = data[axis], self._negative(sig)

        def kernel(x: Any, idx: Any) -> tuple[Any]:
            return (jnp.take(x, _wrap(idx, n, negative), axis=axis, mode="clip"),)

        return kernel


class GatherElements(GatherElementsRules, JaxOperator):
    """ONNX ``GatherElements``: ``out[i][j] = data[indices[i][j]][j]`` for ``axis=0``
    (and so on), by ``jnp.take_along_axis``; the output has the shape of ``indices``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        axis = self._axis(sig)
        data, shape = sig.shapes[0], sig.shapes[1]
        assert data is not None and shape is not None
        n, negative = data[axis], self._negative(sig)
        # take_along_axis wants data and indices alike off the axis: keep the part used
        part = tuple(slice(None) if a == axis else slice(0, i) for a, i in enumerate(shape))

        def kernel(x: Any, idx: Any) -> tuple[Any]:
            return (jnp.take_along_axis(x[part], _wrap(idx, n, negative), axis=axis),)

        return kernel


class Slice(SliceRules, JaxOperator):
    """ONNX ``Slice`` (opset 13: ``starts``, ``ends``, ``axes`` and ``steps`` are
    inputs), read when the kernel is built: a strided slice, after ``jnp.flip`` of the
    axes with a negative step."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        flips, key = self._index(sig)
        if flips:
            return lambda x: (jnp.flip(x, flips)[key],)
        return lambda x: (x[key],)


class Shape(ShapeRules, JaxOperator):
    """ONNX ``Shape`` (opset 15: ``start`` and ``end`` pick a range of the axes, clamped
    like Python's slicing). Shapes are static in XLA: the compiled program returns a
    constant. Its input gets no gradient."""

    def _result_dtype(self, index: int, computed: Any, sig: Signature) -> np.dtype[Any] | None:
        return np.dtype(np.int64)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        data = sig.shapes[0]
        assert data is not None
        dims = list(data[self.start : self.end])
        dtype = "int64" if sig.wide else "int32"
        return lambda x: (jnp.asarray(dims, dtype=dtype),)


class ConstantOfShape(ConstantOfShapeRules, JaxOperator):
    """ONNX ``ConstantOfShape``: an array of the shape given as input filled with the
    one-element ``value`` attribute (float32 zero by default), by ``jnp.full``. It has no
    gradient."""

    no_gradient = True

    def _result_dtype(self, index: int, computed: Any, sig: Signature) -> np.dtype[Any] | None:
        return np.dtype(self.dtype)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        shape = self._shape(sig)
        assert shape is not None
        value, dtype = self.value, narrow_type(self.dtype, sig.wide)
        return lambda: (jnp.full(shape, value, dtype=dtype),)


class Expand(ExpandRules, JaxOperator):
    """ONNX ``Expand``: the input broadcast with the ``shape`` input (both ways, as
    numpy broadcasts), by ``jnp.broadcast_to``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self._target(sig)
        assert target is not None
        return lambda x: (jnp.broadcast_to(x, target),)


class Where(WhereRules, JaxOperator):
    """ONNX ``Where``: ``X`` where ``condition`` holds, else ``Y``, all three broadcast
    together, by ``jnp.where``; no gradient for the condition."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        return lambda c, x, y: (jnp.where(c, x, y),)


class Cast(CastRules, JaxOperator):
    """ONNX ``Cast`` to the element type ``to``, by ``astype`` (a 64-bit target is
    computed in 32 bits outside x64 mode and given back in its own type). A cast between
    floating types passes the gradient back; a cast to an integer or boolean type has
    none."""

    def _result_dtype(self, index: int, computed: Any, sig: Signature) -> np.dtype[Any] | None:
        return np.dtype(self.target)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = narrow_type(self.target, sig.wide)
        return lambda x: (x.astype(target),)
