"""Resize (and the older Upsample): separable interpolation, one axis at a time.

For each resized axis, the source positions of the output positions and their
interpolation weights depend only on the shapes, the scales and the attributes: they are
worked out once per input shape (with numpy, as onnx's reference defines them: the
coordinate transformation modes, nearest rounding modes, linear and cubic kernels,
antialiasing, ``exclude_outside`` and ``tf_crop_and_resize`` extrapolation) and the run
is a gather and a weighted sum in torch, so gradients reach the input."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch

from d5_plugin_torch.graph_ops.base import Tensor, Translation, TranslatorBase, fixed
from d5core.api import UsageError

__all__ = ["ResizeOps"]

#: The weights of the window around a source position: a function of the position's
#: fraction past its left neighbour and of the axis's scale.
Coefficients = Callable[[float, float], np.ndarray]

_MODES = ("nearest", "linear", "cubic")
_TRANSFORMS = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)


def _nearest(rounding: str) -> Coefficients:
    def coefficients(ratio: float, scale: float) -> np.ndarray:
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        left = {
            "round_prefer_floor": ratio <= 0.5,
            "round_prefer_ceil": ratio < 0.5,
            "floor": True,
            "ceil": False,
        }[rounding]
        return np.array([float(left), float(not left)])

    return coefficients


def _linear(antialias: bool) -> Coefficients:
    def coefficients(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array([1 - ratio, ratio])
        s = min(scale, 1.0)
        start = int(np.floor(-1 / s) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * s
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()  # type: ignore[no-any-return]

    return coefficients


def _cubic(a: float, antialias: bool) -> Coefficients:
    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x**3 - (a + 3) * x**2 + 1
        if x < 2:
            return a * x**3 - 5 * a * x**2 + 8 * a * x - 4 * a
        return 0.0

    def coefficients(ratio: float, scale: float) -> np.ndarray:
        if not antialias:
            return np.array(
                [kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)]
            )
        s = min(scale, 1.0)
        start = int(np.floor(-2 / s) + 1)
        c = np.array([kernel(s * (i - ratio)) for i in range(start, 2 - start)])
        return c / c.sum()  # type: ignore[no-any-return]

    return coefficients


@dataclass(frozen=True)
class _AxisPlan:
    """Where one axis's outputs read (``(out, taps)`` indices) and with what weights."""

    index: np.ndarray
    weights: np.ndarray
    outside: np.ndarray | None  # tf_crop_and_resize: outputs given the extrapolation value


def _source(
    transform: str, y: np.ndarray, scale: float, width: int, out: int, roi: Sequence[float] | None
) -> tuple[np.ndarray, np.ndarray | None]:
    """The source coordinate of each output position ``y``."""
    out_width = scale * width
    if transform == "align_corners":
        x = np.zeros(out) if out_width == 1 else y * (width - 1) / (out_width - 1)
    elif transform == "asymmetric":
        x = y / scale
    elif transform == "tf_crop_and_resize":
        lo, hi = (0.0, 1.0) if roi is None else (float(roi[0]), float(roi[1]))
        if out_width == 1:
            x = np.full(out, (hi - lo) * (width - 1) / 2)
        else:
            x = y * (hi - lo) * (width - 1) / (out_width - 1)
        x = x + lo * (width - 1)
        return x, (x < 0) | (x > width - 1)
    elif transform == "pytorch_half_pixel":
        x = np.full(out, -0.5) if out_width == 1 else (y + 0.5) / scale - 0.5
    elif transform == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    else:  # half_pixel_symmetric
        offset = width / 2 * (1 - out / out_width)
        x = offset + (y + 0.5) / scale - 0.5
    return x, None


