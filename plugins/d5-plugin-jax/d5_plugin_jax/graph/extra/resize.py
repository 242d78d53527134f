"""Resize and Upsample: nearest, linear and cubic interpolation (with antialiasing,
``exclude_outside``, every coordinate transformation and ``tf_crop_and_resize``
extrapolation), one axis at a time with a matrix known while tracing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from d5_plugin_jax.graph.attention import where_of
from d5_plugin_jax.graph.extra._common import jnp, text
from d5_plugin_jax.graph.registry import NodeContext, op, static_value
from d5core.api import UsageError

__all__: list[str] = []


def _nearest_weights(mode: str) -> Any:
    def weights(ratio: float, scale: float) -> np.ndarray:
        del scale
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        picks = {
            "round_prefer_floor": ratio > 0.5,
            "round_prefer_ceil": ratio >= 0.5,
            "floor": False,
            "ceil": True,
        }
        up = picks[mode]
        return np.array([0.0, 1.0]) if up else np.array([1.0, 0.0])

    return weights


def _linear_weights(antialias: bool) -> Any:
    def weights(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([1 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, 2 - start) - ratio) * scale
        w = np.clip(1 - np.abs(args), 0, 1)
        return np.asarray(w / w.sum())

    return weights


def _cubic_weights(a: float, antialias: bool) -> Any:
    def kernel(x: np.ndarray) -> np.ndarray:
        x = np.abs(x)
        near = ((a + 2) * x - (a + 3)) * x * x + 1
        far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
        return np.where(x <= 1, near, np.where(x < 2, far, 0.0))

    def weights(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.asarray(kernel(np.array([1 + ratio, ratio, 1 - ratio, 2 - ratio])))
        scale = min(scale, 1.0)
        start = int(np.floor(-2 / scale) + 1)
        w = kernel(scale * (np.arange(start, 2 - start) - ratio))
        return np.asarray(w / w.sum())

    return weights


def _source_coordinates(
    ctm: str, out: int, scale: float, width: int, roi: tuple[float, float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """Where each output position samples the input along one axis, and (for
    ``tf_crop_and_resize``) which positions fall outside it."""
    y = np.arange(out, dtype=np.float64)
    full = scale * width
    outside = None
    if ctm == "align_corners":
        x = np.zeros(out) if full == 1 else y * (width - 1) / (full - 1)
    elif ctm == "asymmetric":
        x = y / scale
    elif ctm == "tf_crop_and_resize":
        lo, hi = roi if roi is not None else (0.0, 1.0)
        x = (
            np.full(out, (hi - lo) * (width - 1) / 2)
            if full == 1
            else (y * (hi - lo) * (width - 1) / (full - 1))
        )
        x = x + lo * (width - 1)
        outside = (x < 0) | (x > width - 1)
    elif ctm == "pytorch_half_pixel":
        x = np.full(out, -0.5) if full == 1 else (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif ctm == "half_pixel_symmetric":
        offset = width / 2 * (1 - out / full)
        x = offset + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"coordinate_transformation_mode {ctm!r} is not supported")
    return x, outside


def _resize_matrix(
    weights: Any,
    ctm: str,
    out: int,
    scale: float,
    width: int,
    roi: tuple[float, float] | None,
    exclude_outside: bool,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The ``(out, width)`` matrix that resizes one axis, and the positions to fill
    with the extrapolation value."""
    x, outside = _source_coordinates(ctm, out, scale, width, roi)
    floor = np.floor(x)
    ratios = np.where(x == floor, 1.0, x - floor)
    coeffs = np.stack([weights(float(r), scale) for r in ratios]) if out else np.zeros((0, 2))
    n = coeffs.shape[1]
    pad = int(np.ceil(n / 2))
    padded = x + pad
    base = np.floor(padded)
    frac = padded - base
    if n % 2 == 0:
        shift = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        shift = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    index = (base + shift).astype(np.int64)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((index < 0) | (index >= width), 0.0, coeffs)
        total = coeffs.sum(axis=-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    matrix = np.zeros((out, width))
    rows = np.repeat(np.arange(out), n)
    np.add.at(matrix, (rows, np.clip(index, 0, width - 1).reshape(-1)), coeffs.reshape(-1))
    return matrix, outside


def _resize_plan(
    ctx: NodeContext, shape: tuple[int, ...], inputs: Sequence[Any]
) -> tuple[list[int], list[float], list[int], list[float] | None]:
    """The axes resized, the scale and output size of every axis, and the region of
    interest (starts then ends, every axis), from the inputs and attributes."""
    rank = len(shape)
    padded = [*inputs, None, None, None][:4]
    roi_in, scales_in, sizes_in = padded[1], padded[2], padded[3]
    axes = [int(a) % rank for a in ctx.attrs.get("axes") or range(rank)]

    def given(value: Any, what: str) -> np.ndarray | None:
        if value is None:
            return None
        array = static_value(ctx, value, what).astype(np.float64).reshape(-1)
        return array if array.size else None

    roi_values, scales, sizes = (
        given(roi_in, "roi"),
        given(scales_in, "scales"),
        given(sizes_in, "sizes"),
    )
    roi: list[float] | None = None
    if roi_values is not None:
        roi = [0.0] * rank + [1.0] * rank
        for i, d in enumerate(axes):
            roi[d], roi[rank + d] = float(roi_values[i]), float(roi_values[len(axes) + i])
    factors = [1.0] * rank
    out = list(shape)
    if sizes is not None:
        for i, d in enumerate(axes):
            out[d] = int(sizes[i])
        factors = [out[i] / shape[i] for i in range(rank)]
        policy = text(ctx.attrs.get("keep_aspect_ratio_policy", "stretch"))
        if policy != "stretch":
            pick = min if policy == "not_larger" else max
            common = pick(factors[d] for d in axes)
            factors = [common if i in axes else 1.0 for i in range(rank)]
            out = [int(common * shape[i] + 0.5) if i in axes else shape[i] for i in range(rank)]
    elif scales is not None:
        for i, d in enumerate(axes):
            factors[d] = float(scales[i])
        out = [int(factors[i] * shape[i]) for i in range(rank)]
    else:
        raise UsageError(f"{where_of(ctx)}: give scales or sizes")
    return axes, factors, out, roi


@op("Resize", "Upsample")
def resize(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Resize (and the older Upsample) by nearest, linear or cubic interpolation,
    one axis at a time: each axis's interpolation is a fixed matrix, known while
    tracing, applied with a product (nearest picks with a gather)."""
    x = jnp.asarray(inputs[0])
    mode = text(ctx.attrs.get("mode", "nearest"))
    if ctx.node.op_type == "Upsample":
        scales = inputs[1] if len(inputs) > 1 else np.asarray(ctx.attrs.get("scales"))
        plan_inputs: list[Any] = [x, None, scales, None]
        ctm = "asymmetric"
        nearest = "floor"
    else:
        plan_inputs = list(inputs)
        default_ctm = "asymmetric" if ctx.opset < 11 else "half_pixel"
        ctm = text(ctx.attrs.get("coordinate_transformation_mode", default_ctm))
        nearest = text(ctx.attrs.get("nearest_mode", "round_prefer_floor"))
    antialias = bool(int(ctx.attrs.get("antialias", 0)))
    if mode == "nearest":
        weights = _nearest_weights(nearest)
    elif mode in ("linear", "bilinear", "trilinear"):
        weights = _linear_weights(antialias)
    elif mode in ("cubic", "bicubic"):
        weights = _cubic_weights(float(ctx.attrs.get("cubic_coeff_a", -0.75)), antialias)
    else:
        raise UsageError(f"{where_of(ctx)}: mode {mode!r} is not supported")
    axes, factors, out, roi = _resize_plan(ctx, tuple(x.shape), plan_inputs)
    exclude = bool(int(ctx.attrs.get("exclude_outside", 0)))
    extrapolation = float(ctx.attrs.get("extrapolation_value", 0.0))
    work = x.astype(x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32)
    rank = x.ndim
    for axis in axes:
        span = None if roi is None else (roi[axis], roi[axis + rank])
        if (
            out[axis] == work.shape[axis]
            and math.isclose(factors[axis], 1.0)
            and (span is None or (math.isclose(span[0], 0.0) and math.isclose(span[1], 1.0)))
        ):
            continue
        try:
            matrix, outside = _resize_matrix(
                weights, ctm, out[axis], factors[axis], work.shape[axis], span, exclude
            )
        except ValueError as exc:
            raise UsageError(f"{where_of(ctx)}: {exc}") from None
        if mode == "nearest" and not antialias:
            picked = jnp.take(work, jnp.asarray(matrix.argmax(axis=1)), axis=axis)
        else:
            moved = jnp.tensordot(jnp.asarray(matrix, work.dtype), work, axes=[[1], [axis]])
            picked = jnp.moveaxis(moved, 0, axis)
        if outside is not None and outside.any():
            shape = [1] * rank
            shape[axis] = out[axis]
            picked = jnp.where(jnp.asarray(outside).reshape(shape), extrapolation, picked)
        work = picked.astype(work.dtype)
    if jnp.issubdtype(x.dtype, jnp.integer):
        info = jnp.iinfo(x.dtype)
        work = jnp.clip(jnp.round(work), info.min, info.max)
    return [work.astype(x.dtype)]
