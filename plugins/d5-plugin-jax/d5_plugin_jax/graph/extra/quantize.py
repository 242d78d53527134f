"""Quantization: QuantizeLinear and DequantizeLinear (per tensor, axis or block;
integer and float8 types), DynamicQuantizeLinear, MatMulInteger, QLinearMatMul,
ConvInteger and QLinearConv.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import helper

from d5_plugin_jax.graph.extra._common import axis_index, jax, jnp, text
from d5_plugin_jax.graph.registry import NodeContext, op

__all__: list[str] = []


def _per_axis(ctx: NodeContext, value: Any, shape: tuple[int, ...]) -> Any:
    """A scale or zero point laid out to broadcast with an input of ``shape``: a
    scalar as it is, a vector along ``axis``, a blocked tensor repeated ``block_size``
    times along ``axis``."""
    v = jnp.asarray(value)
    block = int(ctx.attrs.get("block_size", 0))
    if v.ndim == 0 or (v.size == 1 and block == 0):
        return v.reshape(())
    axis = axis_index(ctx, int(ctx.attrs.get("axis", 1)), len(shape))
    if block > 0:
        return jax.lax.slice_in_dim(jnp.repeat(v, block, axis=axis), 0, shape[axis], axis=axis)
    if v.ndim == 1:
        return v.reshape([-1 if i == axis else 1 for i in range(len(shape))])
    return v


def _saturate(value: Any, dtype: Any, saturate: bool) -> Any:
    """``value`` (float) converted to the quantized ``dtype``: integers rounded half to
    even and clipped, floats clipped to the largest finite value when ``saturate``."""
    target = np.dtype(dtype)
    if jnp.issubdtype(target, jnp.integer):
        info = jnp.iinfo(target)
        return jnp.clip(jnp.round(value), info.min, info.max).astype(target)
    if saturate:
        top = float(jnp.finfo(target).max)
        value = jnp.where(jnp.isinf(value), jnp.sign(value) * top, value)
        value = jnp.clip(value, -top, top)
    return value.astype(target)


@op("DequantizeLinear")
def dequantize_linear(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``(x - zero_point) * scale``, per tensor, per axis or per block."""
    x = jnp.asarray(inputs[0])
    scale = jnp.asarray(inputs[1])
    zero = inputs[2] if len(inputs) > 2 else None
    wide = x.astype(jnp.float32)
    if zero is not None:
        wide = wide - _per_axis(ctx, jnp.asarray(zero).astype(jnp.float32), x.shape)
    out = wide * _per_axis(ctx, scale.astype(jnp.float32), x.shape)
    code = ctx.attrs.get("output_dtype")
    dtype = helper.tensor_dtype_to_np_dtype(int(code)) if code else scale.dtype
    return [out.astype(dtype)]


@op("QuantizeLinear")
def quantize_linear(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``saturate(round(x / scale) + zero_point)`` in the zero point's type (else
    ``output_dtype``, else uint8), per tensor, per axis or per block."""
    x = jnp.asarray(inputs[0])
    scale = jnp.asarray(inputs[1])
    zero = inputs[2] if len(inputs) > 2 else None
    code = ctx.attrs.get("output_dtype")
    if zero is not None:
        dtype = np.dtype(jnp.asarray(zero).dtype)
    elif code:
        dtype = helper.tensor_dtype_to_np_dtype(int(code))
    else:
        dtype = np.dtype(np.uint8)
    ratio = x.astype(jnp.float32) / _per_axis(ctx, scale.astype(jnp.float32), x.shape)
    saturate = bool(int(ctx.attrs.get("saturate", 1)))
    if jnp.issubdtype(dtype, jnp.integer):
        ratio = jnp.round(ratio)
        if zero is not None:
            ratio = ratio + _per_axis(ctx, jnp.asarray(zero).astype(jnp.float32), x.shape)
    elif zero is not None:
        ratio = ratio + _per_axis(ctx, jnp.asarray(zero).astype(jnp.float32), x.shape)
    return [_saturate(ratio, dtype, saturate)]


@op("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """uint8 quantization with the scale and zero point that map ``[min(x, 0),
    max(x, 0)]`` onto ``[0, 255]``."""
    x = jnp.asarray(inputs[0]).astype(jnp.float32)
    low, high = jnp.minimum(jnp.min(x), 0.0), jnp.maximum(jnp.max(x), 0.0)
    scale = (high - low) / 255.0
    zero = jnp.clip(jnp.round(-low / scale), 0, 255)
    y = jnp.clip(jnp.round(x / scale) + zero, 0, 255)
    return [y.astype(jnp.uint8), scale.astype(jnp.float32), zero.astype(jnp.uint8)]


@op("MatMulInteger")
def matmul_integer(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``(a - a_zero_point) @ (b - b_zero_point)`` in int32."""
    a, b = jnp.asarray(inputs[0]).astype(jnp.int32), jnp.asarray(inputs[1]).astype(jnp.int32)
    padded = [*inputs, None, None][:4]
    if padded[2] is not None:
        za = jnp.asarray(padded[2]).astype(jnp.int32)
        a = a - (za.reshape(-1, 1) if za.ndim == 1 and za.size > 1 else za)
    if padded[3] is not None:
        b = b - jnp.asarray(padded[3]).astype(jnp.int32)
    return [jnp.matmul(a, b)]


