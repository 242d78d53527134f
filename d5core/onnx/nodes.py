"""Reading ONNX nodes as Python and numpy values, for executors of any framework."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from d5core.errors import UsageError

__all__ = [
    "AUTO_PADS",
    "LEGACY_BROADCAST_OPS",
    "constant_value",
    "legacy_broadcast",
    "legacy_broadcast_shape",
    "node_attributes",
    "node_pads",
    "resolve_pads",
]

#: Element-wise operators whose versions before opset 7 broadcast ``B`` to ``A`` only
#: when asked, by the attributes ``broadcast`` and ``axis``.
LEGACY_BROADCAST_OPS = frozenset({"Add", "Sub", "Mul", "Div"})
#: The values of the ``auto_pad`` attribute of Conv, ConvTranspose and the pooling operators.
AUTO_PADS: tuple[str, ...] = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


def node_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """The node's attributes as Python values: tensors as numpy arrays, strings decoded."""
    attrs: dict[str, Any] = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        elif isinstance(value, bytes):
            value = value.decode()
        attrs[a.name] = value
    return attrs


def constant_value(node: onnx.NodeProto, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The value of a ``Constant`` or ``ConstantOfShape`` node (``inputs``: its inputs).

    :raises UsageError: naming the node when it carries no value this reader knows.
    """
    attrs = node_attributes(node)
    if node.op_type == "ConstantOfShape":
        value = np.asarray(attrs.get("value", np.zeros(1, np.float32)))
        shape = tuple(int(d) for d in np.asarray(inputs[0]).reshape(-1))
        return np.full(shape, value.reshape(-1)[0], dtype=value.dtype)
    for key, dtype in (
        ("value", None),
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise UsageError(f"node {node.name!r} (Constant): no supported value attribute")


def legacy_broadcast(
    op_type: str, opset: int, attributes: Mapping[str, Any]
) -> tuple[bool, int | None] | None:
    """``(broadcast, axis)`` of an Add, Sub, Mul or Div of opsets 1 to 6 (``axis`` is
    ``None`` when absent); ``None`` for any other node, whose numpy-style broadcasting
    needs no attribute.

    :raises UsageError: for an ``axis`` attribute on one of those operators from opset 7
        on, where it no longer exists (and ignoring it would give another result).
    """
    if op_type not in LEGACY_BROADCAST_OPS:
        return None
    axis = attributes.get("axis")
    if opset >= 7:
        if axis is not None:
            raise UsageError(
                f"{op_type} has an 'axis' attribute only before opset 7, and the model "
                f"imports opset {opset}; remove the attribute or import an older opset"
            )
        return None
    return bool(int(attributes.get("broadcast", 0))), None if axis is None else int(axis)


def legacy_broadcast_shape(
    a_shape: Sequence[int], b_shape: Sequence[int], *, broadcast: bool, axis: int | None
) -> tuple[int, ...]:
    """The shape to view ``B`` as so that numpy-style broadcasting computes an Add, Sub,
    Mul or Div of opsets 1 to 6.

    Those versions broadcast only when ``broadcast`` is 1, and only ``B`` to ``A``: ``B``
    has one element, or its shape equals the part of ``A``'s shape that starts at
    ``axis`` (by default the end of ``A``'s shape: suffix matching). Without
    ``broadcast`` the shapes must be equal.

    :raises UsageError: naming the shapes when they do not match in that way.
    """
    a, b = tuple(int(d) for d in a_shape), tuple(int(d) for d in b_shape)
    if not broadcast:
        if a != b:
            raise UsageError(
                f"inputs of shapes {a} and {b} differ, and before opset 7 broadcasting needs "
                f"the attribute broadcast=1"
            )
        return b
    if math.prod(b) == 1 and len(b) <= len(a):
        return ()
    start = len(a) - len(b) if axis is None else (axis + len(a) if axis < 0 else axis)
    if not 0 <= start <= len(a) - len(b) or a[start : start + len(b)] != b:
        at = "at the end" if axis is None else f"from axis {axis}"
        raise UsageError(
            f"input B of shape {b} does not match input A of shape {a} {at}, as "
            f"broadcast=1 needs before opset 7"
        )
    return b + (1,) * (len(a) - start - len(b))


def _per_axis(
    name: str, values: Sequence[int] | None, rank: int, default: int, where: str
) -> tuple[int, ...]:
    if values is None or len(values) == 0:
        return (default,) * rank
    out = tuple(int(v) for v in values)
    if len(out) != rank or any(v < 1 for v in out):
        raise UsageError(
            f"{where}attribute {name} must hold {rank} positive values, one per spatial "
            f"axis, not {list(out)}"
        )
    return out


def resolve_pads(
    spatial: Sequence[int],
    kernel: Sequence[int],
    *,
    auto_pad: str = "NOTSET",
    pads: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    op_type: str = "",
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The padding before and after each spatial axis of a Conv or pooling window, as
    ONNX defines ``auto_pad``: ``(begins, ends)``, one entry per axis.

    ``NOTSET`` takes ``pads`` (all begins, then all ends; none means no padding).
    ``VALID`` pads nothing. ``SAME_UPPER`` and ``SAME_LOWER`` pad so that an axis of
    ``size`` elements gives ``ceil(size / stride)`` windows, splitting the padding this
    needs in two, the odd element at the end (upper) or at the beginning (lower); they
    ignore ``pads``. A kernel of ``k`` elements with dilation ``d`` spans
    ``(k - 1) * d + 1`` of them. Output sizes are left to the caller: ``ceil_mode`` and
    the transposed convolution count them differently.

    :param spatial: the input's spatial sizes (its shape without N and C).
    :param kernel: the kernel's spatial sizes.
    :param strides: one per spatial axis, all 1 when ``None`` or empty; ``dilations``
        likewise.
    :param op_type: starts each error message (``"Conv: ..."``) when given.
    :raises UsageError: one line, for an ``auto_pad`` that is none of :data:`AUTO_PADS`,
        a kernel of another rank than the input, or ``pads``, ``strides`` or
        ``dilations`` of the wrong length or sign.
    """
    where = f"{op_type}: " if op_type else ""
    rank = len(spatial)
    if auto_pad not in AUTO_PADS:
        raise UsageError(f"{where}auto_pad must be one of {', '.join(AUTO_PADS)}, not {auto_pad!r}")
    if len(kernel) != rank:
        raise UsageError(
            f"{where}a kernel of shape {list(kernel)} does not fit {rank} spatial axes"
        )
    s = _per_axis("strides", strides, rank, 1, where)
    d = _per_axis("dilations", dilations, rank, 1, where)
    if auto_pad == "VALID":
        return (0,) * rank, (0,) * rank
    if auto_pad == "NOTSET":
        given = tuple(int(p) for p in pads) if pads is not None and len(pads) else (0,) * (2 * rank)
        if len(given) != 2 * rank or any(p < 0 for p in given):
            raise UsageError(
                f"{where}attribute pads must hold {2 * rank} non-negative values (begins, "
                f"then ends), not {list(given)}"
            )
        return given[:rank], given[rank:]
    begins: list[int] = []
    ends: list[int] = []
    for size, k, stride, dilation in zip(spatial, kernel, s, d, strict=True):
        windows = -(-int(size) // stride)
        total = max(0, (windows - 1) * stride + (int(k) - 1) * dilation + 1 - int(size))
        small, large = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else large)
        ends.append(large if auto_pad == "SAME_UPPER" else small)
    return tuple(begins), tuple(ends)


def node_pads(
    attributes: Mapping[str, Any],
    kernel: Sequence[int],
    x_shape: Sequence[int],
    *,
    op_type: str = "",
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """:func:`resolve_pads` for a node of Conv, ConvTranspose or pooling: its
    ``auto_pad``, ``pads``, ``strides`` and ``dilations`` read from ``attributes`` (as
    :func:`node_attributes` gives them), for an input of shape ``x_shape`` (N, C, then
    the spatial axes). ``op_type`` starts each error message when given."""
    return resolve_pads(
        x_shape[2:],
        kernel,
        auto_pad=attributes.get("auto_pad", "NOTSET"),
        pads=attributes.get("pads"),
        strides=attributes.get("strides"),
        dilations=attributes.get("dilations"),
        op_type=op_type,
    )
