"""ONNX Attention in float64, written from the operator's definition, to judge
conformance cases whose expected outputs are themselves rounded (bfloat16, float16).

onnx's expected outputs for a bfloat16 Attention case were computed with bfloat16
intermediates, so they are not the exact answer: the exact answer, rounded to bfloat16,
differs from them by up to two ulps. :func:`attention_float64` gives that exact answer
from the case's inputs, so a test can ask whether an executor's output is as close to it
as the stored outputs are, rather than trusting either alone.

Import this module in tests only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import helper

__all__ = ["attention_float64"]


def attention_float64(node: onnx.NodeProto, feeds: Mapping[str, Any]) -> np.ndarray:
    """Output ``Y`` of the Attention ``node`` on ``feeds`` (by the node's input names),
    in float64: ``softmax(Q Kᵀ / sqrt(head_size) + bias) V``, where the bias adds
    ``attn_mask`` (a shorter last axis padded with -inf), masks keys at or past
    ``nonpad_kv_seqlen[b]``, and with ``is_causal`` lets query ``i`` see key ``j`` only
    when ``j <= i + offset`` (``offset`` 0, or ``nonpad_kv_seqlen[b] - q_len`` with a
    padded cache). A row with every key masked gives zeros. 3-d inputs are split into
    ``q_num_heads``/``kv_num_heads`` heads. Past key/value caches, ``scale``,
    ``softcap`` and the extra outputs are not covered (a ``ValueError`` says so)."""
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    unsupported = set(attrs) - {"is_causal", "q_num_heads", "kv_num_heads"}
    names = dict(zip(("Q", "K", "V", "attn_mask", "past_key", "past_value",
                      "nonpad_kv_seqlen"), node.input, strict=False))  # fmt: skip
    if unsupported or names.get("past_key") or names.get("past_value"):
        raise ValueError(f"attention_float64 does not cover {sorted(unsupported) or 'a cache'}")
    get = {role: np.asarray(feeds[name]) for role, name in names.items() if name}
    q, k, v = (get[r].astype(np.float64) for r in ("Q", "K", "V"))
    three = q.ndim == 3
    if three:
        heads_q, heads_kv = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
        q = q.reshape(q.shape[0], q.shape[1], heads_q, -1).transpose(0, 2, 1, 3)
        k = k.reshape(k.shape[0], k.shape[1], heads_kv, -1).transpose(0, 2, 1, 3)
        v = v.reshape(v.shape[0], v.shape[1], heads_kv, -1).transpose(0, 2, 1, 3)
    if q.shape[1] != k.shape[1]:  # grouped heads: each key head serves several queries
        k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
        v = np.repeat(v, q.shape[1] // v.shape[1], axis=1)
    batch, q_len, kv_len = q.shape[0], q.shape[2], k.shape[2]
    scores = q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1])
    bias = np.zeros((batch, 1, q_len, kv_len))
    if "attn_mask" in get:
        mask = get["attn_mask"]
        mask = np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_ else mask.astype(np.float64)
        padded = np.full((*mask.shape[:-1], kv_len), -np.inf)
        padded[..., : mask.shape[-1]] = mask
        bias = bias + padded
    rows, cols = np.arange(q_len)[:, None], np.arange(kv_len)[None, :]
    lengths = get.get("nonpad_kv_seqlen")
    for b in range(batch):
        if lengths is not None:
            bias[b] += np.where(cols < int(lengths[b]), 0.0, -np.inf)
        if int(attrs.get("is_causal", 0)):
            offset = 0 if lengths is None else int(lengths[b]) - q_len
            bias[b] += np.where(cols <= rows + offset, 0.0, -np.inf)
    scores = scores + bias
    top = np.max(scores, axis=-1, keepdims=True)
    dead = np.isneginf(top)
    weights = np.exp(scores - np.where(dead, 0.0, top))
    total = weights.sum(axis=-1, keepdims=True)
    y = (weights / np.where(total == 0, 1.0, total)) @ v
    if three:
        y = y.transpose(0, 2, 1, 3).reshape(batch, q_len, -1)
    return np.asarray(y)
