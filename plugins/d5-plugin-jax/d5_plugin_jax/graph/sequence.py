"""ONNX's recurrent layers (LSTM, GRU, RNN) as one ``jax.lax.scan`` per direction.

Each direction first projects the whole input sequence with one product (``X @ W^T``
plus the input biases, and the recurrent biases where they simply add), then scans the
time steps carrying the hidden state (and LSTM's cell state). A step computes the
recurrent product and the gates in ONNX's order (LSTM ``i, o, f, c`` with optional
peepholes ``P = [i, o, f]``; GRU ``z, r, h`` with ``linear_before_reset``; RNN one
gate). ``clip`` bounds the gate inputs, ``input_forget`` couples LSTM's forget gate to
its input gate, and the activations are any of ONNX's recurrent list with their
``activation_alpha`` and ``activation_beta``.

``reverse`` and the second direction of ``bidirectional`` read each sequence backwards
within its own length (``sequence_lens``); past its length a sequence keeps its state
and outputs zeros. ``layout=1`` (batch first) is transposed on entry and exit. The
gradient is JAX's, through the scan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from d5_plugin_jax import _jax
from d5_plugin_jax.graph.registry import NodeContext, check, op
from d5core.api import UsageError
from d5core.onnx import RECURRENT_ACTIVATIONS, RecurrentActivationSpec, recurrent_attributes

__all__ = ["RecurrentConfig", "check_recurrent", "recurrent", "recurrent_config"]

Activation = Callable[[Any], Any]

jax = _jax.jax()
jnp = jax.numpy


@dataclass(frozen=True)
class RecurrentConfig:
    """The attributes of one LSTM, GRU or RNN node that the computation reads."""

    op_type: str
    gates: int
    backwards: tuple[bool, ...]  # per direction: whether it reads the sequence reversed
    layout: int
    hidden_size: int | None
    clip: float | None
    activations: tuple[tuple[RecurrentActivationSpec, ...], ...]
    input_forget: bool
    linear_before_reset: bool


def _where(node: onnx.NodeProto) -> str:
    return f"node {node.name!r} ({node.op_type})"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _rnn_activations(
    attrs: Mapping[str, Any], directions: int, where: str
) -> tuple[tuple[RecurrentActivationSpec, ...], ...]:
    """The activation of each direction of an RNN node (one per direction, Tanh by
    default), with ONNX's defaults for the parameters it does not give."""
    names = [_text(n) for n in attrs.get("activations") or ["Tanh"] * directions]
    if len(names) != directions:
        raise UsageError(
            f"{where}: {len(names)} activations given for {directions} direction(s); "
            f"give one per direction"
        )
    alphas = list(attrs.get("activation_alpha") or [])
    betas = list(attrs.get("activation_beta") or [])
    canonical = {name.lower(): name for name in RECURRENT_ACTIVATIONS}
    specs: list[tuple[RecurrentActivationSpec, ...]] = []
    for name in names:
        known = canonical.get(name.lower())
        if known is None:
            raise UsageError(
                f"{where}: activation {name} is not supported; use one of "
                + ", ".join(RECURRENT_ACTIVATIONS)
            )
        defaults = RECURRENT_ACTIVATIONS[known]
        alpha = float(alphas.pop(0)) if defaults.uses_alpha and alphas else defaults.alpha
        beta = float(betas.pop(0)) if defaults.uses_beta and betas else defaults.beta
        specs.append((RecurrentActivationSpec(known, alpha, beta),))
    return tuple(specs)


def recurrent_config(node: onnx.NodeProto, attrs: Mapping[str, Any]) -> RecurrentConfig:
    """Read and check the attributes of ``node``; a bad one is a one-line
    :class:`UsageError` naming the node."""
    where = _where(node)
    if node.op_type in ("LSTM", "GRU"):
        cfg = recurrent_attributes(node.op_type, attrs, where)
        direction, directions = cfg.direction, cfg.directions
        gates, layout, hidden, clip = cfg.gates, cfg.layout, cfg.hidden_size, cfg.clip
        acts, input_forget, lbr = cfg.activations, cfg.input_forget, cfg.linear_before_reset
    else:
        direction = _text(attrs.get("direction") or "forward")
        directions = {"forward": 1, "reverse": 1, "bidirectional": 2}.get(direction, 0)
        if not directions:
            raise UsageError(
                f"{where}: direction {direction!r} is not one of forward, reverse, bidirectional"
            )
        layout = int(attrs.get("layout") or 0)
        if layout not in (0, 1):
            raise UsageError(f"{where}: layout {layout} is not 0 or 1")
        clip_value = attrs.get("clip")
        clip = None if clip_value is None else float(clip_value)
        if clip is not None and not clip > 0:
            raise UsageError(f"{where}: clip must be positive, not {clip}")
        size = attrs.get("hidden_size")
        gates, hidden, input_forget, lbr = 1, None if size is None else int(size), False, False
        acts = _rnn_activations(attrs, directions, where)
    backwards = tuple(direction == "reverse" or d == 1 for d in range(directions))
    return RecurrentConfig(
        node.op_type, gates, backwards, layout, hidden, clip, acts, input_forget, lbr
    )


