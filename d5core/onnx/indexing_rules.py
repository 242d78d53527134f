"""ONNX rules of the operators that index, slice or cut a tensor, for every backend.

Like :mod:`d5core.onnx.operator_rules`, each class is a mixin over
:class:`~d5core.onnx.slotted_operator.SlottedOperator` for one ONNX operator: it reads
the attributes in ``configure``, reads and checks the inputs in ``check`` and computes
what the backend's ``build`` reuses (a slice plan, split sizes, a broadcast target).
Integer inputs that fix the result's shape (``Slice``'s bounds, ``Split``'s sizes,
``Expand``'s and ``ConstantOfShape``'s shape, ``Trilu``'s ``k``) are read from the
signature's values; the helpers return ``None`` while those are unknown.

Nothing here imports a framework.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from d5core.errors import UsageError
from d5core.onnx.checks import integer_values, normalize_axes
from d5core.onnx.signatures import onnx_signature
from d5core.onnx.slotted_operator import SlottedOperator

__all__ = [
    "ONNX_ELEMENT_TYPES",
    "CastRules",
    "ConstantOfShapeRules",
    "ExpandRules",
    "GatherElementsRules",
    "GatherRules",
    "ShapeRules",
    "SliceRules",
    "SplitRules",
    "TriluRules",
    "WhereRules",
    "cast_target",
    "slice_bounds",
]

Shape = tuple[int, ...]

#: ONNX ``TensorProto`` element types that d5 holds (numpy's names), by number.
ONNX_ELEMENT_TYPES: dict[int, str] = {
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
    if isinstance(to, int | np.integer) and not isinstance(to, bool):
        name = ONNX_ELEMENT_TYPES.get(int(to))
        if name is None:
            known = ", ".join(f"{k} ({v})" for k, v in ONNX_ELEMENT_TYPES.items())
            raise UsageError(
                f"{op_type}: to={int(to)} is not an element type d5 can hold; use {known}"
            )
        return name
    try:
        name = str(np.dtype(to))
    except TypeError:
        raise UsageError(
            f"{op_type}: to={to!r} is neither an ONNX type number nor a dtype"
        ) from None
    if name not in ONNX_ELEMENT_TYPES.values():
        raise UsageError(f"{op_type}: to={name} is not an element type d5 can hold")
    return name


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


# -- picking entries along an axis ------------------------------------------------------


class _AlongAxisIndices(SlottedOperator):
    """An operator that picks entries of ``data`` (its first input) along ``axis``."""

    def _axis(self, sig: Any) -> int:
        """``axis``, non-negative, once checked against the rank of ``data``."""
        data = self.require_rank(sig, 0, at_least=1)
        (axis,) = normalize_axes(self.op_type, [int(self.attr("axis"))], len(data), "axis")
        return axis

    def _check_in_range(self, sig: Any, axis: int, of_data: str = "") -> None:
        """Refuse a known index outside ``[-n, n)``, ``n`` the size of ``axis``;
        ``of_data`` follows the axis in the message."""
        data, values = sig.shapes[0], sig.arrays[1]
        if not sig.values_known or values is None or not np.size(values):
            return
        n = data[axis]
        array = np.asarray(values)
        bad = (array < -n) | (array >= n)
        if bad.any():
            raise self.fail(
                f"index {int(array[bad].reshape(-1)[0])} is out of range for axis {axis} of "
                f"size {n}{of_data}; indices must lie in [{-n}, {n - 1}]"
            )

    def _negative(self, sig: Any) -> bool:
        """Whether the known indices hold a negative one (to be wrapped)."""
        values = sig.arrays[1]
        return values is not None and bool((np.asarray(values) < 0).any())


class GatherRules(_AlongAxisIndices):
    """``Gather``: indices of any shape into ``axis``, within ``[-n, n)``."""

    op_type = "Gather"
    slots, attribute_defaults = onnx_signature("Gather")

    def check(self, sig: Any) -> None:
        axis = self._axis(sig)
        self._check_in_range(sig, axis, f" of data {self.format_shape(sig.shapes[0])}")


class GatherElementsRules(_AlongAxisIndices):
    """``GatherElements``: indices of the rank of ``data``, no larger off ``axis``."""

    op_type = "GatherElements"
    slots, attribute_defaults = onnx_signature("GatherElements")

    def check(self, sig: Any) -> None:
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
        self._check_in_range(sig, axis)


# -- slicing and cutting ----------------------------------------------------------------


class SliceRules(SlottedOperator):
    """``Slice`` (opset 13: ``starts``, ``ends``, ``axes`` and ``steps`` are inputs)."""

    op_type = "Slice"
    slots, attribute_defaults = onnx_signature("Slice")

    def _plan(self, sig: Any) -> list[tuple[int, int, int, int]] | None:
        """``(axis, start, count, step)`` per sliced axis, ``start`` counted in the input
        flipped along the axes of a negative step; ``None`` while the bounds are
        unknown."""
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

    def _index(self, sig: Any) -> tuple[tuple[int, ...], tuple[slice, ...]]:
        """The axes to flip, then the positive-step slices of the flipped input."""
        plan = self._plan(sig)
        data = sig.shapes[0]
        assert plan is not None and data is not None
        flips = tuple(axis for axis, _, _, step in plan if step < 0)
        index: list[slice] = [slice(None)] * len(data)
        for axis, first, count, step in plan:
            k = abs(step)
            index[axis] = slice(first, first + (count - 1) * k + 1 if count else first, k)
        return flips, tuple(index)

    def check(self, sig: Any) -> None:
        self._plan(sig)


class SplitRules(SlottedOperator):
    """``Split`` (opset 18): the sizes the ``split`` input gives, or ``num_outputs``
    pieces of ``ceil(length / num_outputs)`` with a smaller last one; exactly one of the
    two is given."""

    op_type = "Split"
    slots, attribute_defaults = onnx_signature("Split")

    def configure(self) -> None:
        self.axis = int(self.attr("axis"))
        count = self.attr("num_outputs")
        self.num_outputs = None if count is None else int(count)
        if self.num_outputs is not None and self.num_outputs < 1:
            raise self.fail(f"num_outputs must be 1 or more, not {self.num_outputs}")

    def _sizes(self, sig: Any) -> list[int] | None:
        """The size of each piece; ``None`` while the ``split`` input is unknown."""
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

    def check(self, sig: Any) -> None:
        self._sizes(sig)


class TriluRules(SlottedOperator):
    """``Trilu`` (opset 14): ``upper`` is 0 or 1; the optional ``k`` holds one value."""

    op_type = "Trilu"
    slots, attribute_defaults = onnx_signature("Trilu")

    def configure(self) -> None:
        upper = int(self.attr("upper"))
        if upper not in (0, 1):
            raise self.fail(f"upper must be 0 or 1, not {upper}")
        self.upper = bool(upper)

    def _k(self, sig: Any) -> int | None:
        """The diagonal (0 without ``k``); ``None`` while ``k`` is unknown."""
        self.require_rank(sig, 0, at_least=2)
        shape = sig.shapes[1] if len(sig.shapes) > 1 else None
        if shape is None:
            return 0
        if int(np.prod(shape, dtype=np.int64)) != 1:
            raise self.fail(f"k must hold one value, but has shape {self.format_shape(shape)}")
        if not sig.values_known:
            return None
        return integer_values(self.op_type, "k", sig.arrays[1])[0]

    def check(self, sig: Any) -> None:
        self._k(sig)


# -- shapes as values ---------------------------------------------------------------------


class ShapeRules(SlottedOperator):
    """``Shape`` (opset 15): ``start`` and ``end`` pick a range of the axes, clamped like
    Python's slicing."""

    op_type = "Shape"
    slots, attribute_defaults = onnx_signature("Shape")

    def configure(self) -> None:
        self.start = int(self.attr("start"))
        end = self.attr("end")
        self.end = None if end is None else int(end)


