"""Sequence operators: Attention, LinearAttention, RotaryEmbedding, CausalConvWithState,
SwiGLU and RNN written here, LSTM and GRU through the torch level-0 functions
(:func:`d5_plugin_torch.ops.recurrent.lstm` and ``gru``)."""

from __future__ import annotations

import math
from typing import Any

import onnx
import torch

from d5_plugin_torch.graph_ops.base import Tensor, Translation, TranslatorBase, onnx_dtype
from d5_plugin_torch.ops.recurrent import gru, lstm
from d5core.api import UsageError

__all__ = ["SequenceOps", "attention", "linear_attention", "rotary_embedding"]

_RNN_ACTIVATIONS = {
    "tanh": torch.tanh,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
}


def _heads(x: Tensor, heads: int | None) -> Tensor:
    """A 3-D ``(batch, seq, heads * size)`` input as ``(batch, heads, seq, size)``."""
    if x.dim() == 4:
        return x
    if heads is None:
        raise UsageError("Attention with 3-D inputs needs q_num_heads and kv_num_heads")
    b, s, hidden = x.shape
    return x.reshape(b, s, heads, hidden // heads).transpose(1, 2)


def _allowed_bias(allowed: Tensor, dtype: torch.dtype) -> Tensor:
    """0 where ``allowed``, -inf elsewhere."""
    zero = torch.zeros((), dtype=dtype, device=allowed.device)
    return torch.where(allowed, zero, torch.full_like(zero, -math.inf))


def _offset_mask(q: int, kv: int, offset: Tensor | int, device: torch.device) -> Tensor:
    """``key - query - offset`` for every (query, key): broadcast per batch when
    ``offset`` is a tensor of one offset per batch entry."""
    i = torch.arange(q, device=device).reshape(q, 1)
    j = torch.arange(kv, device=device).reshape(1, kv)
    if isinstance(offset, Tensor):
        return (j - i).unsqueeze(0) - offset.reshape(-1, 1, 1).to(torch.int64)
    return j - i - offset


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    past_key: Tensor | None = None,
    past_value: Tensor | None = None,
    nonpad: Tensor | None = None,
    *,
    scale: float | None = None,
    is_causal: bool = False,
    q_num_heads: int | None = None,
    kv_num_heads: int | None = None,
    softmax_precision: int | None = None,
    softcap: float | None = None,
    qk_matmul_output_mode: int = 0,
    left_window: int = -1,
    right_window: int = -1,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """ONNX Attention (opsets 23 to 25) on torch tensors: ``(Y, present_key,
    present_value, qk_matmul_output)``, with the semantics of onnx's reference."""
    three_d = q.dim() == 3
    q, k, v = _heads(q, q_num_heads), _heads(k, kv_num_heads), _heads(v, kv_num_heads)
    dtype = q.dtype
    root = math.sqrt(scale if scale is not None else 1.0 / math.sqrt(q.shape[3]))
    root_t = torch.tensor(root, dtype=dtype, device=q.device)
    if past_key is not None:
        k = torch.cat([past_key, k], 2)
    if past_value is not None:
        v = torch.cat([past_value, v], 2)
    present_key, present_value = k, v
    ql, kvl = q.shape[2], k.shape[2]
    bias = torch.zeros((ql, kvl), dtype=dtype, device=q.device)
    if mask is not None and mask.shape[-1] < kvl:
        fill = False if mask.dtype == torch.bool else -math.inf
        pad = torch.full((*mask.shape[:-1], kvl - mask.shape[-1]), fill, dtype=mask.dtype,
                         device=mask.device)  # fmt: skip
        mask = torch.cat([mask, pad], -1)
    if mask is not None:
        mask = _allowed_bias(mask, dtype) if mask.dtype == torch.bool else mask
    if past_key is None and nonpad is not None:
        offset: Tensor | int = nonpad.reshape(-1) - ql
    else:
        offset = past_key.shape[2] if past_key is not None else 0
    windowed = left_window >= 0 or right_window >= 0
    if is_causal:
        base = bias if mask is None else mask
        if windowed:
            base = bias + base
        rel = _offset_mask(ql, kvl, offset, q.device)
        causal = _allowed_bias(rel <= 0, dtype)
        bias = base + (causal.unsqueeze(1) if causal.dim() == 3 else causal)
    elif mask is not None:
        bias = bias + mask
    if windowed:
        rel = _offset_mask(ql, kvl, offset, q.device)  # key - query position
        allowed = torch.ones_like(rel, dtype=torch.bool)
        if left_window >= 0:
            allowed &= -rel <= left_window
        if right_window >= 0:
            allowed &= rel <= right_window
        window = _allowed_bias(allowed, dtype)
        bias = bias + (window.unsqueeze(1) if window.dim() == 3 else window)
    if nonpad is not None:
        keep = torch.arange(kvl, device=q.device) < nonpad.reshape(-1, 1)
        bias = bias + _allowed_bias(keep, dtype).reshape(-1, 1, 1, kvl)
    heads, kv_heads = q.shape[1], k.shape[1]
    if heads != kv_heads and heads % kv_heads == 0 and kv_heads == v.shape[1]:
        k = k.repeat_interleave(heads // kv_heads, 1)
        v = v.repeat_interleave(heads // kv_heads, 1)
    scores = torch.matmul(q * root_t, k.transpose(2, 3) * root_t)
    if softcap is not None and softcap > 0:
        scores = torch.tanh(scores / softcap) * softcap
    with_bias = scores + bias
    qk = with_bias if qk_matmul_output_mode == 2 else scores
    if softmax_precision is not None:
        with_bias = with_bias.to(onnx_dtype(softmax_precision))
    row_max = torch.amax(with_bias, -1, keepdim=True)
    masked_row = torch.isneginf(torch.amax(bias, -1, keepdim=True))
    safe = torch.where(torch.isneginf(row_max), torch.zeros_like(row_max), row_max)
    e = torch.exp(with_bias - safe)
    total = e.sum(-1, keepdim=True)
    probs = e / torch.where(total == 0, torch.ones_like(total), total)
    probs = torch.where(masked_row, torch.zeros_like(probs), probs)
    if qk_matmul_output_mode == 3:
        qk = probs
    y = torch.matmul(probs.to(dtype), v)
    if three_d:
        y = y.transpose(1, 2).reshape(y.shape[0], y.shape[2], -1)
    return y, present_key, present_value, qk.to(dtype)


def rotary_embedding(
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    position_ids: Tensor | None = None,
    *,
    interleaved: bool = False,
    rotary_dim: int = 0,
    num_heads: int = 0,
) -> Tensor:
    """ONNX RotaryEmbedding (opset 23) on torch tensors: ``x`` is ``(batch, heads, seq,
    size)`` or ``(batch, seq, heads * size)``; the first ``rotary_dim`` features of
    each head are rotated by the cached angles (of ``position_ids`` when given)."""
    shape = x.shape
    if x.dim() == 4:
        x = x.transpose(1, 2)
    else:
        if not num_heads:
            raise UsageError("RotaryEmbedding with a 3-D input needs num_heads")
        x = x.reshape(shape[0], shape[1], num_heads, shape[2] // num_heads)
    dim = rotary_dim or x.shape[3]
    rotated, kept = x[..., :dim], x[..., dim:]
    if position_ids is not None:
        cos, sin = cos[position_ids.to(torch.int64)], sin[position_ids.to(torch.int64)]
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)
    if interleaved:
        x1, x2 = rotated[..., 0::2], rotated[..., 1::2]
    else:
        x1, x2 = rotated.chunk(2, -1)
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if interleaved:
        rotated = torch.stack([real, imag], -1).reshape(rotated.shape)
    else:
        rotated = torch.cat([real, imag], -1)
    y = torch.cat([rotated, kept], -1)
    return y.reshape(shape) if len(shape) == 3 else y.transpose(1, 2)


def _heads_first(x: Tensor, heads: int) -> Tensor:
    """``(batch, seq, heads * size)`` as ``(batch, heads, seq, size)`` in float32."""
    b, t, hidden = x.shape
    return x.reshape(b, t, heads, hidden // heads).transpose(1, 2).to(torch.float32)


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    state: Tensor | None = None,
    decay: Tensor | None = None,
    beta: Tensor | None = None,
    *,
    q_heads: int,
    kv_heads: int,
    scale: float | None = None,
    rule: str = "gated_delta",
) -> tuple[Tensor, Tensor]:
    """ONNX LinearAttention on torch tensors, step by step as onnx's reference: a state
    ``(batch, kv_heads, d_k, d_v)`` updated by each key and value (decayed when the rule
    is gated, delta-corrected when it is a delta rule) and read by each query."""
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if (decay is None) == gating or (beta is None) == delta:
        raise UsageError(
            f"LinearAttention {rule!r} takes decay only when gated and beta only for delta rules"
        )
    b, steps, _ = q.shape
    d_k = q.shape[-1] // q_heads
    q4, k4, v4 = _heads_first(q, q_heads), _heads_first(k, kv_heads), _heads_first(v, kv_heads)
    d_v = v4.shape[-1]
    group = q_heads // kv_heads
    decay4 = beta4 = None
    if decay is not None:
        if decay.shape[-1] == kv_heads:
            decay4 = decay.reshape(b, steps, kv_heads, 1).transpose(1, 2).to(torch.float32)
        else:
            decay4 = _heads_first(decay, kv_heads)
    if beta is not None:
        beta4 = beta.reshape(b, steps, beta.shape[-1], 1).transpose(1, 2).to(torch.float32)
    state_dtype = q.dtype if state is None else state.dtype
    s = q4.new_zeros((b, kv_heads, d_k, d_v)) if state is None else state.to(torch.float32)
    factor = 1.0 / math.sqrt(d_k) if not scale else float(scale)
    outs = []
    for t in range(steps):
        v_t = v4[:, :, t]
        if decay4 is not None:
            s = s * torch.exp(decay4[:, :, t]).unsqueeze(-1)
        if beta4 is not None:
            v_t = beta4[:, :, t] * (v_t - torch.einsum("bhdm,bhd->bhm", s, k4[:, :, t]))
        s = s + k4[:, :, t].unsqueeze(-1) * v_t.unsqueeze(-2)
        read = s if group == 1 else s.repeat_interleave(group, 1)
        outs.append(factor * torch.einsum("bhd,bhdm->bhm", q4[:, :, t], read))
    y = torch.stack(outs, 2).transpose(1, 2).reshape(b, steps, q_heads * d_v)
    return y.to(q.dtype), s.to(state_dtype)


def _rnn(
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None,
    lens: Tensor | None,
    h0: Tensor | None,
    *,
    direction: str,
    layout: int,
    acts: list[Any],
    clip: float | None,
) -> tuple[Tensor, Tensor]:
    """ONNX's simple RNN: ``H = f(X W^T + H R^T + Wb + Rb)``, every direction."""
    if layout:
        x = x.transpose(0, 1)
        h0 = None if h0 is None else h0.transpose(0, 1)
    steps, batch = x.shape[0], x.shape[1]
    hidden = r.shape[2]
    ys, hs = [], []
    for d in range(w.shape[0]):
        f = acts[d]
        xw = torch.matmul(x, w[d].t())
        if b is not None:
            xw = xw + b[d, :hidden] + b[d, hidden:]
        h = x.new_zeros(batch, hidden) if h0 is None else h0[d]
        reverse = direction == "reverse" or d == 1
        out: list[Tensor] = [x] * steps
        for t in range(steps - 1, -1, -1) if reverse else range(steps):
            z = xw[t] + torch.matmul(h, r[d].t())
            h_new = f(torch.clamp(z, -clip, clip) if clip is not None else z)
            if lens is None:
                out[t] = h = h_new
            else:
                valid = (t < lens.to(torch.int64)).reshape(-1, 1)
                out[t] = torch.where(valid, h_new, torch.zeros_like(h_new))
                h = torch.where(valid, h_new, h)
        ys.append(torch.stack(out))
        hs.append(h)
    y, yh = torch.stack(ys, 1), torch.stack(hs)
    if layout:
        return y.permute(2, 0, 1, 3), yh.transpose(0, 1)
    return y, yh


class SequenceOps(TranslatorBase):
    """Translators of sequence operators."""

    def op_Attention(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        def optional_int(name: str) -> int | None:
            return None if a.get(name) is None else int(a[name])

        options: dict[str, Any] = {
            "scale": None if a.get("scale") is None else float(a["scale"]),
            "is_causal": bool(int(a.get("is_causal", 0))),
            "q_num_heads": optional_int("q_num_heads"),
            "kv_num_heads": optional_int("kv_num_heads"),
            "softmax_precision": optional_int("softmax_precision"),
            "softcap": None if a.get("softcap") is None else float(a["softcap"]),
            "qk_matmul_output_mode": int(a.get("qk_matmul_output_mode", 0)),
            "left_window": int(a.get("left_window_size", -1)),
            "right_window": int(a.get("right_window_size", -1)),
        }
        outputs = len(node.output)

        def run(*xs: Tensor | None) -> tuple[Tensor, ...]:
            q, k, v, *rest = xs
            assert q is not None and k is not None and v is not None
            return attention(q, k, v, *rest, **options)[:outputs]

        return run, list(node.input)

    def op_RotaryEmbedding(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        interleaved = bool(int(a.get("interleaved", 0)))
        rotary_dim, heads = int(a.get("rotary_embedding_dim", 0)), int(a.get("num_heads", 0))

        def rotary(x: Tensor, cos: Tensor, sin: Tensor, ids: Tensor | None = None) -> tuple[Tensor]:
            return (
                rotary_embedding(
                    x,
                    cos,
                    sin,
                    ids,
                    interleaved=interleaved,
                    rotary_dim=rotary_dim,
                    num_heads=heads,
                ),
            )

        return rotary, list(node.input[:4])

    def op_LinearAttention(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        rule = str(a.get("update_rule", "gated_delta"))
        if rule not in ("linear", "gated", "delta", "gated_delta"):
            raise UsageError(
                f"update_rule must be linear, gated, delta or gated_delta, not {rule!r}"
            )
        q_heads, kv_heads = int(a["q_num_heads"]), int(a["kv_num_heads"])
        scale = None if a.get("scale") is None else float(a["scale"])

        def run(*xs: Tensor | None) -> tuple[Tensor, Tensor]:
            q, k, v, *rest = xs
            assert q is not None and k is not None and v is not None
            return linear_attention(
                q, k, v, *rest, q_heads=q_heads, kv_heads=kv_heads, scale=scale, rule=rule
            )

        return run, list(node.input)

    def op_CausalConvWithState(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        activation = str(a.get("activation", "none"))
        if activation not in ("none", "silu", "swish"):
            raise UsageError(f"activation must be none, silu or swish, not {activation!r}")

        def causal_conv(
            x: Tensor, w: Tensor, b: Tensor | None = None, past: Tensor | None = None
        ) -> tuple[Tensor, Tensor]:
            k = w.shape[2]
            pad = x.new_zeros((x.shape[0], x.shape[1], k - 1)) if past is None else past
            padded = torch.cat([pad, x], 2)
            y = torch.nn.functional.conv1d(padded, w, b, groups=x.shape[1])
            if activation != "none":
                y = (y.float() * torch.sigmoid(y.float())).to(x.dtype)
            return y, padded[:, :, padded.shape[2] - (k - 1) :]

        return causal_conv, list(node.input[:4])

    def op_SwiGLU(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        alpha = float(a.get("alpha", 1.0))
        return self._binary(node, lambda x, y: x * torch.sigmoid(alpha * x) * y)

    def _recurrent_attributes(self, a: dict[str, Any]) -> dict[str, Any]:
        return {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in a.items()}

    def op_LSTM(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        attrs = self._recurrent_attributes(a)

        def run(*xs: Tensor | None) -> tuple[Tensor, ...]:
            return lstm(*xs, **attrs)  # type: ignore[arg-type]

        return run, list(node.input)

    def op_GRU(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        attrs = self._recurrent_attributes(a)

        def run(*xs: Tensor | None) -> tuple[Tensor, ...]:
            return gru(*xs, **attrs)  # type: ignore[arg-type]

        return run, list(node.input)

    def op_RNN(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        direction = str(a.get("direction", "forward"))
        dirs = 2 if direction == "bidirectional" else 1
        names = [n.decode() if isinstance(n, bytes) else str(n) for n in a.get("activations") or []]
        names = names or ["Tanh"] * dirs
        try:
            acts = [_RNN_ACTIVATIONS[n.lower()] for n in names]
        except KeyError as exc:
            raise UsageError(
                f"RNN activation {exc.args[0]!r} is not supported; use Tanh, Relu or Sigmoid"
            ) from None
        layout = int(a.get("layout", 0))
        clip = None if a.get("clip") is None else float(a["clip"])

        def run(*xs: Tensor | None) -> tuple[Tensor, ...]:
            x, w, r, b, lens, h0 = list(xs) + [None] * (6 - len(xs))
            assert x is not None and w is not None and r is not None
            return _rnn(
                x, w, r, b, lens, h0, direction=direction, layout=layout, acts=acts, clip=clip
            )

        return run, list(node.input)
