"""The operators of exported transformers (BERT, GPT-2, ViT) in JAX.

Embedding lookups (Gather, GatherElements), the mask arithmetic exporters write (Where,
Equal, Expand, ConstantOfShape), LayerNormalization and RMSNormalization, the GELU
forms (Erf, Gelu), and ONNX's fused Attention and RotaryEmbedding. A translation
whose inputs are all numpy arrays (values known while tracing: shapes, constants)
computes in numpy, so that the shape arithmetic feeding a Reshape stays static under
``jax.jit``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from onnx import helper

from d5_plugin_jax import _jax
from d5_plugin_jax.graph.registry import NodeContext, is_static, op, static_value
from d5core.api import UsageError

__all__ = ["all_static", "layer_norm", "static_ints", "where_of"]

jax = _jax.jax()
jnp = jax.numpy


def where_of(ctx: NodeContext) -> str:
    """How an error names the node: ``node 'name' (OpType)``."""
    return f"node {ctx.node.name!r} ({ctx.node.op_type})"


def all_static(*values: Any) -> bool:
    """Whether every given value (``None`` aside) is known while tracing (numpy)."""
    return all(v is None or is_static(v) for v in values)


def static_ints(ctx: NodeContext, value: Any, what: str) -> np.ndarray:
    """``value`` as int64 numpy; a value only known when the graph runs is a one-line
    :class:`UsageError` (JAX compiles for fixed shapes)."""
    return static_value(ctx, value, what).astype(np.int64)


def _axis(ctx: NodeContext, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise UsageError(f"{where_of(ctx)}: axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


@op("Gather")
def gather(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Rows of ``data`` along ``axis`` at ``indices`` (negative ones count from the end)."""
    data, indices = inputs[0], inputs[1]
    axis = _axis(ctx, int(ctx.attrs.get("axis", 0)), np.ndim(data))
    xp = np if all_static(data, indices) else jnp
    size = data.shape[axis]
    idx = xp.asarray(indices).astype(np.int64) if xp is np else jnp.asarray(indices)
    idx = xp.where(idx < 0, idx + size, idx)
    return [xp.take(data, idx, axis=axis)]


