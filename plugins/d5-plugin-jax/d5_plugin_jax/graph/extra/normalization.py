"""LpNormalization, MeanVarianceNormalization and GroupNormalization."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from d5_plugin_jax.graph.attention import where_of
from d5_plugin_jax.graph.extra._common import axis_index, jnp
from d5_plugin_jax.graph.registry import NodeContext, op
from d5core.api import UsageError

__all__: list[str] = []


@op("LpNormalization")
def lp_normalization(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``x`` divided by its L1 or L2 norm along ``axis``."""
    x = jnp.asarray(inputs[0])
    axis = axis_index(ctx, int(ctx.attrs.get("axis", -1)), x.ndim)
    p = int(ctx.attrs.get("p", 2))
    if p == 1:
        norm = jnp.sum(jnp.abs(x), axis=axis, keepdims=True)
    elif p == 2:
        norm = jnp.sqrt(jnp.sum(x * x, axis=axis, keepdims=True))
    else:
        raise UsageError(f"{where_of(ctx)}: p must be 1 or 2, not {p}")
    return [jnp.where(norm == 0, 0, x / jnp.where(norm == 0, 1, norm)).astype(x.dtype)]


@op("MeanVarianceNormalization")
def mean_variance_normalization(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``(x - mean) / sqrt(var)`` over ``axes`` (default batch and spatial)."""
    x = jnp.asarray(inputs[0])
    axes = tuple(int(a) for a in ctx.attrs.get("axes", [0, 2, 3]))
    mean = jnp.mean(x, axis=axes, keepdims=True)
    var = jnp.mean(x * x, axis=axes, keepdims=True) - mean * mean
    return [(x - mean) / (jnp.sqrt(var) + 1e-9)]


@op("GroupNormalization")
def group_normalization(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Normalization over groups of channels, then a scale and bias per channel (per
    group before opset 21)."""
    x = jnp.asarray(inputs[0])
    scale, bias = jnp.asarray(inputs[1]), jnp.asarray(inputs[2])
    groups = int(ctx.attrs["num_groups"])
    eps = float(ctx.attrs.get("epsilon", 1e-5))
    n, c = x.shape[0], x.shape[1]
    work = x.astype(jnp.float32) if int(ctx.attrs.get("stash_type", 1)) == 1 else x
    grouped = work.reshape(n, groups, -1)
    mean = jnp.mean(grouped, axis=-1, keepdims=True)
    var = jnp.var(grouped, axis=-1, keepdims=True)
    normed = ((grouped - mean) / jnp.sqrt(var + eps)).reshape(x.shape).astype(x.dtype)
    if scale.size == groups and groups != c:
        scale, bias = jnp.repeat(scale, c // groups), jnp.repeat(bias, c // groups)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return [normed * scale.reshape(shape) + bias.reshape(shape)]