class ConstantOfShapeRules(SlottedOperator):
    """``ConstantOfShape``: the one-element ``value`` attribute (float32 zero by
    default) fills the shape the input gives. :attr:`dtype` is numpy's name of the
    value's type, :attr:`value` the Python scalar."""

    op_type = "ConstantOfShape"
    slots, attribute_defaults = onnx_signature("ConstantOfShape")

    def configure(self) -> None:
        given = self.attr("value")
        if type(given).__name__ == "TensorProto":  # as an ONNX graph stores it
            from onnx import numpy_helper

            given = numpy_helper.to_array(given)
        value = np.zeros(1, np.float32) if given is None else np.asarray(given)
        if value.size != 1:
            raise self.fail(f"value must hold one element, got shape {value.shape}")
        self.dtype = str(value.dtype)
        self.value: Any = value.reshape(-1)[0].item()

    def _shape(self, sig: Any) -> Shape | None:
        """The output shape; ``None`` while the input is unknown."""
        self.require_rank(sig, 0, (1,), what="(the output's shape)")
        if not sig.values_known:
            return None
        shape = integer_values(self.op_type, sig.slots[0].name, sig.arrays[0])
        if any(d < 0 for d in shape):
            raise self.fail(f"shape {shape} holds a negative size")
        return tuple(shape)

    def check(self, sig: Any) -> None:
        self._shape(sig)


class ExpandRules(SlottedOperator):
    """``Expand``: the input broadcast with the ``shape`` input, both ways."""

    op_type = "Expand"
    slots, attribute_defaults = onnx_signature("Expand")

    def _target(self, sig: Any) -> Shape | None:
        """The output shape; ``None`` while the ``shape`` input is unknown."""
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

    def check(self, sig: Any) -> None:
        self._target(sig)


class WhereRules(SlottedOperator):
    """``Where``: ``condition``, ``X`` and ``Y`` broadcast together."""

    op_type = "Where"
    slots, attribute_defaults = onnx_signature("Where")

    def check(self, sig: Any) -> None:
        shapes = [s for s in sig.shapes if s is not None]
        try:
            np.broadcast_shapes(*shapes)
        except ValueError:
            listed = ", ".join(self.format_shape(s) for s in shapes)
            raise self.fail(f"input shapes do not broadcast: {listed}") from None


class CastRules(SlottedOperator):
    """``Cast`` to the required ``to`` (:attr:`target`, numpy's name); a cast to a type
    that is not floating has no gradient."""

    op_type = "Cast"
    slots, attribute_defaults = onnx_signature("Cast")

    def configure(self) -> None:
        to = self.attr("to")
        if to is None:
            raise self.fail("attribute to is required")
        self.target = cast_target(self.op_type, to)

    def declares_no_gradient(self, index: int) -> bool:
        """A cast to a type that is not floating has no gradient."""
        if not np.issubdtype(np.dtype(self.target), np.floating):
            return True
        return super().declares_no_gradient(index)
