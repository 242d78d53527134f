"""Shape operators as JAX functions: Shape, Size, Reshape, Flatten, Transpose,
Squeeze, Unsqueeze, Concat, Split, Slice, Tile and Pad.

A value known while tracing (a shape, a constant) is reshaped, joined, split and sliced
in numpy, so that shape arithmetic computed from it stays static under ``jax.jit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from d5_plugin_jax.graph._common import Out, axes_input, fail, ints, jnp, shape_of
from d5_plugin_jax.graph.registry import NodeContext, is_static, op, static_value
from d5core.onnx import (
    flatten_target,
    normalize_axes,
    reshape_target,
    squeeze_axes,
    transpose_perm,
    unsqueeze_axes,
)

__all__: list[str] = []  # importing the module registers its translations


@op("Shape")
def _shape_op(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    shape = np.asarray(shape_of(inputs[0]), dtype=np.int64)
    start, end = ctx.attrs.get("start"), ctx.attrs.get("end")
    return [shape[slice(None if start is None else int(start), None if end is None else int(end))]]


@op("Size")
def _size(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    return [np.asarray(int(np.prod(shape_of(inputs[0]))), dtype=np.int64)]


def _reshape_to(x: Any, shape: Sequence[int]) -> Any:
    if is_static(x):
        return np.reshape(np.asarray(x), tuple(shape))
    return jnp.reshape(x, tuple(shape))


@op("Reshape")
def _reshape(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = inputs[0]
    if ctx.opset < 5:
        wanted = ints(ctx, "shape") or []
    else:
        wanted = [int(v) for v in static_value(ctx, inputs[1], "shape").ravel()]
    allowzero = bool(int(ctx.attrs.get("allowzero", 0)))
    return [_reshape_to(x, reshape_target(shape_of(x), wanted, allowzero=allowzero))]


@op("Flatten")
def _flatten(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = inputs[0]
    return [_reshape_to(x, flatten_target(shape_of(x), int(ctx.attrs.get("axis", 1))))]


@op("Transpose")
def _transpose(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    perm = transpose_perm(shape_of(inputs[0]), ints(ctx, "perm"))
    return [jnp.transpose(inputs[0], perm)]


@op("Squeeze")
def _squeeze(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = inputs[0]
    axes = squeeze_axes(shape_of(x), axes_input(ctx, inputs, 13))
    shape = [d for i, d in enumerate(shape_of(x)) if i not in axes]
    return [_reshape_to(x, shape)]


@op("Unsqueeze")
def _unsqueeze(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = inputs[0]
    axes = unsqueeze_axes(shape_of(x), axes_input(ctx, inputs, 13))
    shape = list(shape_of(x))
    for axis in axes:
        shape.insert(axis, 1)
    return [_reshape_to(x, shape)]


@op("Concat")
def _concat(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    values = [x for x in inputs if x is not None]
    axis = int(ctx.attrs.get("axis", 1 if ctx.opset < 4 else 0))
    if all(is_static(x) for x in values):
        return [np.concatenate([np.asarray(x) for x in values], axis=axis)]
    return [jnp.concatenate([jnp.asarray(x) for x in values], axis=axis)]


@op("Split")
def _split(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = inputs[0]
    rank = len(shape_of(x))
    axis = normalize_axes("Split", [int(ctx.attrs.get("axis", 0))], rank, "axis")[0]
    size = shape_of(x)[axis]
    if ctx.opset < 13:
        sizes = ints(ctx, "split")
    elif len(inputs) > 1 and inputs[1] is not None:
        sizes = [int(v) for v in static_value(ctx, inputs[1], "split").ravel()]
    else:
        sizes = None
    if sizes is None:
        count = int(ctx.attrs.get("num_outputs", len(ctx.node.output)))
        chunk = -(-size // count)
        sizes = [min(chunk, size - i * chunk) for i in range(count)]
    if sum(sizes) != size:
        raise fail(ctx, f"split sizes {sizes} do not add up to axis {axis}'s {size}")
    cuts = np.cumsum(sizes)[:-1].tolist()
    if is_static(x):
        return list(np.split(np.asarray(x), cuts, axis=axis))
    return list(jnp.split(x, cuts, axis=axis))


@op("Slice")
def _slice(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = inputs[0]
    shape = shape_of(x)
    if ctx.opset < 10:
        starts, ends = ints(ctx, "starts") or [], ints(ctx, "ends") or []
        axes = ints(ctx, "axes")
        steps = None
    else:

        def read(i: int, what: str) -> list[int] | None:
            if len(inputs) > i and inputs[i] is not None:
                return [int(v) for v in static_value(ctx, inputs[i], what).ravel()]
            return None

        starts, ends = read(1, "starts") or [], read(2, "ends") or []
        axes, steps = read(3, "axes"), read(4, "steps")
    axes = list(range(len(starts))) if axes is None else axes
    axes = normalize_axes("Slice", axes, len(shape))
    steps = [1] * len(starts) if steps is None else steps
    index: list[slice] = [slice(None)] * len(shape)
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        if step == 0:
            raise fail(ctx, "a step of 0")
        first, stop, stride = slice(start, end, step).indices(shape[axis])
        # a negative step running to the front ends at None, not at index -1 (the last)
        index[axis] = slice(first, None if stop < 0 else stop, stride)
    if is_static(x):
        return [np.asarray(x)[tuple(index)]]
    return [x[tuple(index)]]


@op("Tile")
def _tile(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    repeats = [int(v) for v in static_value(ctx, inputs[1], "repeats").ravel()]
    return [jnp.tile(inputs[0], repeats)]


@op("Pad")
def _pad(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    rank = x.ndim
    mode = str(ctx.attrs.get("mode", "constant"))
    if ctx.opset < 11:
        pads = ints(ctx, "pads") or [0] * 2 * rank
        value: Any = float(ctx.attrs.get("value", 0.0))
        axes = list(range(rank))
    else:
        pads = [int(v) for v in static_value(ctx, inputs[1], "pads").ravel()]
        value = inputs[2] if len(inputs) > 2 and inputs[2] is not None else 0
        if len(inputs) > 3 and inputs[3] is not None:
            axes = normalize_axes(
                "Pad", [int(v) for v in static_value(ctx, inputs[3], "axes").ravel()], rank
            )
        else:
            axes = list(range(rank))
    count = len(axes)
    widths = [(0, 0)] * rank
    for i, axis in enumerate(axes):
        widths[axis] = (pads[i], pads[i + count])
    if any(b < 0 or e < 0 for b, e in widths):
        index = tuple(
            slice(max(-b, 0), d - max(-e, 0)) for (b, e), d in zip(widths, x.shape, strict=True)
        )
        x = x[index]
        widths = [(max(b, 0), max(e, 0)) for b, e in widths]
    if mode == "constant":
        return [jnp.pad(x, widths, mode="constant", constant_values=jnp.asarray(value, x.dtype))]
    modes = {"reflect": "reflect", "edge": "edge", "wrap": "wrap"}
    if mode not in modes:
        raise fail(ctx, f"unknown mode {mode!r}; use constant, reflect, edge or wrap")
    return [jnp.pad(x, widths, mode=modes[mode])]