@op("QLinearMatMul")
def qlinear_matmul(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The product of two quantized matrices, requantized with the output's scale and
    zero point."""
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = (jnp.asarray(v) for v in inputs[:8])
    f32 = jnp.float32
    real_a = (a.astype(f32) - a_zero.astype(f32)) * a_scale.astype(f32)
    real_b = (b.astype(f32) - b_zero.astype(f32)) * b_scale.astype(f32)
    product = jnp.matmul(real_a, real_b)
    y = jnp.round(product / y_scale.astype(f32)) + y_zero.astype(f32)
    return [_saturate(y, y_zero.dtype, True)]


def _conv_padding(ctx: NodeContext, spatial: Sequence[int], kernel: Sequence[int]) -> list[Any]:
    """The ``(low, high)`` padding of each spatial axis from ``pads`` or ``auto_pad``."""
    nd = len(kernel)
    strides = [int(v) for v in ctx.attrs.get("strides") or [1] * nd]
    dil = [int(v) for v in ctx.attrs.get("dilations") or [1] * nd]
    auto = text(ctx.attrs.get("auto_pad", "NOTSET"))
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        widths = []
        for i in range(nd):
            span = (kernel[i] - 1) * dil[i] + 1
            total = max((-(-spatial[i] // strides[i]) - 1) * strides[i] + span - spatial[i], 0)
            small = total // 2
            widths.append(
                (small, total - small) if auto == "SAME_UPPER" else (total - small, small)
            )
        return widths
    if auto == "VALID":
        return [(0, 0)] * nd
    pads = [int(v) for v in ctx.attrs.get("pads") or [0] * (2 * nd)]
    return [(pads[i], pads[i + nd]) for i in range(nd)]


def _integer_conv(ctx: NodeContext, x: Any, w: Any) -> Any:
    """The convolution of integer-valued ``x`` and ``w`` (already shifted by their zero
    points), exact in float64 where x64 mode is on."""
    nd = w.ndim - 2
    strides = [int(v) for v in ctx.attrs.get("strides") or [1] * nd]
    dil = [int(v) for v in ctx.attrs.get("dilations") or [1] * nd]
    return jax.lax.conv_general_dilated(
        x.astype(jnp.float64),
        w.astype(jnp.float64),
        window_strides=strides,
        padding=_conv_padding(ctx, x.shape[2:], w.shape[2:]),
        rhs_dilation=dil,
        feature_group_count=int(ctx.attrs.get("group", 1)),
    )


def _zero_shift(value: Any, zero: Any, channel_axis: int | None) -> Any:
    """``value - zero`` in float64, a per-channel zero point laid along ``channel_axis``."""
    wide = jnp.asarray(value).astype(jnp.float64)
    if zero is None:
        return wide
    z = jnp.asarray(zero).astype(jnp.float64)
    if z.ndim == 1 and z.size > 1 and channel_axis is not None:
        z = z.reshape([-1 if i == channel_axis else 1 for i in range(wide.ndim)])
    return wide - z


@op("ConvInteger")
def conv_integer(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The convolution of quantized ``x`` and ``w`` after their zero points, in int32."""
    x, w, x_zero, w_zero = [*inputs, None, None][:4]
    out = _integer_conv(ctx, _zero_shift(x, x_zero, None), _zero_shift(w, w_zero, 0))
    return [out.astype(jnp.int32)]


@op("QLinearConv")
def qlinear_conv(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """A quantized convolution, requantized with the output's scale and zero point."""
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias = [*inputs, None][:9]
    acc = _integer_conv(ctx, _zero_shift(x, x_zero, None), _zero_shift(w, w_zero, 0))
    if bias is not None:
        acc = acc + jnp.asarray(bias).astype(jnp.float64).reshape((1, -1) + (1,) * (acc.ndim - 2))
    w_s = jnp.asarray(w_scale).astype(jnp.float64)
    if w_s.ndim == 1 and w_s.size > 1:
        w_s = w_s.reshape((1, -1) + (1,) * (acc.ndim - 2))
    real = acc * jnp.asarray(x_scale).astype(jnp.float64) * w_s
    y = jnp.round(real / jnp.asarray(y_scale).astype(jnp.float64))
    y = y + jnp.asarray(y_zero).astype(jnp.float64)
    return [_saturate(y, jnp.asarray(y_zero).dtype, True)]
