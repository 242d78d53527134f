"""Sampling operators: GridSample, AffineGrid, RoiAlign, Col2Im and LpPool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from d5_plugin_jax.graph.attention import static_ints, where_of
from d5_plugin_jax.graph.extra._common import jax, jnp, text
from d5_plugin_jax.graph.registry import NodeContext, op
from d5core.api import UsageError

__all__: list[str] = []


def _reflect(x: Any, lo: float, hi: float) -> Any:
    """``x`` reflected at the borders ``lo`` and ``hi`` until it lies between them."""
    span = hi - lo
    below, above = lo - x, x - hi
    dist = jnp.where(x < lo, below, above)
    turns = jnp.floor(dist / span)
    rest = dist - turns * span
    even = jnp.mod(turns, 2) == 0
    from_low = jnp.where(even, lo + rest, hi - rest)
    from_high = jnp.where(even, hi - rest, lo + rest)
    return jnp.where(x < lo, from_low, jnp.where(x > hi, from_high, x))


def _keys_cubic(t: Any) -> list[Any]:
    """The four cubic convolution weights (Keys, ``a = -0.75``) at offset ``t``."""
    a = -0.75

    def near(s: Any) -> Any:
        return ((a + 2) * s - (a + 3)) * s * s + 1

    def far(s: Any) -> Any:
        return ((a * s - 5 * a) * s + 8 * a) * s - 4 * a

    return [far(t + 1), near(t), near(1 - t), far(2 - t)]


@op("GridSample")
def grid_sample(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``X`` sampled at the normalized coordinates of ``grid`` (nearest, linear or
    cubic; zeros, border or reflection padding; ``align_corners``), in 2-d or 3-d."""
    x, grid = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    mode = text(ctx.attrs.get("mode", "linear"))
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = text(ctx.attrs.get("padding_mode", "zeros"))
    align = bool(int(ctx.attrs.get("align_corners", 0)))
    dims = x.shape[2:]
    nd = len(dims)
    coords = grid.astype(jnp.float32)
    table = jnp.moveaxis(x, 1, -1)  # (N, *dims, C)
    batch = jnp.arange(x.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))
    lows = [0.0 if align else -0.5 for _ in dims]
    highs = [d - 1.0 if align else d - 0.5 for d in dims]
    taps: list[list[tuple[Any, Any]]] = []
    for i, d in enumerate(dims):
        n = coords[..., nd - 1 - i]
        pos = (n + 1) / 2 * (d - 1) if align else ((n + 1) * d - 1) / 2
        if mode == "nearest":
            pos = jnp.rint(pos)
        if padding == "border":
            pos = jnp.where((pos < lows[i]) | (pos > highs[i]), jnp.clip(pos, 0, d - 1), pos)
        elif padding == "reflection":
            pos = _reflect(pos, lows[i], highs[i])
        if mode == "nearest":
            taps.append([(pos.astype(jnp.int32), None)])
            continue
        base = jnp.floor(pos)
        t = pos - base
        start = base.astype(jnp.int32)
        if mode == "linear":
            taps.append([(start, 1 - t), (start + 1, t)])
        elif mode == "cubic":
            taps.append([(start + k - 1, w) for k, w in enumerate(_keys_cubic(t))])
        else:
            raise UsageError(f"{where_of(ctx)}: mode {mode!r} is not supported")

    def pixel(indices: Sequence[Any]) -> Any:
        valid = None
        picked = []
        for i, idx in enumerate(indices):
            d = dims[i]
            if padding == "zeros":
                inside = (idx >= 0) & (idx < d)
                valid = inside if valid is None else valid & inside
            elif padding == "reflection":
                idx = _reflect(idx.astype(jnp.float32), lows[i], highs[i]).astype(jnp.int32)
            picked.append(jnp.clip(idx, 0, d - 1))
        values = table[(batch, *picked)]
        if valid is not None:
            values = jnp.where(valid[..., None], values, 0)
        return values

    total: Any = None
    for combo in _product(taps):
        weight = None
        for _, w in combo:
            if w is not None:
                weight = w if weight is None else weight * w
        values = pixel([idx for idx, _ in combo])
        term = values if weight is None else values * weight[..., None].astype(values.dtype)
        total = term if total is None else total + term
    return [jnp.moveaxis(total, -1, 1).astype(x.dtype)]


def _product(taps: list[list[tuple[Any, Any]]]) -> list[list[tuple[Any, Any]]]:
    """Every choice of one tap per axis."""
    combos: list[list[tuple[Any, Any]]] = [[]]
    for axis_taps in taps:
        combos = [[*c, tap] for c in combos for tap in axis_taps]
    return combos


