"""Checks of ONNX operator inputs and attributes that every operator backend shares.

An operator backend turns an ONNX operator into calls of its framework. Before it does,
it must check what it was given: the attribute names, how many inputs there are and of
which element types, their ranks, and for the shape operators the target shape the ONNX
semantics give. None of that touches a framework, so it lives here, once, and backends
call it (through :mod:`d5core.api`) with the operator type that starts every message.

Every function raises :class:`~d5core.errors.UsageError` with a one-line message that
starts with ``"<op_type>: "``, the form the CLI shows as a usage error.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np

from d5core.errors import UsageError

__all__ = [
    "DescribedInput",
    "InputSlot",
    "check_attribute_names",
    "check_class_labels",
    "check_concat_shapes",
    "check_float_dtypes",
    "check_per_channel",
    "check_rank",
    "check_scalar_input",
    "dropout_ratio",
    "flatten_target",
    "gemm_output_shape",
    "int_list_attribute",
    "integer_values",
    "is_integer_dtype",
    "match_input_slots",
    "normalize_axes",
    "reshape_target",
    "slot_has_no_gradient",
    "squeeze_axes",
    "transpose_perm",
    "unsqueeze_axes",
]


@dataclass(frozen=True)
class InputSlot:
    """One input of an operator, as ONNX names it.

    ``kind`` says what a backend does with it: ``"float"`` inputs are floating tensors
    handed to the framework (with gradients when ``differentiable``); ``"index"`` inputs
    are integer tensors handed to it (class labels, ``Gather``'s indices); ``"bool"``
    inputs are boolean tensors handed to it (``Where``'s condition); ``"static"`` inputs
    (shapes, axes, a dropout ratio) are read when the computation is built and never
    reach it.
    """

    name: str
    kind: Literal["float", "index", "bool", "static"] = "float"
    optional: bool = False
    #: The slot takes all remaining inputs (``Sum``, ``Concat``); only the last slot.
    variadic: bool = False
    differentiable: bool = True
    #: A ``"static"`` input that must hold integers (a shape, axes).
    integer: bool = False


class _HasDtype(Protocol):
    @property
    def dtype(self) -> Any: ...


class DescribedInput:
    """Stands in for an array when only its descriptor is known (``check_descriptors``):
    it has the ``shape`` and the ``dtype`` name, and no values."""

    def __init__(self, descriptor: Any) -> None:
        self.shape: tuple[int, ...] = tuple(int(d) for d in descriptor.shape)
        self.dtype: str = str(descriptor.dtype)


def _fail(op_type: str, message: str) -> UsageError:
    return UsageError(f"{op_type}: {message}")


def is_integer_dtype(dtype_name: str) -> bool:
    """Whether numpy knows ``dtype_name`` as an integer type (False for names it does not
    know, such as ``bfloat16``)."""
    try:
        return bool(np.issubdtype(np.dtype(dtype_name), np.integer))
    except TypeError:
        return False


# -- attributes -----------------------------------------------------------------------


def check_attribute_names(
    op_type: str, attributes: Mapping[str, Any], defaults: Mapping[str, Any]
) -> None:
    """Refuse an attribute that is not among ``defaults`` (the ones the operator takes)."""
    unknown = sorted(set(attributes) - set(defaults))
    if unknown:
        known = ", ".join(sorted(defaults)) or "none"
        raise UsageError(
            f"{op_type}: unknown attribute {', '.join(map(repr, unknown))}; it takes: {known}"
        )


def int_list_attribute(op_type: str, name: str, value: Any) -> list[int] | None:
    """The integer-list attribute ``name`` of value ``value`` (``None`` stays ``None``)."""
    if value is None:
        return None
    try:
        return [int(v) for v in value]
    except (TypeError, ValueError):
        raise _fail(
            op_type, f"attribute {name!r} must be a list of integers, got {value!r}"
        ) from None


# -- inputs -----------------------------------------------------------------------------


def match_input_slots(
    op_type: str, slots: Sequence[InputSlot], count: int
) -> tuple[InputSlot, ...]:
    """The slot of each of ``count`` inputs: optional slots may be left out at the end, a
    variadic last slot takes every remaining input."""
    if slots and slots[-1].variadic:
        fixed = tuple(slots[:-1])
        if count < len(fixed) + 1:
            raise _fail(
                op_type,
                f"takes at least {len(fixed) + 1} inputs "
                f"({', '.join(s.name for s in slots)}...), got {count}",
            )
        return (*fixed, *([slots[-1]] * (count - len(fixed))))
    required = sum(1 for s in slots if not s.optional)
    if not required <= count <= len(slots):
        names = ", ".join(s.name + ("?" if s.optional else "") for s in slots)
        span = str(required) if required == len(slots) else f"{required} to {len(slots)}"
        noun = "input" if span == "1" else "inputs"
        raise _fail(op_type, f"takes {span} {noun} ({names}), got {count}")
    return tuple(slots[:count])


def slot_has_no_gradient(slots: Sequence[InputSlot], index: int) -> bool:
    """Whether input ``index`` falls in a slot that is not ``"float"`` (``"static"``,
    ``"index"``, ``"bool"``), or in one marked not ``differentiable`` (False past the
    slots, unless the last is variadic)."""
    if not slots or (index >= len(slots) and not slots[-1].variadic):
        return False
    slot = slots[min(index, len(slots) - 1)]
    return slot.kind != "float" or not slot.differentiable


def check_float_dtypes(
    op_type: str,
    slots: Sequence[InputSlot],
    arrays: Sequence[_HasDtype | None],
    supported: Collection[str],
    backend: str,
) -> str | None:
    """Check the element types of inputs matched to ``slots``: a required input is
    present, float inputs share one type among ``supported`` (numpy names), index and
    integer inputs hold integers. Returns the float type's name (``None``: no float input).
    ``backend`` names the backend in the message about an unsupported type."""
    dtype: str | None = None
    first = ""
    for slot, array in zip(slots, arrays, strict=True):
        if array is None:
            if not slot.optional:
                raise _fail(op_type, f"input {slot.name} is required")
            continue
        name = str(array.dtype)
        if slot.kind == "float":
            if name not in supported:
                raise _fail(
                    op_type,
                    f"input {slot.name} has dtype {name}; the {backend} backend supports "
                    f"{', '.join(supported)}",
                )
            if dtype is None:
                dtype, first = name, slot.name
            elif name != dtype:
                raise _fail(
                    op_type,
                    f"input {slot.name} has dtype {name} but {first} has {dtype}; "
                    f"floating inputs must share one",
                )
        elif (slot.kind == "index" or slot.integer) and not is_integer_dtype(name):
            raise _fail(op_type, f"input {slot.name} must hold integers, got dtype {name}")
        elif slot.kind == "bool" and name != "bool":
            raise _fail(op_type, f"input {slot.name} must hold booleans, got dtype {name}")
    return dtype


def check_rank(
    op_type: str,
    name: str,
    shape: Sequence[int],
    ranks: Sequence[int] = (),
    *,
    at_least: int = 0,
    what: str = "",
    shown: str = "",
) -> None:
    """Refuse input ``name`` of ``shape`` unless its rank is one of ``ranks`` (when given)
    and at least ``at_least``. ``what`` describes the expected axes; ``shown`` is the
    shape as the backend writes it (by default, a Python tuple)."""
    if (ranks and len(shape) not in ranks) or len(shape) < at_least:
        if ranks:
            *others, last = (str(r) for r in ranks)
            expected = f"rank {', '.join(others)} or {last}" if others else f"rank {last}"
        else:
            expected = f"rank {at_least} or more"
        detail = f" {what}" if what else ""
        text = shown or str(tuple(shape))
        raise _fail(op_type, f"input {name} must have {expected}{detail}, got shape {text}")


# -- the shape operators -------------------------------------------------------------------


def integer_values(op_type: str, name: str, value: Any) -> list[int]:
    """The integers of input ``name`` (a shape, axes), which must be a 1-D integer tensor."""
    array = np.asarray(value)
    if not np.issubdtype(array.dtype, np.integer) or array.ndim > 1:
        raise _fail(
            op_type, f"input {name} must be a 1-D integer tensor, got {array.dtype} {array.shape}"
        )
    return [int(v) for v in array.reshape(-1)]


def normalize_axes(op_type: str, axes: Sequence[int], rank: int, name: str = "axes") -> list[int]:
    """``axes`` made non-negative for a tensor of ``rank``; each at most once."""
    wanted = list(axes)
    out = []
    for axis in wanted:
        if not -rank <= axis < rank:
            raise _fail(op_type, f"{name} {wanted} has {axis}, out of range for rank {rank}")
        out.append(axis % rank)
    if len(set(out)) != len(out):
        raise _fail(op_type, f"{name} {wanted} names an axis twice")
    return out


def reshape_target(
    data: tuple[int, ...], wanted: Sequence[int], *, allowzero: bool, op_type: str = "Reshape"
) -> tuple[int, ...]:
    """The shape ONNX ``Reshape`` gives data of shape ``data`` for the shape input
    ``wanted``: a 0 copies the input's dimension (unless ``allowzero``), a -1 is inferred."""
    wanted = list(wanted)
    target = [
        data[i] if d == 0 and not allowzero and i < len(data) else d for i, d in enumerate(wanted)
    ]
    if not allowzero and any(d == 0 for i, d in enumerate(wanted) if i >= len(data)):
        raise _fail(op_type, f"shape {wanted} copies (0) an axis that data {data} lacks")
    if any(d < -1 for d in target) or target.count(-1) > 1:
        raise _fail(op_type, f"shape {wanted} may hold one -1 and no other negative value")
    if allowzero and -1 in target and 0 in target:
        raise _fail(op_type, f"shape {wanted} holds both 0 and -1, impossible with allowzero=1")
    size, known = math.prod(data), math.prod(d for d in target if d != -1)
    if -1 in target:
        if known == 0 or size % known:
            raise _fail(op_type, f"data of shape {data} cannot be reshaped to {wanted}")
        target[target.index(-1)] = size // known
    elif known != size:
        raise _fail(
            op_type, f"data of shape {data} ({size} elements) cannot be reshaped to {wanted}"
        )
    return tuple(target)


def flatten_target(shape: tuple[int, ...], axis: int, op_type: str = "Flatten") -> tuple[int, int]:
    """The 2-D shape ONNX ``Flatten`` gives an input of ``shape``, split at ``axis``."""
    if not -len(shape) <= axis <= len(shape):
        raise _fail(op_type, f"axis {axis} is out of range for input of shape {shape}")
    if axis < 0:
        axis += len(shape)
    return math.prod(shape[:axis]), math.prod(shape[axis:])


def transpose_perm(
    shape: tuple[int, ...], perm: Sequence[int] | None, op_type: str = "Transpose"
) -> tuple[int, ...]:
    """The permutation of ONNX ``Transpose`` for an input of ``shape`` (``None``: reverse)."""
    if perm is None:
        return tuple(reversed(range(len(shape))))
    perm = list(perm)
    if sorted(perm) != list(range(len(shape))):
        raise _fail(
            op_type, f"perm {perm} is not a permutation of the {len(shape)} axes of {shape}"
        )
    return tuple(perm)


def check_concat_shapes(
    shapes: Sequence[tuple[int, ...]], axis: int, op_type: str = "Concat"
) -> int:
    """Check that inputs of ``shapes`` can be joined along ``axis`` (ONNX ``Concat``);
    returns the axis made non-negative."""
    first = shapes[0]
    if not first:
        raise _fail(op_type, "inputs must have rank 1 or more, got a scalar")
    (resolved,) = normalize_axes(op_type, [axis], len(first), "axis")
    for i, shape in enumerate(shapes[1:], start=1):
        if len(shape) != len(first) or any(
            a != b for j, (a, b) in enumerate(zip(shape, first, strict=True)) if j != resolved
        ):
            raise _fail(
                op_type,
                f"input {i} of shape {shape} does not match input 0 of shape {first} "
                f"off axis {axis}",
            )
    return resolved


def squeeze_axes(
    shape: tuple[int, ...], axes: Any | None, op_type: str = "Squeeze"
) -> tuple[int, ...]:
    """The axes ONNX ``Squeeze`` removes from an input of ``shape``, sorted: those of the
    ``axes`` input (a 1-D integer tensor), which must have size 1, or every axis of size 1
    when it is ``None``."""
    if axes is None:
        return tuple(i for i, d in enumerate(shape) if d == 1)
    wanted = integer_values(op_type, "axes", axes)
    dims = normalize_axes(op_type, wanted, len(shape))
    if any(shape[d] != 1 for d in dims):
        raise _fail(op_type, f"axes {wanted} of data {shape} are not all of size 1")
    return tuple(sorted(dims))


def unsqueeze_axes(
    shape: tuple[int, ...], axes: Any | None, op_type: str = "Unsqueeze"
) -> tuple[int, ...]:
    """The axes ONNX ``Unsqueeze`` inserts into an input of ``shape``, sorted, counted in
    the output's rank; ``axes`` (a 1-D integer tensor) is required."""
    if axes is None:
        raise _fail(op_type, "input axes is required")
    wanted = integer_values(op_type, "axes", axes)
    return tuple(sorted(normalize_axes(op_type, wanted, len(shape) + len(wanted))))


# -- linear algebra, normalization, losses ---------------------------------------------


def gemm_output_shape(
    a: tuple[int, ...],
    b: tuple[int, ...],
    c: tuple[int, ...] | None,
    *,
    trans_a: bool,
    trans_b: bool,
    op_type: str = "Gemm",
) -> tuple[int, int]:
    """The output shape ``(M, N)`` of ONNX ``Gemm`` for 2-D inputs A and B of shapes
    ``a`` and ``b`` (transposed by ``trans_a``, ``trans_b``), whose inner dimensions must
    agree, and C of shape ``c`` (``None``: absent), which must broadcast to it."""
    (m, k), (k2, n) = a[::-1] if trans_a else a, b[::-1] if trans_b else b
    if k != k2:
        raise _fail(
            op_type,
            f"inner dimensions differ: A' is ({m}, {k}) and B' is ({k2}, {n}) "
            f"(transA={int(trans_a)}, transB={int(trans_b)})",
        )
    if c is not None and (
        len(c) > 2 or any(d not in (1, t) for d, t in zip(c[::-1], (n, m), strict=False))
    ):
        raise _fail(op_type, f"input C of shape {c} does not broadcast to ({m}, {n})")
    return m, n


def check_per_channel(
    op_type: str, x: tuple[int, ...], inputs: Sequence[tuple[str, tuple[int, ...] | None]]
) -> None:
    """Check that each of ``inputs`` (name, shape) holds one value per channel (axis 1)
    of input X of shape ``x``, as ``BatchNormalization``'s scale, bias and statistics."""
    for name, shape in inputs:
        if shape != (x[1],):
            raise _fail(
                op_type,
                f"input {name} must have shape ({x[1]},), one value per channel of X {x}, "
                f"got {shape}",
            )


def check_scalar_input(op_type: str, name: str, shape: tuple[int, ...] | None) -> None:
    """Check that input ``name`` (``None``: absent) is a scalar or holds one value."""
    if shape not in (None, (), (1,)):
        raise _fail(op_type, f"input {name} must be a scalar, got shape {shape}")


def dropout_ratio(op_type: str, ratio: float) -> float:
    """``ratio``, a ``Dropout`` ratio, which must lie in [0, 1)."""
    if not 0.0 <= ratio < 1.0:
        raise _fail(op_type, f"ratio must lie in [0, 1), got {ratio}")
    return ratio


def check_class_labels(
    op_type: str,
    scores: tuple[int, ...],
    labels_shape: tuple[int, ...] | None,
    weights_shape: tuple[int, ...] | None,
    labels: Any | None,
    ignore_index: int | None,
) -> None:
    """Check the inputs of a classification loss such as ``SoftmaxCrossEntropyLoss``:
    labels of shape ``(N, ...)`` for scores of shape ``(N, C, ...)``, optional class
    weights of shape ``(C,)``, and (when ``labels`` holds the values) every label in
    ``[0, C)`` or equal to ``ignore_index``."""
    expected = (scores[0], *scores[2:])
    if labels_shape != expected:
        raise _fail(
            op_type,
            f"input labels must have shape {expected} (scores {scores} without C), "
            f"got {labels_shape}",
        )
    if weights_shape not in (None, (scores[1],)):
        raise _fail(op_type, f"input weights must have shape ({scores[1]},), got {weights_shape}")
    if labels is not None and np.size(labels):
        values = np.asarray(labels)
        bad = (values < 0) | (values >= scores[1])
        if ignore_index is not None:
            bad &= values != ignore_index
        if bad.any():
            raise _fail(
                op_type,
                f"labels must lie in [0, {scores[1]}) or equal ignore_index "
                f"({ignore_index}); found {int(values[bad][0])}",
            )