@check("LSTM", "GRU", "RNN")
def check_recurrent(ctx: NodeContext) -> None:
    """Refuse, when the graph is built, a recurrent node whose attributes are wrong."""
    recurrent_config(ctx.node, ctx.attrs)


def _activation(spec: RecurrentActivationSpec) -> Activation:
    """The JAX function of one recurrent activation."""
    a, b = spec.alpha, spec.beta
    functions: dict[str, Activation] = {
        "Sigmoid": jax.nn.sigmoid,
        "Tanh": jnp.tanh,
        "Relu": jax.nn.relu,
        "HardSigmoid": lambda x: jnp.clip(a * x + b, 0.0, 1.0),
        "LeakyRelu": lambda x: jnp.where(x >= 0, x, a * x),
        "ThresholdedRelu": lambda x: jnp.where(x > a, x, jnp.zeros_like(x)),
        "ScaledTanh": lambda x: a * jnp.tanh(b * x),
        "Affine": lambda x: a * x + b,
        "Elu": lambda x: jnp.where(x >= 0, x, a * jnp.expm1(jnp.minimum(x, 0.0))),
        "Softsign": lambda x: x / (1 + jnp.abs(x)),
        "Softplus": jax.nn.softplus,
    }
    return functions[spec.name]


def _reverse_index(lens: Any, steps: int, batch: int) -> Any:
    """Per (step, batch) the step to read when a sequence is read backwards within its
    own length: ``len - 1 - t`` below the length, ``t`` past it."""
    t = jnp.arange(steps)[:, None]
    if lens is None:
        return jnp.broadcast_to(steps - 1 - t, (steps, batch))
    return jnp.where(t < lens[None, :], lens[None, :] - 1 - t, t)


