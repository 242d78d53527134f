"""Indexing and shape-valued operators: ``Gather``, ``GatherElements``, ``Slice``,
``Shape``, ``ConstantOfShape``, ``Expand``, ``Where`` and ``Cast``.

Index tensors (``Gather``'s indices) reach the kernel as int64 tensors, so the timed call
is the torch gather itself; ONNX's negative indices are wrapped inside the kernel, and
only when the indices hold one. Integer inputs that fix the result's shape (``Slice``'s
bounds, ``Expand``'s and ``ConstantOfShape``'s shape) are read when the kernel is built,
as ``Reshape``'s shape is.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator, torch_dtype_of
from d5core.api import UsageError
from d5core.onnx import integer_values, normalize_axes, onnx_signature

__all__ = [
    "Cast",
    "ConstantOfShape",
    "Expand",
    "Gather",
    "GatherElements",
    "Shape",
    "Slice",
    "Where",
    "cast_target",
    "slice_bounds",
]

#: ONNX ``TensorProto`` element types that numpy and torch both hold, by number.
_ONNX_TYPES: dict[int, str] = {
    1: "float32",
    2: "uint8",
    3: "int8",
    4: "uint16",
    5: "int16",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
    12: "uint32",
    13: "uint64",
}


def cast_target(op_type: str, to: Any) -> str:
    """The numpy name of the ONNX element type ``to`` (a ``TensorProto`` number, or a
    numpy dtype or its name); a one-line ``UsageError`` for a type d5 cannot hold."""
    if isinstance(to, bytes):
        to = to.decode()
    if isinstance(to, (int, np.integer)) and not isinstance(to, bool):
        name = _ONNX_TYPES.get(int(to))
        if name is None:
            known = ", ".join(f"{k} ({v})" for k, v in _ONNX_TYPES.items())
            raise _fail(op_type, f"to={int(to)} is not an element type d5 can hold; use {known}")
        return name
    try:
        name = str(np.dtype(to))
    except TypeError:
        raise _fail(op_type, f"to={to!r} is neither an ONNX type number nor a dtype") from None
    if name not in _ONNX_TYPES.values():
        raise _fail(op_type, f"to={name} is not an element type d5 can hold")
    return name


def _fail(op_type: str, message: str) -> UsageError:
    return UsageError(f"{op_type}: {message}")


def slice_bounds(start: int, end: int, step: int, dim: int) -> tuple[int, int, int]:
    """ONNX ``Slice``'s ``(start, end, count)`` along an axis of size ``dim``: negative
    bounds count from the end, then they are clamped to ``[0, dim]`` for a positive step
    and to ``[0, dim - 1]`` (start) and ``[-1, dim - 1]`` (end) for a negative one."""
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = min(max(start, 0), dim), min(max(end, 0), dim)
    else:
        start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    count = len(range(start, end, step)) if dim > 0 else 0
    return start, end, count


class _AlongAxis(TorchOperator):
    """An operator that picks entries of ``data`` (its first input) along ``axis``."""

    def _axis(self, sig: Signature) -> int:
        data = self.require_rank(sig, 0, at_least=1)
        (axis,) = normalize_axes(self.op_type, [int(self.attr("axis"))], len(data), "axis")
        return axis


class Gather(_AlongAxis):
    """ONNX ``Gather``: entries of ``data`` along ``axis`` picked by ``indices`` of any
    shape, by ``torch.index_select`` on the flattened indices and a reshape. The output
    has shape ``data[:axis] + indices + data[axis + 1:]``."""

    op_type = "Gather"
    slots, attribute_defaults = onnx_signature("Gather")

    def check(self, sig: Signature) -> None:
        axis = self._axis(sig)
        data, indices = sig.shapes[0], sig.arrays[1]
        assert data is not None
        if sig.values_known and indices is not None and np.size(indices):
            values = np.asarray(indices)
            n = data[axis]
            bad = (values < -n) | (values >= n)
            if bad.any():
                raise self.fail(
                    f"index {int(values[bad].reshape(-1)[0])} is out of range for axis "
                    f"{axis} of size {n} of data {self.format_shape(data)}; "
                    f"indices must lie in [{-n}, {n - 1}]"
                )

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        axis = self._axis(sig)
        data, indices = sig.shapes[0], sig.shapes[1]
        assert data is not None and indices is not None
        out = (*data[:axis], *indices, *data[axis + 1 :])
        n = data[axis]
        index_select = torch.index_select
        values = sig.arrays[1]
        if values is not None and bool((np.asarray(values) < 0).any()):

            def wrapped(x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor]:
                flat = torch.remainder(idx.reshape(-1), n)
                return (index_select(x, axis, flat).reshape(out),)

            return wrapped

        def kernel(x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor]:
            return (index_select(x, axis, idx.reshape(-1)).reshape(out),)

        return kernel


class GatherElements(_AlongAxis):
    """ONNX ``GatherElements``: ``out[i][j] = data[indices[i][j]][j]`` for ``axis=0``
    (and so on), by ``torch.gather``; the output has the shape of ``indices``."""

    op_type = "GatherElements"
    slots, attribute_defaults = onnx_signature("GatherElements")

    def check(self, sig: Signature) -> None:
        axis = self._axis(sig)
        data, shape = sig.shapes[0], sig.shapes[1]
        assert data is not None and shape is not None
        shown = self.format_shape(data), self.format_shape(shape)
        if len(shape) != len(data):
            raise self.fail(f"indices {shown[1]} must have the rank of data {shown[0]}")
        if any(i > d for a, (i, d) in enumerate(zip(shape, data, strict=True)) if a != axis):
            raise self.fail(
                f"indices {shown[1]} may not be larger than data {shown[0]} off axis {axis}"
            )
        values = sig.arrays[1]
        if sig.values_known and values is not None and np.size(values):
            n = data[axis]
            array = np.asarray(values)
            bad = (array < -n) | (array >= n)
            if bad.any():
                raise self.fail(
                    f"index {int(array[bad].reshape(-1)[0])} is out of range for axis "
                    f"{axis} of size {n}; indices must lie in [{-n}, {n - 1}]"
                )

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        axis = self._axis(sig)
        data = sig.shapes[0]
        assert data is not None
        n, gather = data[axis], torch.gather
        values = sig.arrays[1]
        if values is not None and bool((np.asarray(values) < 0).any()):

            def wrapped(x: torch.Tensor, idx: torch.Tensor) -> tuple[torch.Tensor]:
                return (gather(x, axis, torch.remainder(idx, n)),)

            return wrapped
        return lambda x, idx: (gather(x, axis, idx),)


class Slice(TorchOperator):
    """ONNX ``Slice`` (opset 13: ``starts``, ``ends``, ``axes`` and ``steps`` are
    inputs). Positive steps are a strided view (Python slicing of the tensor); an axis
    with a negative step is flipped by ``torch.flip`` and then sliced with the positive
    step."""

    op_type = "Slice"
    slots, attribute_defaults = onnx_signature("Slice")

    def _plan(self, sig: Signature) -> list[tuple[int, int, int, int]] | None:
        """``(axis, start, count, step)`` per sliced axis of the (flipped) input."""
        data = sig.shapes[0]
        assert data is not None
        for i in range(1, len(sig.shapes)):
            if sig.shapes[i] is not None:
                self.require_rank(sig, i, (1,))
        lengths = {sig.slots[i].name: s[0] for i, s in enumerate(sig.shapes[1:], 1) if s}
        if len(set(lengths.values())) > 1:
            listed = ", ".join(f"{k} {v}" for k, v in lengths.items())
            raise self.fail(f"starts, ends, axes and steps must have one length, got {listed}")
        if not sig.values_known:
            return None
        values = [None if a is None else np.asarray(a) for a in sig.arrays]
        names = [s.name for s in sig.slots]
        starts = integer_values(self.op_type, names[1], values[1])
        ends = integer_values(self.op_type, names[2], values[2])
        given_axes = values[3] if len(values) > 3 else None
        given_steps = values[4] if len(values) > 4 else None
        axes = (
            list(range(len(starts)))
            if given_axes is None
            else integer_values(self.op_type, names[3], given_axes)
        )
        axes = normalize_axes(self.op_type, axes, len(data))
        steps = (
            [1] * len(starts)
            if given_steps is None
            else integer_values(self.op_type, names[4], given_steps)
        )
        if 0 in steps:
            raise self.fail(f"steps {steps} hold a 0; every step must be nonzero")
        plan = []
        for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
            first, _, count = slice_bounds(start, end, step, data[axis])
            if step < 0:
                first = data[axis] - 1 - first
            plan.append((axis, first, count, step))
        return plan

    def check(self, sig: Signature) -> None:
        self._plan(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        plan = self._plan(sig)
        data = sig.shapes[0]
        assert plan is not None and data is not None
        flips = tuple(axis for axis, _, _, step in plan if step < 0)
        index: list[slice] = [slice(None)] * len(data)
        for axis, first, count, step in plan:
            k = abs(step)
            index[axis] = slice(first, first + (count - 1) * k + 1 if count else first, k)
        key = tuple(index)
        if flips:
            flip = torch.flip
            return lambda x, *_: (flip(x, flips)[key],)
        return lambda x, *_: (x[key],)


class Shape(TorchOperator):
    """ONNX ``Shape`` (opset 15: ``start`` and ``end`` pick a range of the axes, clamped
    like Python's slicing): the input's shape, read from the tensor when called by
    ``torch._shape_as_tensor`` (what torch's own ONNX export calls; an int64 tensor in
    host memory, where shapes live), then sliced. Its output does not depend on the
    values of its input, which gets no gradient."""

    op_type = "Shape"
    slots, attribute_defaults = onnx_signature("Shape")

    def configure(self) -> None:
        self.start = int(self.attr("start"))
        end = self.attr("end")
        self.end = None if end is None else int(end)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        span, shape_of = slice(self.start, self.end), torch._shape_as_tensor
        return lambda x: (shape_of(x)[span],)


class ConstantOfShape(TorchOperator):
    """ONNX ``ConstantOfShape``: a tensor of the shape given as input filled with the
    one-element ``value`` attribute (float32 zero by default), by ``torch.full``. It has
    no gradient."""

    op_type = "ConstantOfShape"
    slots, attribute_defaults = onnx_signature("ConstantOfShape")
    no_gradient = True

    def configure(self) -> None:
        given = self.attr("value")
        if type(given).__name__ == "TensorProto":  # as an ONNX graph stores it
            from onnx import numpy_helper

            given = numpy_helper.to_array(given)
        value = np.zeros(1, np.float32) if given is None else np.asarray(given)
        if value.size != 1:
            raise self.fail(f"value must hold one element, got shape {value.shape}")
        self.dtype = torch_dtype_of(value.dtype)
        self.value: Any = value.reshape(-1)[0].item()

    def _shape(self, sig: Signature) -> tuple[int, ...] | None:
        self.require_rank(sig, 0, (1,), what="(the output's shape)")
        if not sig.values_known:
            return None
        shape = integer_values(self.op_type, sig.slots[0].name, sig.arrays[0])
        if any(d < 0 for d in shape):
            raise self.fail(f"shape {shape} holds a negative size")
        return tuple(shape)

    def check(self, sig: Signature) -> None:
        self._shape(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        shape = self._shape(sig)
        assert shape is not None
        full, value, dtype, device = torch.full, self.value, self.dtype, self.torch_device
        return lambda *_: (full(shape, value, dtype=dtype, device=device),)


class Expand(TorchOperator):
    """ONNX ``Expand``: the input broadcast with the ``shape`` input (both ways, as
    numpy broadcasts), by ``Tensor.expand``, a view as in torch."""

    op_type = "Expand"
    slots, attribute_defaults = onnx_signature("Expand")

    def _target(self, sig: Signature) -> tuple[int, ...] | None:
        self.require_rank(sig, 1, (1,), what="(the shape to broadcast to)")
        data = sig.shapes[0]
        assert data is not None
        if not sig.values_known:
            return None
        shape = integer_values(self.op_type, sig.slots[1].name, sig.arrays[1])
        try:
            return tuple(int(d) for d in np.broadcast_shapes(data, tuple(shape)))
        except ValueError:
            raise self.fail(
                f"input of shape {self.format_shape(data)} does not broadcast with shape {shape}"
            ) from None

    def check(self, sig: Signature) -> None:
        self._target(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self._target(sig)
        assert target is not None
        return lambda x, *_: (x.expand(target),)


class Where(TorchOperator):
    """ONNX ``Where``: ``X`` where ``condition`` holds, else ``Y``, all three broadcast
    together, by ``torch.where``; no gradient for the condition."""

    op_type = "Where"
    slots, attribute_defaults = onnx_signature("Where")

    def check(self, sig: Signature) -> None:
        shapes = [s for s in sig.shapes if s is not None]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            listed = ", ".join(self.format_shape(s) for s in shapes)
            raise self.fail(f"input shapes do not broadcast: {listed}") from None

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        where = torch.where
        return lambda c, x, y: (where(c, x, y),)


class Cast(TorchOperator):
    """ONNX ``Cast`` to the element type ``to``, by ``Tensor.to``. A cast between
    floating types passes the gradient back (cast to the input's type); a cast to an
    integer or boolean type has none."""

    op_type = "Cast"
    slots, attribute_defaults = onnx_signature("Cast")

    def configure(self) -> None:
        to = self.attr("to")
        if to is None:
            raise self.fail("attribute to is required")
        self.target = cast_target(self.op_type, to)
        self.torch_target = torch_dtype_of(self.target)

    def declares_no_gradient(self, index: int) -> bool:
        """A cast to a type that is not floating has no gradient."""
        if not np.issubdtype(np.dtype(self.target), np.floating):
            return True
        return super().declares_no_gradient(index)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self.torch_target
        return lambda x: (x.to(target),)
