"""Operators of recent sequence models: Swish, SwiGLU, CausalConvWithState and
LinearAttention (a ``jax.lax.scan`` over the steps).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from d5_plugin_jax.graph.attention import where_of
from d5_plugin_jax.graph.extra._common import jax, jnp, text
from d5_plugin_jax.graph.registry import NodeContext, op
from d5core.api import UsageError

__all__: list[str] = []


@op("Swish")
def swish(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``x * sigmoid(alpha * x)``."""
    x = jnp.asarray(inputs[0])
    return [x * jax.nn.sigmoid(float(ctx.attrs.get("alpha", 1.0)) * x)]


@op("SwiGLU")
def swiglu(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``a * sigmoid(alpha * a) * b``."""
    a, b = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    alpha = float(ctx.attrs.get("alpha", 1.0))
    return [(a * jax.nn.sigmoid(alpha * a).astype(a.dtype) * b).astype(a.dtype)]


@op("CausalConvWithState")
def causal_conv_with_state(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """A depthwise causal 1-d convolution over ``(batch, channels, length)`` whose left
    context is the carried state (zeros when absent), with an optional SiLU; also the
    new state (the last ``k - 1`` positions of the padded input)."""
    padded_inputs = [*inputs, None, None][:4]
    x, w = jnp.asarray(padded_inputs[0]), jnp.asarray(padded_inputs[1])
    bias, past = padded_inputs[2], padded_inputs[3]
    activation = text(ctx.attrs.get("activation", "none"))
    if activation not in ("none", "silu", "swish"):
        raise UsageError(f"{where_of(ctx)}: activation {activation!r} is not supported")
    batch, channels, _ = x.shape
    k = w.shape[2]
    state = jnp.zeros((batch, channels, k - 1), x.dtype) if past is None else jnp.asarray(past)
    padded = jnp.concatenate([state, x], axis=2)
    out = jax.lax.conv_general_dilated(
        padded.astype(jnp.float32),
        w.astype(jnp.float32),
        window_strides=(1,),
        padding="VALID",
        feature_group_count=channels,
    )
    if bias is not None:
        out = out + jnp.asarray(bias, jnp.float32)[None, :, None]
    out = out.astype(x.dtype)
    if activation != "none":
        wide = out.astype(jnp.float32)
        out = (wide * jax.nn.sigmoid(wide)).astype(x.dtype)
    return [out, padded[:, :, padded.shape[2] - (k - 1) :]]


def _split_heads(x: Any, heads: int) -> Any:
    """``(batch, steps, heads * size)`` to ``(batch, heads, steps, size)``."""
    b, t, width = x.shape
    return x.reshape(b, t, heads, width // heads).transpose(0, 2, 1, 3)


@op("LinearAttention")
def linear_attention(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Linear attention as a recurrence over the steps (``jax.lax.scan``) of a
    ``(d_k, d_v)`` state per key/value head: decayed (``gated``), corrected towards the
    value (``delta``), then read by the queries (grouped heads share a state)."""
    q, k, v, past, decay, beta = [*inputs, None, None, None][:6]
    rule = text(ctx.attrs.get("update_rule", "gated_delta"))
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise UsageError(f"{where_of(ctx)}: update_rule {rule!r} is not supported")
    q_heads = int(ctx.attrs.get("q_num_heads", 0))
    kv_heads = int(ctx.attrs.get("kv_num_heads", 0))
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        raise UsageError(f"{where_of(ctx)}: q_num_heads must be a multiple of kv_num_heads")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
    out_dtype = q.dtype
    b, t, _ = q.shape
    d_k = q.shape[-1] // q_heads
    d_v = v.shape[-1] // kv_heads
    f32 = jnp.float32
    q4, k4, v4 = (
        _split_heads(a, h).astype(f32) for a, h in ((q, q_heads), (k, kv_heads), (v, kv_heads))
    )
    if gating:
        decay = jnp.asarray(decay)
        if decay.shape[-1] == kv_heads:
            g4 = decay.reshape(b, t, kv_heads, 1).transpose(0, 2, 1, 3)
        else:
            g4 = _split_heads(decay, kv_heads)
        g4 = g4.astype(f32)
    else:
        g4 = jnp.zeros((b, kv_heads, t, 1), f32)
    if delta:
        beta = jnp.asarray(beta)
        b4 = beta.reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(f32)
    else:
        b4 = jnp.ones((b, 1, t, 1), f32)
    state_dtype = out_dtype if past is None else jnp.asarray(past).dtype
    state = jnp.zeros((b, kv_heads, d_k, d_v), f32) if past is None else jnp.asarray(past, f32)
    scale = ctx.attrs.get("scale")
    scale = 1.0 / math.sqrt(d_k) if not scale else float(scale)
    group = q_heads // kv_heads

    def step(s: Any, item: tuple[Any, ...]) -> tuple[Any, Any]:
        q_t, k_t, v_t, g_t, b_t = item
        if gating:
            s = s * jnp.exp(g_t)[..., None]
        if delta:
            v_t = b_t * (v_t - jnp.einsum("bhdm,bhd->bhm", s, k_t))
        s = s + k_t[..., :, None] * v_t[..., None, :]
        read = jnp.repeat(s, group, axis=1) if group > 1 else s
        return s, scale * jnp.einsum("bhd,bhdm->bhm", q_t, read)

    steps = tuple(jnp.moveaxis(a, 2, 0) for a in (q4, k4, v4, g4, b4))
    state, outs = jax.lax.scan(step, state, steps)  # outs: (t, b, h_q, d_v)
    output = jnp.transpose(outs, (1, 0, 2, 3)).reshape(b, t, q_heads * d_v).astype(out_dtype)
    return [output, state.astype(state_dtype)]
