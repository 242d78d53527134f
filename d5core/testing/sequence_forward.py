"""Plain numpy forwards of the zoo's sequence models, written from their definitions.

:mod:`d5core.lv1.zoo_sequence` builds ONNX graphs; these functions compute the
same models directly from the parameters (by the names the builders give them), with
no ONNX involved, so a test can tell a wrong graph from a wrong executor: the reference
executor running the graph must agree with them. They compute in the dtype of the
parameters (float64 for tight comparisons). Import this module in tests only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import numpy as np

__all__ = ["FORWARDS", "TINY", "bert_forward", "gpt_forward", "lstm_forward", "vit_forward"]

_erf = np.vectorize(math.erf, otypes=[np.float64])
_Params = Mapping[str, np.ndarray]


def _layer_norm(x: np.ndarray, p: _Params, base: str) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return np.asarray((x - mean) / np.sqrt(var + 1e-5) * p[f"{base}.scale"] + p[f"{base}.bias"])


def _linear(x: np.ndarray, p: _Params, base: str) -> np.ndarray:
    return x @ p[f"{base}.weight"] + p[f"{base}.bias"]


def _f32(value: float) -> float:
    """``value`` rounded to float32, as the graphs store their constants."""
    return float(np.float32(value))


def _gelu(x: np.ndarray) -> np.ndarray:
    return np.asarray(0.5 * x * (1.0 + _erf(x / _f32(math.sqrt(2.0))).astype(x.dtype)))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return np.asarray(e / e.sum(axis=-1, keepdims=True))


def _attention(
    x: np.ndarray, p: _Params, base: str, heads: int, keep: np.ndarray | None
) -> np.ndarray:
    """``keep`` broadcasts to the scores ``(N, heads, seq, seq)``: False drops a score."""
    n, s, hidden = x.shape
    dh = hidden // heads

    def split(t: np.ndarray) -> np.ndarray:
        return t.reshape(n, s, heads, dh).transpose(0, 2, 1, 3)

    q, k, v = (split(_linear(x, p, f"{base}.{w}")) for w in ("query", "key", "value"))
    scores = q @ k.transpose(0, 1, 3, 2) * _f32(1.0 / math.sqrt(dh))
    if keep is not None:
        scores = np.where(keep, scores, -1e9)
    context = (_softmax(scores) @ v).transpose(0, 2, 1, 3).reshape(n, s, hidden)
    return _linear(context, p, f"{base}.output")


def _mlp(x: np.ndarray, p: _Params, base: str) -> np.ndarray:
    return _linear(_gelu(_linear(x, p, f"{base}.up")), p, f"{base}.down")


def _layers(p: _Params, prefix: str) -> int:
    return len({k.split(".")[0] for k in p if k.startswith(prefix)})


def _pre_ln_block(
    x: np.ndarray, p: _Params, base: str, heads: int, keep: np.ndarray | None
) -> np.ndarray:
    x = x + _attention(_layer_norm(x, p, f"{base}.ln1"), p, f"{base}.attn", heads, keep)
    return np.asarray(x + _mlp(_layer_norm(x, p, f"{base}.ln2"), p, f"{base}.mlp"))


def gpt_forward(
    p: _Params, ids: np.ndarray, *, heads: int, tied: bool = False, vocab_last: bool = False
) -> np.ndarray:
    """Logits of :func:`~d5core.lv1.zoo_sequence.gpt`: ``(N, vocab, seq)``, or
    ``(N, seq, vocab)`` with ``vocab_last``."""
    seq = ids.shape[1]
    x = p["embed.tokens"][ids] + p["embed.positions"]
    keep = np.tril(np.ones((seq, seq), dtype=bool))
    for i in range(_layers(p, "block")):
        x = _pre_ln_block(x, p, f"block{i}", heads, keep)
    x = _layer_norm(x, p, "ln_final")
    logits = x @ (p["embed.tokens"].T if tied else p["head.weight"])
    return logits if vocab_last else logits.transpose(0, 2, 1)


def bert_forward(
    p: _Params, ids: np.ndarray, *, heads: int, padding_mask: bool = True
) -> np.ndarray:
    """Logits ``(N, classes)`` of :func:`~d5core.lv1.zoo_sequence.bert`."""
    x = _layer_norm(p["embed.tokens"][ids] + p["embed.positions"], p, "embed.ln")
    keep = (ids != 0)[:, None, None, :] if padding_mask else None
    for i in range(_layers(p, "layer")):
        base = f"layer{i}"
        x = _layer_norm(x + _attention(x, p, f"{base}.attn", heads, keep), p, f"{base}.ln1")
        x = _layer_norm(x + _mlp(x, p, f"{base}.mlp"), p, f"{base}.ln2")
    pooled = np.tanh(x[:, 0] @ p["pooler.weight"].T + p["pooler.bias"])
    return np.asarray(pooled @ p["classifier.weight"].T + p["classifier.bias"])


def vit_forward(p: _Params, images: np.ndarray, *, heads: int, patch: int) -> np.ndarray:
    """Logits ``(N, classes)`` of :func:`~d5core.lv1.zoo_sequence.vit`."""
    n, c, h, w = images.shape
    tiles = images.reshape(n, c, h // patch, patch, w // patch, patch)
    tokens = np.einsum("ncypxq,dcpq->nyxd", tiles, p["patch.weight"]) + p["patch.bias"]
    tokens = tokens.reshape(n, -1, tokens.shape[-1])
    cls = np.broadcast_to(p["embed.class"], (n, 1, tokens.shape[-1]))
    x = np.concatenate([cls, tokens], axis=1) + p["embed.positions"]
    for i in range(_layers(p, "block")):
        x = _pre_ln_block(x, p, f"block{i}", heads, None)
    first = _layer_norm(x, p, "ln_final")[:, 0]
    return first @ p["head.weight"].T + p["head.bias"]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.asarray(1.0 / (1.0 + np.exp(-x)))


def _lstm_direction(
    x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray, reverse: bool
) -> tuple[np.ndarray, np.ndarray]:
    """One direction of ONNX LSTM (gates in ``i, o, f, c`` order, no peepholes):
    ``Y`` ``(seq, N, hidden)`` in time order and the final hidden state."""
    seq, n, _ = x.shape
    hidden = r.shape[1]
    h = np.zeros((n, hidden), x.dtype)
    c = np.zeros((n, hidden), x.dtype)
    ys = [h] * seq
    bias = b[: 4 * hidden] + b[4 * hidden :]
    for t in reversed(range(seq)) if reverse else range(seq):
        gates = x[t] @ w.T + h @ r.T + bias
        i, o, f, g = np.split(gates, 4, axis=1)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        ys[t] = h
    return np.stack(ys), h


def lstm_forward(p: _Params, ids: np.ndarray) -> np.ndarray:
    """Logits ``(N, classes)`` of :func:`~d5core.lv1.zoo_sequence.lstm`."""
    x = p["embed.tokens"][ids].transpose(1, 0, 2)
    last: list[np.ndarray] = []
    for i in range(_layers(p, "lstm")):
        w, r, b = p[f"lstm{i}.W"], p[f"lstm{i}.R"], p[f"lstm{i}.B"]
        outs = [_lstm_direction(x, w[d], r[d], b[d], reverse=d == 1) for d in range(w.shape[0])]
        x = np.concatenate([y for y, _ in outs], axis=-1)
        last = [h for _, h in outs]
    features = np.concatenate(last, axis=-1)
    return features @ p["head.weight"].T + p["head.bias"]


#: Model name to its forward.
FORWARDS = {"bert": bert_forward, "gpt": gpt_forward, "lstm": lstm_forward, "vit": vit_forward}

#: Tiny options of each zoo sequence model for tests (builder keyword arguments), with
#: weights large enough that attention is far from uniform. Read-only: spread an entry
#: into a new dict to change it.
TINY: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "gpt": MappingProxyType(
            {"vocab": 11, "seq_len": 5, "hidden": 8, "heads": 2, "layers": 2, "init_std": 0.5}
        ),
        "bert": MappingProxyType(
            {"vocab": 11, "seq_len": 5, "hidden": 8, "heads": 2, "layers": 2, "init_std": 0.5}
        ),
        "vit": MappingProxyType(
            {
                "image_size": 4,
                "patch": 2,
                "channels": 2,
                "hidden": 8,
                "heads": 2,
                "layers": 1,
                "init_std": 0.5,
            }
        ),
        "lstm": MappingProxyType(
            {"vocab": 11, "seq_len": 4, "embed": 3, "hidden": 5, "layers": 2, "bidirectional": True}
        ),
    }
)
