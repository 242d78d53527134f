"""Windowed operators as JAX functions: Conv, ConvTranspose, MaxPool (with its
optional Indices output), AveragePool, GlobalAveragePool and GlobalMaxPool.

The window geometry (strides, pads, dilations, ``auto_pad``, ceil mode, output padding)
comes from :mod:`d5core.onnx`, so it matches d5's other executors.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from d5_plugin_jax.graph._common import Out, fail, ints, jnp, lax, shape_of
from d5_plugin_jax.graph.registry import NodeContext, op
from d5core.onnx import average_pool_divisors, conv_transpose_window, spatial_window

__all__: list[str] = []  # importing the module registers its translations


def _read_ints(ctx: NodeContext) -> Callable[[str], Sequence[int] | None]:
    return lambda name: ints(ctx, name)


def _dimension_numbers(rank: int) -> tuple[str, str, str]:
    spatial = "DHW"[3 - rank :] if rank <= 3 else "".join(chr(ord("a") + i) for i in range(rank))
    return (f"NC{spatial}", f"OI{spatial}", f"NC{spatial}")


def _window(ctx: NodeContext, x: Any, kernel: Sequence[int], fit: bool = True) -> Any:
    auto_pad = str(ctx.attrs.get("auto_pad", "NOTSET"))
    return spatial_window(
        ctx.node.op_type, shape_of(x)[2:], list(kernel), auto_pad, _read_ints(ctx), fit=fit
    )


@op("Conv")
def _conv(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x, w = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    b = inputs[2] if len(inputs) > 2 else None
    group = int(ctx.attrs.get("group", 1))
    kernel = ints(ctx, "kernel_shape") or list(shape_of(w)[2:])
    if x.ndim < 3 or w.ndim != x.ndim or x.shape[1] != w.shape[1] * group:
        raise fail(
            ctx,
            f"X of shape {shape_of(x)} and W of shape {shape_of(w)} do not match (group {group})",
        )
    win = _window(ctx, x, kernel)
    y = lax.conv_general_dilated(
        x, w, window_strides=win.strides, padding=list(win.pads),
        rhs_dilation=win.dilations, dimension_numbers=_dimension_numbers(x.ndim - 2),
        feature_group_count=group,
    )  # fmt: skip
    if b is not None:
        y = y + jnp.reshape(jnp.asarray(b), (1, -1) + (1,) * (x.ndim - 2))
    return [y]


@op("ConvTranspose")
def _conv_transpose(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x, w = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    b = inputs[2] if len(inputs) > 2 else None
    group = int(ctx.attrs.get("group", 1))
    geometry: Any = conv_transpose_window(
        "ConvTranspose", shape_of(x), shape_of(w), None if b is None else shape_of(b), group,
        str(ctx.attrs.get("auto_pad", "NOTSET")), _read_ints(ctx),
    )  # fmt: skip
    win = geometry.window
    rank = x.ndim - 2
    channels, per_group = w.shape[0], w.shape[1]
    # (C, M/g, k...) -> (M, C/g, k...), kernel flipped: a transposed convolution is the
    # convolution of the stride-dilated input with the flipped, transposed kernel
    wg = jnp.reshape(w, (group, channels // group, per_group, *w.shape[2:]))
    wg = jnp.swapaxes(wg, 1, 2).reshape((group * per_group, channels // group, *w.shape[2:]))
    wg = jnp.flip(wg, axis=tuple(range(2, 2 + rank)))
    pads = []
    for k, (b0, e0), op_pad in zip(
        win.effective_kernel, win.pads, geometry.output_padding, strict=True
    ):
        pads.append((k - 1 - b0, k - 1 - e0 + op_pad))
    y = lax.conv_general_dilated(
        x, wg, window_strides=(1,) * rank, padding=pads, lhs_dilation=win.strides,
        rhs_dilation=win.dilations, dimension_numbers=_dimension_numbers(rank),
        feature_group_count=group,
    )  # fmt: skip
    if b is not None:
        y = y + jnp.reshape(jnp.asarray(b), (1, -1) + (1,) * rank)
    return [y]


def _pool_window(ctx: NodeContext, x: Any) -> tuple[Any, tuple[int, ...], list[tuple[int, int]]]:
    """The window, the output sizes and the padding (pads plus any ceil-mode overhang)."""
    kernel = ints(ctx, "kernel_shape")
    if not kernel:
        raise fail(ctx, "kernel_shape is required")
    win = _window(ctx, x, kernel)
    outs = win.out_sizes(bool(int(ctx.attrs.get("ceil_mode", 0))))
    padding = []
    for size, (b, _), k, s, out in zip(
        win.sizes, win.pads, win.effective_kernel, win.strides, outs, strict=True
    ):
        need = (out - 1) * s + k - (size + b)
        padding.append((b, max(need, 0)))
    return win, outs, padding


def _crop(y: Any, outs: Sequence[int]) -> Any:
    return y[(slice(None), slice(None), *(slice(0, o) for o in outs))]


def _flat_indices(ctx: NodeContext, shape: Sequence[int]) -> Any:
    """The flat index of each element of a tensor of ``shape`` (N, C, spatial...), in
    row-major order, or with the spatial axes column-major when ``storage_order`` is 1."""
    rank = len(shape)
    column_major = int(ctx.attrs.get("storage_order", 0)) == 1
    order = [0, 1, *(reversed(range(2, rank)) if column_major else range(2, rank))]
    index = jnp.zeros(tuple(shape), np.int64)
    stride = 1
    for axis in reversed(order):
        index = index + lax.broadcasted_iota(np.int64, tuple(shape), axis) * stride
        stride *= int(shape[axis])
    return index


def _max_pool_indices(ctx: NodeContext, x: Any, win: Any, padding: Any, outs: Any) -> Any:
    """MaxPool's Indices output: where in X each maximum came from (the first one)."""

    def larger(a: Any, b: Any) -> Any:
        (av, ai), (bv, bi) = a, b
        take = (bv > av) | ((bv == av) & (bi < ai) & (bi >= 0)) | (ai < 0)
        return lax.select(take, bv, av), lax.select(take, bi, ai)

    values = lax.stop_gradient(x)
    low = (
        np.array(-np.inf, x.dtype)
        if jnp.issubdtype(x.dtype, jnp.floating)
        else (np.array(np.iinfo(x.dtype).min, x.dtype))
    )
    _, index = lax.reduce_window(
        (values, _flat_indices(ctx, x.shape)), (low, np.array(-1, np.int64)), larger,
        (1, 1, *win.kernel), (1, 1, *win.strides), [(0, 0), (0, 0), *padding],
        window_dilation=(1, 1, *win.dilations),
    )  # fmt: skip
    return _crop(index, outs)


