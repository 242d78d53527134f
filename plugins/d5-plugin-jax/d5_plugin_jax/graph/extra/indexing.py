"""Index, scatter and rearrangement operators: Trilu, CumSum, CumProd, Einsum,
TopK, OneHot, Scatter/ScatterElements/ScatterND, GatherND, DepthToSpace,
SpaceToDepth, ReverseSequence, EyeLike, Det, NonZero and Compress (values known while
tracing only: their output shape depends on values), Range, TensorScatter,
CenterCropPad, BitCast and MaxUnpool.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import helper

from d5_plugin_jax.graph.attention import all_static, static_ints, where_of
from d5_plugin_jax.graph.extra._common import axis_index, jax, jnp, text, xp_for
from d5_plugin_jax.graph.registry import NodeContext, op, static_value
from d5core.api import UsageError

__all__: list[str] = []


@op("Trilu")
def trilu(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The upper (``upper=1``) or lower triangle of the last two axes, from diagonal ``k``."""
    x = inputs[0]
    k = (
        int(static_ints(ctx, inputs[1], "k").reshape(-1)[0])
        if len(inputs) > 1 and inputs[1] is not None
        else 0
    )
    xp = xp_for(x)
    return [xp.triu(x, k) if int(ctx.attrs.get("upper", 1)) else xp.tril(x, k)]


def _cumulative(ctx: NodeContext, inputs: Sequence[Any], product: bool) -> Any:
    x = jnp.asarray(inputs[0])
    axis = axis_index(ctx, int(static_ints(ctx, inputs[1], "axis").reshape(-1)[0]), x.ndim)
    exclusive = int(ctx.attrs.get("exclusive", 0))
    reverse = int(ctx.attrs.get("reverse", 0))
    if reverse:
        x = jnp.flip(x, axis)
    y = jnp.cumprod(x, axis=axis) if product else jnp.cumsum(x, axis=axis)
    if exclusive:
        fill = jnp.ones_like if product else jnp.zeros_like
        first = fill(jax.lax.slice_in_dim(y, 0, 1, axis=axis))
        y = jnp.concatenate([first, jax.lax.slice_in_dim(y, 0, x.shape[axis] - 1, axis=axis)], axis)
    if reverse:
        y = jnp.flip(y, axis)
    return y.astype(x.dtype)