@op("GatherElements")
def gather_elements(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``data`` picked element by element along ``axis`` by ``indices`` (whose other
    axes may be shorter than the data's)."""
    data, indices = inputs[0], inputs[1]
    axis = _axis(ctx, int(ctx.attrs.get("axis", 0)), np.ndim(data))
    xp = np if all_static(data, indices) else jnp
    idx = xp.where(indices < 0, indices + data.shape[axis], indices)
    grids = list(xp.indices(idx.shape, sparse=True))
    grids[axis] = idx
    return [data[tuple(grids)]]


@op("Where")
def where(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``x`` where ``condition`` holds, else ``y`` (broadcast)."""
    xp = np if all_static(*inputs) else jnp
    return [xp.where(inputs[0], inputs[1], inputs[2])]


@op("Expand")
def expand(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``input`` broadcast with ``shape`` (both ways, as ONNX's Expand)."""
    x = inputs[0]
    shape = tuple(int(s) for s in static_ints(ctx, inputs[1], "shape"))
    try:
        target = np.broadcast_shapes(np.shape(x), shape)
    except ValueError:
        raise UsageError(
            f"{where_of(ctx)}: shape {shape} does not broadcast with the input's "
            f"{tuple(np.shape(x))}"
        ) from None
    xp = np if all_static(x) else jnp
    return [xp.broadcast_to(x, target)]


@op("ConstantOfShape")
def constant_of_shape(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """A tensor of ``shape`` filled with ``value`` (float32 zero by default)."""
    shape = tuple(int(s) for s in static_ints(ctx, inputs[0], "shape"))
    value = ctx.attrs.get("value")
    fill = np.zeros(1, np.float32) if value is None else np.asarray(value).reshape(-1)
    return [np.full(shape, fill[0], dtype=fill.dtype)]


@op("Erf")
def erf(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The error function."""
    if all_static(inputs[0]):
        return [np.asarray(jax.scipy.special.erf(inputs[0]))]
    return [jax.scipy.special.erf(inputs[0])]


@op("Gelu")
def gelu(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """GELU, exact (``approximate="none"``) or its tanh approximation."""
    x = jnp.asarray(inputs[0])
    approximate = ctx.attrs.get("approximate", "none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        return [0.5 * x * (1.0 + jnp.tanh(inner))]
    if approximate != "none":
        raise UsageError(f"{where_of(ctx)}: approximate must be 'none' or 'tanh'")
    return [0.5 * x * (1.0 + jax.scipy.special.erf(x / math.sqrt(2.0)))]


def _stash(ctx: NodeContext, x: Any) -> Any:
    """The dtype LayerNormalization computes its statistics in."""
    stash = int(ctx.attrs.get("stash_type", 1))
    if stash == 1 and x.dtype == jnp.float64:
        return x.dtype
    return helper.tensor_dtype_to_np_dtype(stash)


def layer_norm(
    x: Any, scale: Any, bias: Any, axis: int, epsilon: float, dtype: Any
) -> tuple[Any, Any, Any]:
    """``(x - mean) / sqrt(var + epsilon) * scale + bias`` over the axes from ``axis``
    on, computed in ``dtype``; with the mean and inverse standard deviation."""
    axes = tuple(range(axis, x.ndim))
    xs = x.astype(dtype)
    mean = jnp.mean(xs, axis=axes, keepdims=True)
    centred = xs - mean
    inv = jax.lax.rsqrt(jnp.mean(centred * centred, axis=axes, keepdims=True) + epsilon)
    y = (centred * inv).astype(x.dtype) * scale
    if bias is not None:
        y = y + bias
    return y, mean, inv


@op("LayerNormalization")
def layer_normalization(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """LayerNormalization: ``Y`` and, when asked for, ``Mean`` and ``InvStdDev``."""
    x = jnp.asarray(inputs[0])
    scale = inputs[1]
    bias = inputs[2] if len(inputs) > 2 else None
    axis = _axis(ctx, int(ctx.attrs.get("axis", -1)), x.ndim)
    eps = float(ctx.attrs.get("epsilon", 1e-5))
    y, mean, inv = layer_norm(x, scale, bias, axis, eps, _stash(ctx, x))
    return [y, mean, inv][: len(ctx.node.output)]


@op("RMSNormalization")
def rms_normalization(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """``x / sqrt(mean(x^2) + epsilon) * scale`` over the axes from ``axis`` on."""
    x = jnp.asarray(inputs[0])
    axis = _axis(ctx, int(ctx.attrs.get("axis", -1)), x.ndim)
    eps = float(ctx.attrs.get("epsilon", 1e-5))
    xs = x.astype(_stash(ctx, x))
    axes = tuple(range(axis, x.ndim))
    inv = jax.lax.rsqrt(jnp.mean(xs * xs, axis=axes, keepdims=True) + eps)
    return [(xs * inv).astype(x.dtype) * inputs[1]]


def _softmax_rows(x: Any) -> Any:
    """Softmax over the last axis; a row that is all ``-inf`` gives zeros."""
    top = jnp.max(x, axis=-1, keepdims=True)
    safe = jnp.where(jnp.isneginf(top), 0.0, top)
    e = jnp.exp(x - jax.lax.stop_gradient(safe))
    total = jnp.sum(e, axis=-1, keepdims=True)
    return e / jnp.where(total == 0, 1.0, total)


def _heads(x: Any, heads: int) -> Any:
    """``(batch, seq, heads * size)`` to ``(batch, heads, seq, size)``."""
    b, s, width = x.shape
    return jnp.transpose(x.reshape(b, s, heads, width // heads), (0, 2, 1, 3))


def _attention_bias(ctx: NodeContext, q: Any, kv_len: int, mask: Any, past: int, lens: Any) -> Any:
    """The additive bias of the scores: the mask (boolean or additive), the causal
    frontier, the sliding window and the padding of ``nonpad_kv_seqlen``."""
    q_len, dtype = q.shape[2], q.dtype
    ninf = jnp.asarray(-jnp.inf, dtype)
    zero = jnp.asarray(0, dtype)
    if mask is not None:
        mask = jnp.asarray(mask)
        pad = kv_len - mask.shape[-1]
        if pad > 0:
            fill = False if mask.dtype == jnp.bool_ else -jnp.inf
            widths = [(0, 0)] * (mask.ndim - 1) + [(0, pad)]
            mask = jnp.pad(mask, widths, constant_values=fill)
        if mask.dtype == jnp.bool_:
            mask = jnp.where(mask, zero, ninf)
        mask = mask.astype(dtype)
    bias = (
        jnp.zeros((q_len, kv_len), dtype)
        if mask is None
        else mask + jnp.zeros((q_len, kv_len), dtype)
    )
    i = jnp.arange(q_len)[:, None]
    j = jnp.arange(kv_len)[None, :]
    if lens is not None and past == 0:
        offset: Any = (jnp.asarray(lens).reshape(-1) - q_len)[:, None, None, None]
        if bias.ndim < 4:
            bias = bias.reshape((1,) * (4 - bias.ndim) + bias.shape)
    else:
        offset = past
    diff = i + offset - j
    if int(ctx.attrs.get("is_causal", 0)):
        bias = bias + jnp.where(diff >= 0, zero, ninf)
    left = int(ctx.attrs.get("left_window_size", -1))
    right = int(ctx.attrs.get("right_window_size", -1))
    if left >= 0:
        bias = bias + jnp.where(diff <= left, zero, ninf)
    if right >= 0:
        bias = bias + jnp.where(-diff <= right, zero, ninf)
    if lens is not None:
        keep = j < jnp.asarray(lens).reshape(-1, 1, 1, 1)
        bias = bias + jnp.where(keep, zero, ninf)
    return bias


@op("Attention")
def attention(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """ONNX's Attention (opset 23 on): scaled dot-product attention with grouped
    key/value heads, a mask, a causal frontier, a sliding window, a softcap and a
    key/value cache; outputs ``Y``, the present key and value, and the scores."""
    padded = [*inputs, *[None] * 7][:7]
    q, k, v, mask, past_k, past_v, lens = padded
    if (past_k is None) != (past_v is None):
        raise UsageError(f"{where_of(ctx)}: give past_key and past_value together")
    q, k, v = jnp.asarray(q), jnp.asarray(k), jnp.asarray(v)
    three_d = q.ndim == 3
    if three_d:
        q_heads = ctx.attrs.get("q_num_heads")
        kv_heads = ctx.attrs.get("kv_num_heads")
        if q_heads is None or kv_heads is None:
            raise UsageError(f"{where_of(ctx)}: 3-d inputs need q_num_heads and kv_num_heads")
        q, k, v = _heads(q, int(q_heads)), _heads(k, int(kv_heads)), _heads(v, int(kv_heads))
    scale = ctx.attrs.get("scale")
    scale = 1 / math.sqrt(q.shape[3]) if scale is None else float(scale)
    root = jnp.asarray(math.sqrt(scale), q.dtype)
    if past_k is not None:
        k = jnp.concatenate([jnp.asarray(past_k), k], axis=2)
        v = jnp.concatenate([jnp.asarray(past_v), v], axis=2)
    present_k, present_v = k, v
    past = 0 if past_k is None else int(past_k.shape[2])
    bias = _attention_bias(ctx, q, k.shape[2], mask, past, lens)
    if q.shape[1] != k.shape[1] and q.shape[1] % k.shape[1] == 0:
        k = jnp.repeat(k, q.shape[1] // k.shape[1], axis=1)
        v = jnp.repeat(v, q.shape[1] // v.shape[1], axis=1)
    scores = jnp.matmul(q * root, jnp.swapaxes(k * root, 2, 3))
    softcap = ctx.attrs.get("softcap")
    if softcap is not None and float(softcap) > 0:
        scores = jnp.tanh(scores / float(softcap)) * float(softcap)
    mode = int(ctx.attrs.get("qk_matmul_output_mode", 0))
    biased = scores + bias
    qk = biased if mode == 2 else scores
    precision = ctx.attrs.get("softmax_precision")
    work = biased.astype(helper.tensor_dtype_to_np_dtype(int(precision))) if precision else biased
    probs = _softmax_rows(work)
    masked_rows = jnp.isneginf(jnp.max(bias, axis=-1, keepdims=True))
    probs = jnp.where(masked_rows, jnp.zeros((), probs.dtype), probs)
    if mode == 3:
        qk = probs
    y = jnp.matmul(probs.astype(q.dtype), v)
    if three_d:
        y = jnp.transpose(y, (0, 2, 1, 3)).reshape(y.shape[0], y.shape[2], -1)
    outputs = [y, present_k, present_v, qk.astype(q.dtype)]
    return outputs[: len(ctx.node.output)]


@op("RotaryEmbedding")
def rotary_embedding(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Rotary position embedding of ``X`` with the cosine and sine caches, rotating
    the first ``rotary_embedding_dim`` features in halves or interleaved pairs."""
    x, cos, sin = jnp.asarray(inputs[0]), jnp.asarray(inputs[1]), jnp.asarray(inputs[2])
    positions = inputs[3] if len(inputs) > 3 else None
    original = x.shape
    if x.ndim == 4:
        x = jnp.transpose(x, (0, 2, 1, 3))  # (batch, seq, heads, size)
    else:
        heads = ctx.attrs.get("num_heads")
        if not heads:
            raise UsageError(f"{where_of(ctx)}: 3-d input needs num_heads")
        x = x.reshape(x.shape[0], x.shape[1], int(heads), -1)
    size = x.shape[-1]
    dim = int(ctx.attrs.get("rotary_embedding_dim", 0)) or size
    if positions is not None:
        cos, sin = cos[jnp.asarray(positions)], sin[jnp.asarray(positions)]
    cos, sin = cos[..., : dim // 2][:, :, None, :], sin[..., : dim // 2][:, :, None, :]
    rot, rest = x[..., :dim], x[..., dim:]
    if int(ctx.attrs.get("interleaved", 0)):
        a, b = rot[..., 0::2], rot[..., 1::2]
        ra, rb = cos * a - sin * b, sin * a + cos * b
        rot = jnp.stack([ra, rb], axis=-1).reshape(rot.shape)
    else:
        a, b = rot[..., : dim // 2], rot[..., dim // 2 :]
        rot = jnp.concatenate([cos * a - sin * b, sin * a + cos * b], axis=-1)
    y = jnp.concatenate([rot, rest], axis=-1)
    if len(original) == 4:
        return [jnp.transpose(y, (0, 2, 1, 3))]
    return [y.reshape(original)]