def _plan_axis(
    coefficients: Coefficients,
    transform: str,
    scale: float,
    width: int,
    out: int,
    roi: Sequence[float] | None,
    exclude_outside: bool,
) -> _AxisPlan:
    y = np.arange(out, dtype=np.float64)
    x, outside = _source(transform, y, scale, width, out, roi)
    left = np.floor(x)
    ratios = np.where(x == left, 1.0, x - left)
    weights = np.stack([coefficients(float(r), scale) for r in ratios]) if out else np.zeros((0, 2))
    taps = weights.shape[1]
    pad = math.ceil(taps / 2)
    padded = x + pad
    p = np.floor(padded)
    frac = padded - p
    if taps % 2 == 0:
        offset = np.where(frac == 0, -(taps // 2), -(taps // 2) + 1)
    else:
        base = -((taps - 1) // 2)
        offset = np.where(frac <= 0.5, base, base + 1)
    index = (p + offset).astype(np.int64)[:, None] + np.arange(taps)[None, :] - pad
    if exclude_outside:
        weights = np.where((index < 0) | (index >= width), 0.0, weights)
        total = weights.sum(-1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return _AxisPlan(np.clip(index, 0, width - 1), weights, outside)


def _interpolate(x: Tensor, axis: int, plan: _AxisPlan, fill: float) -> Tensor:
    out, taps = plan.index.shape
    index = torch.as_tensor(plan.index.reshape(-1), device=x.device)
    picked = torch.index_select(x, axis, index)
    picked = picked.reshape((*x.shape[:axis], out, taps, *x.shape[axis + 1 :]))
    shape = [1] * axis + [out, taps] + [1] * (x.dim() - axis - 1)
    weights = torch.as_tensor(plan.weights, dtype=x.dtype, device=x.device).reshape(shape)
    y = (picked * weights).sum(axis + 1)
    if plan.outside is not None and plan.outside.any():
        mask = torch.as_tensor(plan.outside, device=x.device).reshape(
            shape[: axis + 1] + shape[axis + 2 :]
        )
        y = torch.where(mask, torch.full_like(y, fill), y)
    return y


class ResizeOps(TranslatorBase):
    """Translators of Resize and Upsample."""

    def op_Resize(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        mode = str(a.get("mode", "nearest"))
        if mode not in _MODES:
            raise UsageError(f"Resize mode must be one of {', '.join(_MODES)}, not {mode!r}")
        legacy = self.opset < 11
        transform = (
            "asymmetric" if legacy else str(a.get("coordinate_transformation_mode", "half_pixel"))
        )
        if transform not in _TRANSFORMS:
            choices = ", ".join(_TRANSFORMS)
            raise UsageError(
                f"coordinate_transformation_mode must be one of {choices}, not {transform!r}"
            )
        antialias = bool(int(a.get("antialias", 0)))
        coefficients: Coefficients
        if mode == "nearest":
            coefficients = _nearest(
                "floor" if legacy else str(a.get("nearest_mode", "round_prefer_floor"))
            )
        elif mode == "linear":
            coefficients = _linear(antialias)
        else:
            coefficients = _cubic(float(a.get("cubic_coeff_a", -0.75)), antialias)
        exclude = bool(int(a.get("exclude_outside", 0)))
        fill = float(a.get("extrapolation_value", 0.0))
        policy = str(a.get("keep_aspect_ratio_policy", "stretch"))
        axes_attr = a.get("axes")
        if legacy:  # Resize-10 and Upsample: (X, scales), or scales as an attribute
            scales_of = fixed(a["scales"]) if "scales" in a else self.value(node, 1)
            getters = [fixed(None), scales_of, fixed(None)]
            slots = [1, 1, 1]  # every getter reads input 1 (or nothing)
            names = list(node.input[:2])
        else:
            getters = [self.value(node, i) for i in (1, 2, 3)]
            slots = [1, 2, 3]
            names = list(node.input[:4])
        plans: dict[tuple[Any, ...], list[tuple[int, _AxisPlan]]] = {}

        def resize(x: Tensor, *args: Tensor | None) -> tuple[Tensor]:
            padded = [None, *args, None, None, None]
            given = [g(padded[i]) for g, i in zip(getters, slots, strict=True)]
            roi, scales, sizes = (
                [] if v is None else [float(e) for e in np.asarray(v).reshape(-1)] for v in given
            )
            key = (tuple(x.shape), tuple(roi), tuple(scales), tuple(sizes))
            plan = plans.get(key)
            if plan is None:
                plan = plans[key] = self._plan(
                    tuple(x.shape),
                    roi,
                    scales,
                    sizes,
                    axes_attr,
                    policy,
                    coefficients,
                    transform,
                    exclude,
                )
            y = x if x.is_floating_point() else x.to(torch.float64)
            for axis, axis_plan in plan:
                y = _interpolate(y, axis, axis_plan, fill)
            if not x.is_floating_point():
                info = torch.iinfo(x.dtype)
                y = torch.clamp(torch.round(y), info.min, info.max)
            return (y.to(x.dtype),)

        return resize, names

    op_Upsample = op_Resize

    @staticmethod
    def _plan(
        shape: tuple[int, ...],
        roi: list[float],
        scales: list[float],
        sizes: list[float],
        axes_attr: Any,
        policy: str,
        coefficients: Coefficients,
        transform: str,
        exclude: bool,
    ) -> list[tuple[int, _AxisPlan]]:
        rank = len(shape)
        axes = [int(d) % rank for d in axes_attr] if axes_attr is not None else list(range(rank))
        if sizes:
            out = [float(shape[d]) for d in range(rank)]
            for i, d in enumerate(axes):
                out[d] = sizes[i]
            factors = [out[d] / shape[d] for d in range(rank)]
            if policy != "stretch":
                pick = min if policy == "not_larger" else max
                s = pick(factors[d] for d in axes)
                factors = [s if d in axes else 1.0 for d in range(rank)]
                out = [
                    float(int(s * shape[d] + 0.5)) if d in axes else float(shape[d])
                    for d in range(rank)
                ]
        elif scales:
            factors = [1.0] * rank
            for i, d in enumerate(axes):
                factors[d] = scales[i]
            out = [float(int(factors[d] * shape[d])) for d in range(rank)]
        else:
            raise UsageError("Resize needs scales or sizes")
        full_roi: list[float] | None = None
        if roi:
            full_roi = [0.0] * rank + [1.0] * rank
            for i, d in enumerate(axes):
                full_roi[d], full_roi[rank + d] = roi[i], roi[len(axes) + i]
        plan = []
        for d in axes:
            width, size = shape[d], int(out[d])
            axis_roi = None if full_roi is None else (full_roi[d], full_roi[rank + d])
            identity = math.isclose(factors[d], 1.0) and size == width
            if identity and (axis_roi is None or axis_roi == (0.0, 1.0)):
                continue
            plan.append(
                (d, _plan_axis(coefficients, transform, factors[d], width, size, axis_roi, exclude))
            )
        return plan