@op("CumSum")
def cumsum(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Running sums along an axis (``exclusive``, ``reverse``)."""
    return [_cumulative(ctx, inputs, product=False)]


@op("CumProd")
def cumprod(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Running products along an axis (``exclusive``, ``reverse``)."""
    return [_cumulative(ctx, inputs, product=True)]


@op("Einsum")
def einsum(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Einstein summation of the inputs by ``equation``."""
    equation = text(ctx.attrs["equation"]).replace(" ", "")
    return [jnp.einsum(equation, *[jnp.asarray(x) for x in inputs])]


@op("TopK")
def top_k(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The ``k`` largest (or smallest) entries along ``axis`` and their indices, ties
    to the lower index."""
    x = jnp.asarray(inputs[0])
    k = int(static_ints(ctx, inputs[1], "k").reshape(-1)[0])
    axis = axis_index(ctx, int(ctx.attrs.get("axis", -1)), x.ndim)
    largest = int(ctx.attrs.get("largest", 1))
    moved = jnp.moveaxis(x, axis, -1)
    order = jnp.argsort(moved, axis=-1, stable=True, descending=bool(largest))[..., :k]
    values = jnp.take_along_axis(moved, order, axis=-1)
    return [jnp.moveaxis(values, -1, axis), jnp.moveaxis(order, -1, axis).astype(jnp.int64)]


@op("OneHot")
def one_hot(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``values[1]`` at each index (negative ones from the end), ``values[0]`` elsewhere,
    along a new axis of size ``depth``."""
    indices, values = jnp.asarray(inputs[0]), jnp.asarray(inputs[2])
    depth = int(static_value(ctx, inputs[1], "depth").astype(np.float64).reshape(-1)[0])
    axis = int(ctx.attrs.get("axis", -1))
    rank = indices.ndim + 1
    axis = axis_index(ctx, axis, rank)
    idx = jnp.where(indices < 0, indices + depth, indices)
    hot = jnp.arange(depth) == jnp.expand_dims(idx, -1)
    hot = jnp.moveaxis(hot, -1, axis)
    return [jnp.where(hot, values[1], values[0])]


def _scatter_index(ctx: NodeContext, data: Any, indices: Any, axis: int) -> tuple[Any, ...]:
    """Full index tuples addressing ``data`` for ``indices`` along ``axis``."""
    idx = jnp.where(indices < 0, indices + data.shape[axis], indices)
    grids = list(jnp.indices(idx.shape, sparse=True))
    grids[axis] = idx
    return tuple(grids)


def _reduced(ref: Any, reduction: str, ctx: NodeContext) -> Any:
    methods = {"none": ref.set, "add": ref.add, "mul": ref.multiply, "max": ref.max, "min": ref.min}
    if reduction not in methods:
        raise UsageError(f"{where_of(ctx)}: reduction {reduction!r} is not supported")
    return methods[reduction]


@op("ScatterElements", "Scatter")
def scatter_elements(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``data`` with ``updates`` written element by element along ``axis``."""
    data, indices, updates = (jnp.asarray(v) for v in inputs[:3])
    axis = axis_index(ctx, int(ctx.attrs.get("axis", 0)), data.ndim)
    ref = data.at[_scatter_index(ctx, data, indices, axis)]
    return [_reduced(ref, text(ctx.attrs.get("reduction", "none")), ctx)(updates)]


@op("ScatterND")
def scatter_nd(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``data`` with slices addressed by the last axis of ``indices`` replaced (or
    reduced) by ``updates``."""
    data, indices, updates = (jnp.asarray(v) for v in inputs[:3])
    depth = indices.shape[-1]
    dims = jnp.asarray(data.shape[:depth])
    idx = jnp.where(indices < 0, indices + dims, indices)
    ref = data.at[tuple(idx[..., i] for i in range(depth))]
    return [_reduced(ref, text(ctx.attrs.get("reduction", "none")), ctx)(updates)]


@op("GatherND")
def gather_nd(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Slices of ``data`` addressed by the last axis of ``indices``, after
    ``batch_dims`` leading axes shared by both."""
    data, indices = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    batch = int(ctx.attrs.get("batch_dims", 0))
    depth = indices.shape[-1]
    dims = jnp.asarray(data.shape[batch : batch + depth])
    idx = jnp.where(indices < 0, indices + dims, indices)
    lead = int(np.prod(data.shape[:batch]))
    flat_data = data.reshape((lead, *data.shape[batch:]))
    flat_idx = idx.reshape((lead, -1, depth))
    rows = jnp.arange(lead)[:, None]
    picked = flat_data[(rows, *(flat_idx[..., i] for i in range(depth)))]
    return [picked.reshape((*indices.shape[:-1], *data.shape[batch + depth :]))]


@op("DepthToSpace")
def depth_to_space(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Channels moved into blocks of space (``DCR`` or ``CRD`` order)."""
    x = jnp.asarray(inputs[0])
    b = int(ctx.attrs["blocksize"])
    n, c, h, w = x.shape
    if text(ctx.attrs.get("mode", "DCR")) == "CRD":
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return [y.reshape(n, c // (b * b), h * b, w * b)]


@op("SpaceToDepth")
def space_to_depth(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Blocks of space moved into channels (``DCR`` or ``CRD`` order)."""
    x = jnp.asarray(inputs[0])
    b = int(ctx.attrs["blocksize"])
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b)
    if text(ctx.attrs.get("mode", "DCR")) == "CRD":
        y = y.transpose(0, 1, 3, 5, 2, 4)
    else:
        y = y.transpose(0, 3, 5, 1, 2, 4)
    return [y.reshape(n, c * b * b, h // b, w // b)]


@op("ReverseSequence")
def reverse_sequence(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Each batch entry's first ``sequence_lens`` steps reversed along ``time_axis``."""
    x, lens = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    time_axis = int(ctx.attrs.get("time_axis", 0))
    batch_axis = int(ctx.attrs.get("batch_axis", 1))
    moved = jnp.moveaxis(x, (time_axis, batch_axis), (0, 1))
    t = jnp.arange(moved.shape[0])[:, None]
    src = jnp.where(t < lens[None, :], lens[None, :] - 1 - t, t)
    src = src.reshape(src.shape + (1,) * (moved.ndim - 2))
    picked = jnp.take_along_axis(moved, src, axis=0)
    return [jnp.moveaxis(picked, (0, 1), (time_axis, batch_axis))]


@op("EyeLike")
def eye_like(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Ones on diagonal ``k`` of a matrix shaped like the input."""
    shape = np.shape(inputs[0])
    dtype_code = ctx.attrs.get("dtype")
    dtype = (
        np.dtype(inputs[0].dtype)
        if dtype_code is None
        else helper.tensor_dtype_to_np_dtype(int(dtype_code))
    )
    return [np.eye(shape[0], shape[1], k=int(ctx.attrs.get("k", 0)), dtype=dtype)]


@op("Det")
def det(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Determinants of the trailing square matrices."""
    return [jnp.linalg.det(jnp.asarray(inputs[0]))]


@op("NonZero")
def non_zero(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The indices of the non-zero entries, ``(rank, count)``: only for values known
    while tracing (the count shapes the output)."""
    x = static_ints(ctx, np.asarray(inputs[0]) if all_static(inputs[0]) else inputs[0], "input")
    return [np.asarray(np.nonzero(x), np.int64)]


@op("Compress")
def compress(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The slices of ``input`` where ``condition`` holds (a static condition)."""
    keep = static_ints(ctx, inputs[1], "condition").astype(bool)
    axis = ctx.attrs.get("axis")
    x = inputs[0]
    xp = xp_for(x)
    if axis is None:
        return [xp.ravel(x)[np.nonzero(keep)[0]]]
    ax = axis_index(ctx, int(axis), np.ndim(x))
    return [xp.take(x, np.nonzero(keep)[0], axis=ax)]


@op("Range")
def range_(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``start, start + delta, ...`` below ``limit`` (above it for a negative delta),
    in the inputs' dtype; the three inputs are static."""
    start, limit, delta = (static_value(ctx, v, "start, limit and delta") for v in inputs[:3])
    dtype = np.asarray(start).dtype
    begin, end, step = (np.asarray(v).astype(np.float64).reshape(()) for v in (start, limit, delta))
    count = max(int(np.ceil((end - begin) / step)), 0)
    values = np.asarray(start).astype(np.float64) + np.arange(count) * step
    if np.issubdtype(dtype, np.integer):
        values = np.asarray(start) + np.arange(count) * np.asarray(delta)
    return [values.astype(dtype)]


@op("TensorScatter")
def tensor_scatter(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """A key/value cache with ``update`` written along ``axis`` at each batch entry's
    write index (wrapping around in ``circular`` mode)."""
    cache, update = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    index = inputs[2] if len(inputs) > 2 else None
    mode = text(ctx.attrs.get("mode", "linear"))
    axis = axis_index(ctx, int(ctx.attrs.get("axis", -2)), cache.ndim)
    batch = cache.shape[0]
    starts = jnp.zeros((batch,), jnp.int32) if index is None else jnp.asarray(index)
    positions = starts.reshape((batch,) + (1,) * axis) + jnp.arange(update.shape[axis]).reshape(
        (1,) * axis + (-1,)
    ).astype(starts.dtype)
    if mode == "circular":
        positions = positions % cache.shape[axis]
    grids = list(jnp.indices(update.shape[: axis + 1], sparse=True))
    grids[axis] = jnp.broadcast_to(positions, update.shape[: axis + 1])
    return [cache.at[tuple(grids)].set(update)]


@op("CenterCropPad")
def center_crop_pad(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The input cropped or zero-padded about its centre to ``shape`` on ``axes``."""
    x = jnp.asarray(inputs[0])
    shape = static_ints(ctx, inputs[1], "shape").reshape(-1)
    rank = x.ndim
    axes = [int(a) % rank for a in ctx.attrs.get("axes") or range(rank)]
    for axis, size in zip(axes, shape, strict=False):
        dim, size = x.shape[axis], int(size)
        if size < dim:
            x = jax.lax.slice_in_dim(x, (dim - size) // 2, (dim - size) // 2 + size, axis=axis)
        elif size > dim:
            widths = [(0, 0)] * rank
            widths[axis] = ((size - dim) // 2, size - dim - (size - dim) // 2)
            x = jnp.pad(x, widths)
    return [x]


@op("BitCast")
def bit_cast(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The input's bits read as another type of the same width."""
    x = jnp.asarray(inputs[0])
    target = np.dtype(helper.tensor_dtype_to_np_dtype(int(ctx.attrs["to"])))
    if np.dtype(x.dtype).itemsize != target.itemsize:
        raise UsageError(
            f"{where_of(ctx)}: BitCast needs types of the same width, not "
            f"{np.dtype(x.dtype)} and {target}"
        )
    if x.dtype == jnp.bool_:
        x = x.astype(jnp.uint8)
    return [jax.lax.bitcast_convert_type(x, target)]


@op("MaxUnpool")
def max_unpool(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The values put back at their flat ``indices`` (MaxPool's) in a zero tensor of
    the pooled input's size (or ``output_shape``)."""
    x, indices = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    kernel = [int(v) for v in ctx.attrs["kernel_shape"]]
    nd = len(kernel)
    strides = [int(v) for v in ctx.attrs.get("strides") or [1] * nd]
    pads = [int(v) for v in ctx.attrs.get("pads") or [0] * (2 * nd)]
    given = inputs[2] if len(inputs) > 2 else None
    if given is not None:
        shape = [int(v) for v in static_ints(ctx, given, "output_shape").reshape(-1)]
    else:
        spatial = [
            (x.shape[2 + i] - 1) * strides[i] + kernel[i] - pads[i] - pads[i + nd]
            for i in range(nd)
        ]
        shape = [x.shape[0], x.shape[1], *spatial]
    flat = jnp.zeros(int(np.prod(shape)), x.dtype)
    flat = flat.at[indices.reshape(-1)].set(x.reshape(-1))
    return [flat.reshape(shape)]
