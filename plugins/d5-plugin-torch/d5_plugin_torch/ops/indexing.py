"""Indexing and shape-valued operators: ``Gather``, ``GatherElements``, ``Slice``,
``Shape``, ``ConstantOfShape``, ``Expand``, ``Where`` and ``Cast``.

Index tensors (``Gather``'s indices) reach the kernel as int64 tensors, so the timed call
is the torch gather itself; ONNX's negative indices are wrapped inside the kernel, and
only when the indices hold one. Integer inputs that fix the result's shape (``Slice``'s
bounds, ``Expand``'s and ``ConstantOfShape``'s shape) are read when the kernel is built,
as ``Reshape``'s shape is.
"""

from __future__ import annotations

import torch

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator, torch_dtype_of
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
]


class Gather(GatherRules, TorchOperator):
    """ONNX ``Gather``: entries of ``data`` along ``axis`` picked by ``indices`` of any
    shape, by ``torch.index_select`` on the flattened indices and a reshape. The output
    has shape ``data[:axis] + indices + data[axis + 1:]``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        axis = self._axis(sig)
        data, indices = sig.shapes[0], sig.shapes[1]
        assert data is not None and indices is not None
        out = (*data[:axis], *indices, *data[axis + 1 :])
        n = data[axis]
        index_select = torch.index_select
        if self._negative(sig):

            def wrapped(x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor]:
                flat = torch.remainder(idx.reshape(-1), n)
                return (index_select(x, axis, flat).reshape(out),)

            return wrapped

        def kernel(x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor]:
            return (index_select(x, axis, idx.reshape(-1)).reshape(out),)

        return kernel


class GatherElements(GatherElementsRules, TorchOperator):
    """ONNX ``GatherElements``: ``out[i][j] = data[indices[i][j]][j]`` for ``axis=0``
    (and so on), by ``torch.gather``; the output has the shape of ``indices``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        axis = self._axis(sig)
        data = sig.shapes[0]
        assert data is not None
        n, gather = data[axis], torch.gather
        if self._negative(sig):

            def wrapped(x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor]:
                return (gather(x, axis, torch.remainder(idx, n)),)

            return wrapped
        return lambda x, idx: (gather(x, axis, idx),)


class Slice(SliceRules, TorchOperator):
    """ONNX ``Slice`` (opset 13: ``starts``, ``ends``, ``axes`` and ``steps`` are
    inputs). Positive steps are a strided view (Python slicing of the tensor); an axis
    with a negative step is flipped by ``torch.flip`` and then sliced with the positive
    step."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        flips, key = self._index(sig)
        if flips:
            flip = torch.flip
            return lambda x, *_: (flip(x, flips)[key],)
        return lambda x, *_: (x[key],)


class Shape(ShapeRules, TorchOperator):
    """ONNX ``Shape`` (opset 15: ``start`` and ``end`` pick a range of the axes, clamped
    like Python's slicing): the input's shape, read from the tensor when called by
    ``torch._shape_as_tensor`` (what torch's own ONNX export calls; an int64 tensor in
    host memory, where shapes live), then sliced. Its output does not depend on the
    values of its input, which gets no gradient."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        span, shape_of = slice(self.start, self.end), torch._shape_as_tensor
        return lambda x: (shape_of(x)[span],)


class ConstantOfShape(ConstantOfShapeRules, TorchOperator):
    """ONNX ``ConstantOfShape``: a tensor of the shape given as input filled with the
    one-element ``value`` attribute (float32 zero by default), by ``torch.full``. It has
    no gradient."""

    no_gradient = True

    def configure(self) -> None:
        super().configure()
        self.torch_dtype = torch_dtype_of(self.dtype)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        shape = self._shape(sig)
        assert shape is not None
        full, value, dtype, device = torch.full, self.value, self.torch_dtype, self.torch_device
        return lambda *_: (full(shape, value, dtype=dtype, device=device),)


class Expand(ExpandRules, TorchOperator):
    """ONNX ``Expand``: the input broadcast with the ``shape`` input (both ways, as
    numpy broadcasts), by ``Tensor.expand``, a view as in torch."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self._target(sig)
        assert target is not None
        return lambda x, *_: (x.expand(target),)


class Where(WhereRules, TorchOperator):
    """ONNX ``Where``: ``X`` where ``condition`` holds, else ``Y``, all three broadcast
    together, by ``torch.where``; no gradient for the condition."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        where = torch.where
        return lambda c, x, y: (where(c, x, y),)


class Cast(CastRules, TorchOperator):
    """ONNX ``Cast`` to the element type ``to``, by ``Tensor.to``. A cast between
    floating types passes the gradient back (cast to the input's type); a cast to an
    integer or boolean type has none."""

    def configure(self) -> None:
        super().configure()
        self.torch_target = torch_dtype_of(self.target)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self.torch_target
        return lambda x: (x.to(target),)