def _direction(
    cfg: RecurrentConfig,
    d: int,
    x: Any,
    w: Any,
    r: Any,
    b: Any,
    lens: Any,
    h0: Any,
    c0: Any,
    p: Any,
) -> tuple[Any, Any, Any]:
    """One direction: ``Y`` ``(steps, batch, hidden)`` in time order, the last hidden
    state and (LSTM) the last cell state."""
    steps, batch = x.shape[0], x.shape[1]
    hidden = r.shape[-1]
    gates = cfg.gates
    acts = [_activation(s) for s in cfg.activations[d]]
    f = acts[0]
    backward = cfg.backwards[d]
    clip = cfg.clip

    def clipped(v: Any) -> Any:
        return jnp.clip(v, -clip, clip) if clip is not None else v

    index = _reverse_index(lens, steps, batch) if backward else None
    seq = jnp.take_along_axis(x, index[:, :, None], axis=0) if index is not None else x
    proj = jnp.einsum("tbi,gi->tbg", seq, w[d])
    rb = None
    if b is not None:
        wb, rb = b[d, : gates * hidden], b[d, gates * hidden :]
        if cfg.op_type == "GRU":  # the hidden gate's recurrent bias goes inside the reset
            proj = proj + wb + jnp.concatenate([rb[: 2 * hidden], jnp.zeros_like(rb[:hidden])])
            rb = rb[2 * hidden :]
        else:
            proj = proj + wb + rb
    if lens is not None:
        mask = (jnp.arange(steps)[:, None] < lens[None, :]).astype(x.dtype)[:, :, None]
    else:
        mask = jnp.ones((steps, 1, 1), x.dtype)
    h = h0[d] if h0 is not None else jnp.zeros((batch, hidden), x.dtype)
    c = c0[d] if c0 is not None else jnp.zeros((batch, hidden), x.dtype)
    rt = r[d].T  # (hidden, gates * hidden)
    peep = p[d] if p is not None else None

    def lstm_step(h: Any, c: Any, xt: Any) -> tuple[Any, Any]:
        pre = xt + h @ rt
        pi, po, pf, pc = (pre[:, k * hidden : (k + 1) * hidden] for k in range(4))
        if peep is not None:
            pi = pi + peep[:hidden] * c
            pf = pf + peep[2 * hidden :] * c
        i_t = f(clipped(pi))
        f_t = 1 - i_t if cfg.input_forget else f(clipped(pf))
        c_new = f_t * c + i_t * acts[1](clipped(pc))
        if peep is not None:
            po = po + peep[hidden : 2 * hidden] * c_new
        return f(clipped(po)) * acts[2](c_new), c_new

    def gru_step(h: Any, xt: Any) -> Any:
        zr = h @ rt[:, : 2 * hidden]
        z_t = f(clipped(xt[:, :hidden] + zr[:, :hidden]))
        r_t = f(clipped(xt[:, hidden : 2 * hidden] + zr[:, hidden:]))
        rh = rt[:, 2 * hidden :]
        hr = (h @ rh) if cfg.linear_before_reset else ((r_t * h) @ rh)
        if rb is not None:
            hr = hr + rb
        h_pre = xt[:, 2 * hidden :] + (r_t * hr if cfg.linear_before_reset else hr)
        return (1 - z_t) * acts[1](clipped(h_pre)) + z_t * h

    def step(carry: tuple[Any, Any], item: tuple[Any, Any]) -> tuple[tuple[Any, Any], Any]:
        h, c = carry
        xt, m = item
        if cfg.op_type == "LSTM":
            h_new, c_new = lstm_step(h, c, xt)
            c_new = m * c_new + (1 - m) * c
        elif cfg.op_type == "GRU":
            h_new, c_new = gru_step(h, xt), c
        else:
            h_new, c_new = f(clipped(xt + h @ rt)), c
        h_new = m * h_new + (1 - m) * h
        return (h_new, c_new), m * h_new

    (h, c), ys = jax.lax.scan(step, (h, c), (proj, jnp.broadcast_to(mask, (steps, batch, 1))))
    if index is not None:
        ys = jnp.take_along_axis(ys, index[:, :, None], axis=0)
    return ys, h, c


def recurrent(cfg: RecurrentConfig, node: onnx.NodeProto, inputs: Sequence[Any]) -> list[Any]:
    """The outputs of a recurrent ``node`` (``Y``, ``Y_h`` and, for LSTM, ``Y_c``)."""
    padded = [*inputs, *[None] * 8][:8]
    x, w, r, b, lens, h0, c0, p = padded
    if cfg.op_type != "LSTM":
        c0 = p = None
    if x is None or w is None or r is None:
        raise UsageError(f"{_where(node)}: X, W and R are required inputs")
    x, w, r = jnp.asarray(x), jnp.asarray(w, x.dtype), jnp.asarray(r, x.dtype)
    b, h0, c0, p = (None if v is None else jnp.asarray(v, x.dtype) for v in (b, h0, c0, p))
    hidden = int(r.shape[-1])
    if cfg.hidden_size is not None and cfg.hidden_size != hidden:
        raise UsageError(
            f"{_where(node)}: hidden_size is {cfg.hidden_size} but R has shape {tuple(r.shape)}"
        )
    if cfg.layout:
        x = jnp.swapaxes(x, 0, 1)
        h0, c0 = (None if v is None else jnp.swapaxes(v, 0, 1) for v in (h0, c0))
    if lens is not None:
        lens = jnp.asarray(np.asarray(lens) if isinstance(lens, np.ndarray) else lens, "int32")
    results = [_direction(cfg, d, x, w, r, b, lens, h0, c0, p) for d in range(len(cfg.backwards))]
    y = jnp.stack([ys for ys, _, _ in results], axis=1)  # (steps, dirs, batch, hidden)
    y_h = jnp.stack([h for _, h, _ in results])
    y_c = jnp.stack([c for _, _, c in results])
    if cfg.layout:
        y = jnp.transpose(y, (2, 0, 1, 3))
        y_h, y_c = jnp.swapaxes(y_h, 0, 1), jnp.swapaxes(y_c, 0, 1)
    outputs = [y, y_h, y_c] if cfg.op_type == "LSTM" else [y, y_h]
    return outputs[: len(node.output)]


@op("LSTM", "GRU", "RNN")
def recurrent_op(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """Translate an LSTM, GRU or RNN node."""
    return recurrent(recurrent_config(ctx.node, ctx.attrs), ctx.node, inputs)
