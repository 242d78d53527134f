"""Operators that move or relabel elements: Reshape, Flatten, Transpose, Concat,
Squeeze and Unsqueeze.

Every output shape is worked out from the input's concrete shape (``ctx.shapes``) and
given to MXNet's ``reshape`` as it is, so ONNX's conventions (``0`` copies a dimension
unless ``allowzero``, negative axes) never meet MXNet's own special codes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import onnx

from d5_plugin_mxnet.graph.base import (
    Context,
    Reader,
    Shape,
    Translated,
    Translation,
    ints,
    node_error,
)

__all__ = ["OPS", "reshaped"]


def reshaped(node: onnx.NodeProto, shape: Shape, target: Sequence[int], allowzero: bool) -> Shape:
    """ONNX Reshape's output shape for an input of ``shape``."""
    dims = [shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
    known = math.prod(d for d in dims if d != -1)
    if dims.count(-1) > 1 or (dims.count(-1) == 1 and known == 0):
        raise node_error(node, f"cannot reshape {shape} to {list(target)}")
    if -1 in dims:
        dims[dims.index(-1)] = math.prod(shape) // known
    if math.prod(dims) != math.prod(shape):
        raise node_error(
            node, f"cannot reshape {shape} ({math.prod(shape)} elements) to {list(target)}"
        )
    return tuple(dims)


def _reshape(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    given = tr.static(node, 1)
    if given is None:
        raise node_error(node, "the shape input is missing")
    target, allowzero = ints(given), bool(int(a.get("allowzero", 0)))

    def reshape(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        return [ctx.F.reshape(xs[0], shape=reshaped(node, ctx.shapes[0], target, allowzero))]

    return Translated(reshape, [node.input[0]])


def _flatten(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    axis = int(a.get("axis", 1))

    def flatten(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        shape = ctx.shapes[0]
        ax = axis + len(shape) if axis < 0 else axis
        return [ctx.F.reshape(xs[0], shape=(math.prod(shape[:ax]), math.prod(shape[ax:])))]

    return Translated(flatten, [node.input[0]])


def _transpose(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    perm = a.get("perm")

    def transpose(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        axes = ints(perm) if perm is not None else list(reversed(range(len(ctx.shapes[0]))))
        return [ctx.F.transpose(xs[0], axes=tuple(axes))]

    return Translated(transpose, [node.input[0]])


def _concat(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    axis = int(a["axis"])

    def concat(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        rank = len(ctx.shapes[0])
        return [ctx.F.concat(*xs, dim=axis + rank if axis < 0 else axis)]

    return Translated(concat, list(node.input))


def _axes(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> list[int] | None:
    if "axes" in a:
        return ints(a["axes"])
    value = tr.static(node, 1)
    return None if value is None else ints(value)


def _squeeze(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    axes = _axes(node, a, tr)

    def squeeze(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        shape = ctx.shapes[0]
        drop = (
            {d % len(shape) for d in axes}
            if axes is not None
            else {i for i, d in enumerate(shape) if d == 1}
        )
        if any(shape[d] != 1 for d in drop):
            raise node_error(node, f"cannot squeeze axes {sorted(drop)} of shape {shape}")
        return [ctx.F.reshape(xs[0], shape=tuple(d for i, d in enumerate(shape) if i not in drop))]

    return Translated(squeeze, [node.input[0]])


def _unsqueeze(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    axes = _axes(node, a, tr) or []

    def unsqueeze(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        shape = list(ctx.shapes[0])
        rank = len(shape) + len(axes)
        for d in sorted(ax % rank for ax in axes):
            shape.insert(d, 1)
        return [ctx.F.reshape(xs[0], shape=tuple(shape))]

    return Translated(unsqueeze, [node.input[0]])


#: The translation of every operator type of this family.
OPS: dict[str, Translation] = {
    "Reshape": _reshape,
    "Flatten": _flatten,
    "Transpose": _transpose,
    "Concat": _concat,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
}
