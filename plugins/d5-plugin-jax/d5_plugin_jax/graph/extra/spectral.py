"""Signal operators: the Hann, Hamming and Blackman windows and DFT."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import helper

from d5_plugin_jax.graph.attention import static_ints
from d5_plugin_jax.graph.extra._common import axis_index, jax, jnp
from d5_plugin_jax.graph.registry import NodeContext, op

__all__: list[str] = []


def _window(ctx: NodeContext, inputs: Sequence[Any], a: Sequence[float]) -> Any:
    size_ = int(static_ints(ctx, inputs[0], "size").reshape(-1)[0])
    periodic = int(ctx.attrs.get("periodic", 1))
    n = np.arange(size_, dtype=np.float64)
    denom = size_ if periodic else size_ - 1
    values = sum(((-1) ** i) * c * np.cos(2 * math.pi * i * n / denom) for i, c in enumerate(a))
    dtype = helper.tensor_dtype_to_np_dtype(int(ctx.attrs.get("output_datatype", 1)))
    return np.asarray(values).astype(dtype)


@op("HannWindow")
def hann_window(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The Hann window."""
    return [_window(ctx, inputs, (0.5, 0.5))]


@op("HammingWindow")
def hamming_window(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The Hamming window."""
    return [_window(ctx, inputs, (25 / 46, 21 / 46))]


@op("BlackmanWindow")
def blackman_window(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The Blackman window."""
    return [_window(ctx, inputs, (0.42, 0.5, 0.08))]


@op("DFT")
def dft(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The discrete Fourier transform (or its inverse) along an axis of a real
    (``[..., 1]``) or complex (``[..., 2]``) signal, optionally one-sided."""
    x = jnp.asarray(inputs[0])
    padded = [*inputs, None, None][:3]
    if ctx.opset >= 20:
        given = padded[2]
        axis = -2 if given is None else int(static_ints(ctx, given, "axis").reshape(-1)[0])
    else:
        axis = int(ctx.attrs.get("axis", 1))
    axis = axis_index(ctx, axis, x.ndim)
    inverse = bool(int(ctx.attrs.get("inverse", 0)))
    onesided = bool(int(ctx.attrs.get("onesided", 0)))
    if padded[1] is not None:
        length = int(static_ints(ctx, padded[1], "dft_length").reshape(-1)[0])
    else:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    wide = x.astype(jnp.float64)  # float64 where x64 mode is on, as the reference computes
    signal = wide[..., 0] if x.shape[-1] == 1 else wide[..., 0] + 1j * wide[..., 1]
    if inverse and onesided:
        return [jnp.fft.irfft(signal, n=length, axis=axis)[..., None].astype(x.dtype)]
    if inverse:
        result = jnp.fft.ifft(signal, n=length, axis=axis)
    else:
        result = jnp.fft.fft(signal, n=length, axis=axis)
        if onesided:
            result = jax.lax.slice_in_dim(result, 0, length // 2 + 1, axis=axis)
    return [jnp.stack([result.real, result.imag], axis=-1).astype(x.dtype)]
