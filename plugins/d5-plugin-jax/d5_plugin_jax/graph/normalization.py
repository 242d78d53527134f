"""Normalization operators as JAX functions: BatchNormalization,
InstanceNormalization, LRN and Dropout.

Training-mode BatchNormalization normalizes by the batch statistics and returns the new
running mean and variance after its output; training-mode Dropout applies the reference
executor's reproducible mask (:func:`d5core.onnx.reference_mask`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from d5_plugin_jax.graph._common import Out, fail, jnp, lax, shape_of
from d5_plugin_jax.graph.registry import NodeContext, op, static_value
from d5core.onnx import reference_mask

__all__: list[str] = []  # importing the module registers its translations


def _per_channel(v: Any, rank: int) -> Any:
    return jnp.reshape(v, (1, -1) + (1,) * (rank - 2))


@op("BatchNormalization")
def _batch_norm(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x, scale, bias, mean, var = (jnp.asarray(v) for v in inputs[:5])
    eps = float(ctx.attrs.get("epsilon", 1e-5))
    rank = x.ndim
    if ctx.opset < 9 and int(ctx.attrs.get("spatial", 1)) == 0:
        # per-element statistics and affine parameters, of X's shape without the batch axis

        def per(v: Any) -> Any:
            return jnp.reshape(v, (1, *x.shape[1:]))

        axes: tuple[int, ...] = (0,)
    else:

        def per(v: Any) -> Any:
            return _per_channel(v, rank)

        axes = (0, *range(2, rank))
    if not ctx.training and not int(ctx.attrs.get("training_mode", 0)):
        return [per(scale * lax.rsqrt(var + eps)) * (x - per(mean)) + per(bias)]
    batch_mean = jnp.mean(x, axis=axes)
    batch_var = jnp.mean(jnp.square(x - jnp.expand_dims(batch_mean, axes)), axis=axes)
    y = per(scale * lax.rsqrt(batch_var + eps)) * (x - per(batch_mean)) + per(bias)
    m = float(ctx.attrs.get("momentum", 0.9))
    running_mean = lax.stop_gradient(m * mean + (1 - m) * batch_mean).astype(x.dtype)
    running_var = lax.stop_gradient(m * var + (1 - m) * batch_var).astype(x.dtype)
    return [y.astype(x.dtype), running_mean, running_var]


@op("InstanceNormalization")
def _instance_norm(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x, scale, bias = (jnp.asarray(v) for v in inputs[:3])
    eps = float(ctx.attrs.get("epsilon", 1e-5))
    axes = tuple(range(2, x.ndim))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    y = (x - mean) * lax.rsqrt(var + eps)
    return [_per_channel(scale, x.ndim) * y + _per_channel(bias, x.ndim)]


@op("LRN")
def _lrn(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    size = int(ctx.attrs["size"])
    alpha = float(ctx.attrs.get("alpha", 1e-4))
    beta = float(ctx.attrs.get("beta", 0.75))
    bias = float(ctx.attrs.get("bias", 1.0))
    before, after = (size - 1) // 2, size // 2
    square = jnp.square(x)
    window = (1, size) + (1,) * (x.ndim - 2)
    total = lax.reduce_window(
        square, np.array(0, x.dtype), lax.add, window, (1,) * x.ndim,
        [(0, 0), (before, after)] + [(0, 0)] * (x.ndim - 2),
    )  # fmt: skip
    return [x * jnp.power(bias + (alpha / size) * total, -beta)]


@op("Dropout")
def _dropout(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = inputs[0]
    given = inputs[1] if len(inputs) > 1 else None
    if given is None or ctx.opset < 12:
        ratio = float(ctx.attrs.get("ratio", 0.5))
    else:
        ratio = float(static_value(ctx, given, "ratio").reshape(-1)[0])
    if not 0.0 <= ratio < 1.0:
        raise fail(ctx, f"ratio must lie in [0, 1), not {ratio}")
    shape = shape_of(x)
    if not ctx.training or ratio == 0.0:
        return [x, np.ones(shape, dtype=bool)]
    keep = reference_mask(shape, ratio, int(ctx.attrs.get("seed", 0)))
    scale = jnp.asarray(keep / (1.0 - ratio), dtype=jnp.asarray(x).dtype)
    return [x * scale, keep]