@op("MaxPool")
def _max_pool(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    win, outs, padding = _pool_window(ctx, x)
    # a numpy init value: JAX differentiates reduce_window only for known identities
    low = (
        np.array(-np.inf, x.dtype)
        if jnp.issubdtype(x.dtype, jnp.floating)
        else np.array(np.iinfo(x.dtype).min, x.dtype)
    )
    y = lax.reduce_window(
        x, low, lax.max, (1, 1, *win.kernel), (1, 1, *win.strides),
        [(0, 0), (0, 0), *padding], window_dilation=(1, 1, *win.dilations),
    )  # fmt: skip
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        return [_crop(y, outs), _max_pool_indices(ctx, x, win, padding, outs)]
    return [_crop(y, outs)]


@op("AveragePool")
def _average_pool(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    win, outs, padding = _pool_window(ctx, x)
    total = lax.reduce_window(
        x, np.array(0, x.dtype), lax.add, (1, 1, *win.kernel), (1, 1, *win.strides),
        [(0, 0), (0, 0), *padding], window_dilation=(1, 1, *win.dilations),
    )  # fmt: skip
    include = bool(int(ctx.attrs.get("count_include_pad", 0)))
    divisors = average_pool_divisors(win, outs, count_include_pad=include)
    return [(_crop(total, outs) / jnp.asarray(divisors, x.dtype)).astype(x.dtype)]


@op("GlobalAveragePool")
def _global_average_pool(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    return [jnp.mean(x, axis=tuple(range(2, x.ndim)), keepdims=True)]


@op("GlobalMaxPool")
def _global_max_pool(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    return [jnp.max(x, axis=tuple(range(2, x.ndim)), keepdims=True)]