@op("AffineGrid")
def affine_grid(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The sampling grid of the affine maps ``theta`` over an output of ``size``
    (``(N, C, H, W)`` or ``(N, C, D, H, W)``), normalized to ``[-1, 1]``."""
    theta = jnp.asarray(inputs[0])
    size = [int(s) for s in static_ints(ctx, inputs[1], "size").reshape(-1)]
    align = bool(int(ctx.attrs.get("align_corners", 0)))
    spatial = size[2:]

    def axis_coords(d: int) -> np.ndarray:
        if align:
            return np.linspace(-1.0, 1.0, d) if d > 1 else np.array([-1.0])
        return (2 * np.arange(d) + 1) / d - 1

    mesh = np.meshgrid(*[axis_coords(d) for d in spatial], indexing="ij")
    homo = np.stack([*mesh[::-1], np.ones(spatial)], axis=-1)  # (..., x, y[, z], 1)
    grid = jnp.einsum("nij,...j->n...i", theta, jnp.asarray(homo, theta.dtype))
    return [grid.astype(theta.dtype)]


@op("Col2Im")
def col2im(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Sliding blocks ``(N, C * prod(block), L)`` summed back into images ``(N, C,
    *image_shape)`` (the inverse layout of im2col)."""
    x = jnp.asarray(inputs[0])
    image = [int(v) for v in static_ints(ctx, inputs[1], "image_shape").reshape(-1)]
    block = [int(v) for v in static_ints(ctx, inputs[2], "block_shape").reshape(-1)]
    nd = len(image)
    dil = [int(v) for v in ctx.attrs.get("dilations") or [1] * nd]
    strides = [int(v) for v in ctx.attrs.get("strides") or [1] * nd]
    pads = [int(v) for v in ctx.attrs.get("pads") or [0] * (2 * nd)]
    counts = [
        (image[i] + pads[i] + pads[i + nd] - dil[i] * (block[i] - 1) - 1) // strides[i] + 1
        for i in range(nd)
    ]
    offsets = np.stack(np.meshgrid(*[np.arange(b) for b in block], indexing="ij"), -1)
    places = np.stack(np.meshgrid(*[np.arange(c) for c in counts], indexing="ij"), -1)
    offsets, places = offsets.reshape(-1, nd), places.reshape(-1, nd)
    pos = (
        places[None, :, :] * np.asarray(strides)
        + offsets[:, None, :] * np.asarray(dil)
        - np.asarray(pads[:nd])
    )  # (blocks, L, nd)
    inside = np.all((pos >= 0) & (pos < np.asarray(image)), axis=-1)
    flat = np.ravel_multi_index(tuple(np.clip(pos, 0, np.asarray(image) - 1).T), image).T
    n, c = x.shape[0], x.shape[1] // len(offsets)
    values = x.reshape(n, c, len(offsets), -1) * jnp.asarray(inside, x.dtype)
    out = jnp.zeros((n, c, int(np.prod(image))), x.dtype)
    out = out.at[:, :, flat.reshape(-1)].add(values.reshape(n, c, -1))
    return [out.reshape(n, c, *image)]


@op("LpPool")
def lp_pool(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``(sum over the window of |x|^p)^(1/p)``, with ONNX's pads, strides, dilations,
    ``auto_pad`` and ``ceil_mode``."""
    x = jnp.asarray(inputs[0])
    kernel = [int(v) for v in ctx.attrs["kernel_shape"]]
    nd = len(kernel)
    p = float(ctx.attrs.get("p", 2))
    strides = [int(v) for v in ctx.attrs.get("strides") or [1] * nd]
    dil = [int(v) for v in ctx.attrs.get("dilations") or [1] * nd]
    pads = [int(v) for v in ctx.attrs.get("pads") or [0] * (2 * nd)]
    auto = text(ctx.attrs.get("auto_pad", "NOTSET"))
    spatial = x.shape[2:]
    widths = []
    for i in range(nd):
        span = (kernel[i] - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            total = max((-(-spatial[i] // strides[i]) - 1) * strides[i] + span - spatial[i], 0)
            small = total // 2
            lo, hi = (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
        elif auto == "VALID":
            lo, hi = 0, 0
        else:
            lo, hi = pads[i], pads[i + nd]
        if int(ctx.attrs.get("ceil_mode", 0)):
            size = spatial[i] + lo + hi - span
            out = -(-size // strides[i]) + 1
            if (out - 1) * strides[i] >= spatial[i] + lo:
                out -= 1
            hi += max((out - 1) * strides[i] + span - (spatial[i] + lo + hi), 0)
        widths.append((lo, hi))
    powered = jnp.abs(x) ** p
    total = jax.lax.reduce_window(
        powered,
        jnp.zeros((), x.dtype),
        jax.lax.add,
        (1, 1, *kernel),
        (1, 1, *strides),
        [(0, 0), (0, 0), *widths],
        window_dilation=(1, 1, *dil),
    )
    return [(total ** (1.0 / p)).astype(x.dtype)]


def _roi_axis(start: Any, size: Any, bins: int, grid: int, limit: int) -> tuple[Any, ...]:
    """The sample positions of one axis of every region, ``(R, bins, grid)``: whether
    each is inside, the low and high neighbours and their weights."""
    step = size / bins
    pos = (
        start[:, None, None]
        + jnp.arange(bins)[None, :, None] * step[:, None, None]
        + (jnp.arange(grid)[None, None, :] + 0.5) * (step / grid)[:, None, None]
    )
    inside = (pos >= -1.0) & (pos <= limit)
    pos = jnp.maximum(pos, 0.0)
    low = jnp.floor(pos).astype(jnp.int32)
    edge = low >= limit - 1
    low = jnp.where(edge, limit - 1, low)
    high = jnp.where(edge, limit - 1, low + 1)
    pos = jnp.where(edge, low.astype(pos.dtype), pos)
    frac = pos - low
    return inside, low, high, 1.0 - frac, frac


@op("RoiAlign")
def roi_align(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Average (or max) of bilinear samples over each bin of each region of interest,
    with a fixed ``sampling_ratio`` of samples per bin and axis."""
    x, rois, batch = (jnp.asarray(v) for v in inputs[:3])
    ratio = int(ctx.attrs.get("sampling_ratio", 0))
    if ratio <= 0:
        raise UsageError(
            f"{where_of(ctx)}: sampling_ratio 0 (samples per bin from each region's size) "
            "is not supported; JAX compiles fixed shapes: give a positive sampling_ratio"
        )
    out_h, out_w = int(ctx.attrs.get("output_height", 1)), int(ctx.attrs.get("output_width", 1))
    scale = float(ctx.attrs.get("spatial_scale", 1.0))
    half = text(ctx.attrs.get("coordinate_transformation_mode", "half_pixel")) == "half_pixel"
    mode = text(ctx.attrs.get("mode", "avg"))
    height, width = x.shape[2], x.shape[3]
    boxes = rois.astype(jnp.float32) * scale - (0.5 if half else 0.0)
    roi_w, roi_h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    if not half:
        roi_w, roi_h = jnp.maximum(roi_w, 1.0), jnp.maximum(roi_h, 1.0)
    in_y, y_lo, y_hi, hy, ly = _roi_axis(boxes[:, 1], roi_h, out_h, ratio, height)
    in_x, x_lo, x_hi, hx, lx = _roi_axis(boxes[:, 0], roi_w, out_w, ratio, width)

    def grid(a: Any, b: Any) -> tuple[Any, Any]:
        return a[:, :, :, None, None], b[:, None, None, :, :]

    inside = jnp.logical_and(*grid(in_y, in_x))
    table = jnp.moveaxis(x[batch.astype(jnp.int32)], 1, -1)  # (R, H, W, C)
    r = jnp.arange(rois.shape[0])[:, None, None, None, None]
    terms = []
    for ys, wy in ((y_lo, hy), (y_hi, ly)):
        for xs, wx in ((x_lo, hx), (x_hi, lx)):
            yi, xi = grid(ys, xs)
            wyy, wxx = grid(wy, wx)
            weight = jnp.where(inside, wyy * wxx, 0.0)[..., None].astype(x.dtype)
            terms.append(weight * table[r, yi, xi])
    if mode == "avg":
        pooled = sum(terms[1:], terms[0]).sum(axis=(2, 4)) / (ratio * ratio)
    elif mode == "max":
        best = jnp.maximum(jnp.maximum(terms[0], terms[1]), jnp.maximum(terms[2], terms[3]))
        pooled = best.max(axis=(2, 4))
    else:
        raise UsageError(f"{where_of(ctx)}: mode {mode!r} is not supported; use avg or max")
    return [jnp.moveaxis(pooled, -1, 1).astype(x.dtype)]
