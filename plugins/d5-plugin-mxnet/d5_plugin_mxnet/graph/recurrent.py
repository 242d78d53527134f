"""ONNX's recurrent layers, LSTM and GRU, unrolled over the (static) sequence length.

Each direction projects the whole input sequence with one ``FullyConnected`` (the input
weights and both biases), then runs one step per time position: the recurrent
projection, the gates (LSTM: ``i, o, f, c`` in ONNX's order, with optional peepholes;
GRU: ``z, r, h``, with ``linear_before_reset``) and the new state. ``reverse`` and
``bidirectional`` run a direction over the sequence reversed (within each sequence's own
length when ``sequence_lens`` is given, as ``SequenceReverse`` does); positions past a
sequence's length keep its state and output zeros. ``layout=1`` (batch first) is
transposed on entry and exit. Activations may be any ONNX lists for recurrent layers,
with their ``activation_alpha`` and ``activation_beta``; ``clip`` bounds the gate inputs;
``input_forget`` makes the forget gate ``1 - i``; without ``hidden_size`` the size is read
from ``R``. Both front ends build the same graph, so autograd gives the backward.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from d5_plugin_mxnet.graph.base import Context, Reader, Translated, Translation, node_error
from d5core.api import UsageError
from d5core.onnx import RECURRENT_GATES, RecurrentAttributes, recurrent_attributes

__all__ = ["OPS"]


def _activation(name: str, a: float, b: float) -> Callable[[Any, Any], Any]:
    """The function of ``(F, x)`` of an activation as ONNX's recurrent layers name it."""
    functions: dict[str, Callable[[Any, Any], Any]] = {
        "Sigmoid": lambda F, x: F.sigmoid(x),
        "Tanh": lambda F, x: F.tanh(x),
        "Relu": lambda F, x: F.relu(x),
        "HardSigmoid": lambda F, x: F.clip(x * a + b, 0.0, 1.0),
        "LeakyRelu": lambda F, x: F.LeakyReLU(x, act_type="leaky", slope=a),
        "ThresholdedRelu": lambda F, x: x * (x > a),
        "ScaledTanh": lambda F, x: F.tanh(x * b) * a,
        "Affine": lambda F, x: x * a + b,
        "Elu": lambda F, x: F.LeakyReLU(x, act_type="elu", slope=a),
        "Softsign": lambda F, x: F.softsign(x),
        "Softplus": lambda F, x: F.Activation(x, act_type="softrelu"),
    }
    return functions[name]


def _settings(node: onnx.NodeProto, a: dict[str, Any]) -> RecurrentAttributes:
    """The attributes of an LSTM or GRU node, checked (one line naming the node)."""
    try:
        return recurrent_attributes(node.op_type, a)
    except UsageError as exc:
        raise node_error(node, str(exc)) from None


def _pick(F: Any, x: Any, index: int, shape: Sequence[int]) -> Any:
    """``x[index]`` along axis 0 (``x`` of ``shape``)."""
    return F.reshape(F.slice_axis(x, axis=0, begin=index, end=index + 1), shape=tuple(shape[1:]))


def _recurrent(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    lstm = node.op_type == "LSTM"
    gates = RECURRENT_GATES[node.op_type]
    cfg = _settings(node, a)
    acts = [[_activation(s.name, s.alpha, s.beta) for s in per] for per in cfg.activations]
    names = list(node.input) + [""] * (8 - len(node.input))
    # X, W, R, B, sequence_lens, initial_h, initial_c (LSTM), P (LSTM)
    wanted = [0, 1, 2, 3, 4, 5, 6, 7] if lstm else [0, 1, 2, 3, 4, 5]
    present = [i for i in wanted if names[i]]
    inputs = [names[i] for i in present]
    outputs = list(node.output)

    def run(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        F = ctx.F
        got = dict(zip(present, xs, strict=True))
        shapes = dict(zip(present, ctx.shapes, strict=True))
        dtype = ctx.dtypes[0]
        assert dtype is not None
        dirs, clip = cfg.directions, cfg.clip
        hidden = shapes[2][-1]
        if cfg.hidden_size is not None and cfg.hidden_size != hidden:
            raise node_error(node, f"hidden_size is {cfg.hidden_size} but R has shape {shapes[2]}")
        x = got[0]
        if cfg.layout:
            x = F.transpose(x, axes=(1, 0, 2))
            steps, batch, width = shapes[0][1], shapes[0][0], shapes[0][2]
        else:
            steps, batch, width = shapes[0]
        for k in (5, 6):  # initial states to (dirs, batch, hidden)
            if k in got and cfg.layout:
                got[k] = F.transpose(got[k], axes=(1, 0, 2))
                shapes[k] = (shapes[k][1], shapes[k][0], shapes[k][2])
        lens = got.get(4)
        if lens is not None:
            lens_f = F.cast(lens, dtype=dtype.name)
            positions = ctx.constant("positions", np.arange(steps, dtype=dtype).reshape(steps, 1))
            mask = F.broadcast_lesser(positions, F.reshape(lens_f, shape=(1, batch)))
            masks = [
                F.reshape(_pick(F, mask, t, (steps, batch)), shape=(batch, 1)) for t in range(steps)
            ]

        def clipped(v: Any) -> Any:
            return F.clip(v, -clip, clip) if clip is not None else v

        ys, last_h, last_c = [], [], []
        for d in range(dirs):
            f, g = acts[d][0], acts[d][1]
            h_act = acts[d][2] if lstm else None
            w = _pick(F, got[1], d, shapes[1])
            r = _pick(F, got[2], d, shapes[2])
            if 3 in got:
                b = _pick(F, got[3], d, shapes[3])
                wb = F.slice_axis(b, axis=0, begin=0, end=gates * hidden)
                rb = F.slice_axis(b, axis=0, begin=gates * hidden, end=2 * gates * hidden)
            else:
                wb = rb = None
            backward = cfg.direction == "reverse" or d == 1
            seq = x
            if backward:
                if lens is not None:
                    seq = F.SequenceReverse(
                        x, F.cast(lens, dtype=dtype.name), use_sequence_length=True
                    )
                else:
                    seq = F.reverse(x, axis=0)
            flat = F.reshape(seq, shape=(steps * batch, width))
            if wb is None:
                proj = F.FullyConnected(flat, w, num_hidden=gates * hidden, no_bias=True)
            elif lstm or not cfg.linear_before_reset:
                bias = wb + rb
                if not lstm:  # the h gate's recurrent bias goes inside the reset
                    bias = F.concat(
                        F.slice_axis(wb + rb, axis=0, begin=0, end=2 * hidden),
                        F.slice_axis(wb, axis=0, begin=2 * hidden, end=3 * hidden),
                        dim=0,
                    )
                proj = F.FullyConnected(flat, w, bias, num_hidden=gates * hidden)
            else:
                bias = F.concat(
                    F.slice_axis(wb + rb, axis=0, begin=0, end=2 * hidden),
                    F.slice_axis(wb, axis=0, begin=2 * hidden, end=3 * hidden),
                    dim=0,
                )
                proj = F.FullyConnected(flat, w, bias, num_hidden=gates * hidden)
            proj = F.reshape(proj, shape=(steps, batch, gates * hidden))
            h = (
                _pick(F, got[5], d, shapes[5])
                if 5 in got
                else ctx.constant("zeros", np.zeros((batch, hidden), dtype))
            )
            c = None
            if lstm:
                c = (
                    _pick(F, got[6], d, shapes[6])
                    if 6 in got
                    else ctx.constant("zeros", np.zeros((batch, hidden), dtype))
                )
                if 7 in got:
                    p = _pick(F, got[7], d, shapes[7])
                    p_i, p_o, p_f = (
                        F.reshape(
                            F.slice_axis(p, axis=0, begin=k * hidden, end=(k + 1) * hidden),
                            shape=(1, hidden),
                        )
                        for k in range(3)
                    )
            rh_bias = (
                F.slice_axis(rb, axis=0, begin=2 * hidden, end=3 * hidden)
                if (rb is not None and not lstm)
                else None
            )
            outs = []
            for t in range(steps):
                xt = _pick(F, proj, t, (steps, batch, gates * hidden))

                def gate(k: int, v: Any) -> Any:
                    return F.slice_axis(v, axis=1, begin=k * hidden, end=(k + 1) * hidden)

                if lstm:
                    rec = F.FullyConnected(h, r, num_hidden=4 * hidden, no_bias=True)
                    pre = xt + rec
                    pi, po, pf, pc = (gate(k, pre) for k in range(4))
                    if 7 in got:
                        pi = F.broadcast_add(pi, F.broadcast_mul(p_i, c))
                        pf = F.broadcast_add(pf, F.broadcast_mul(p_f, c))
                    i_t, c_t = f(F, clipped(pi)), g(F, clipped(pc))
                    f_t = 1 - i_t if cfg.input_forget else f(F, clipped(pf))
                    c_new = f_t * c + i_t * c_t
                    if 7 in got:
                        po = F.broadcast_add(po, F.broadcast_mul(p_o, c_new))
                    o_t = f(F, clipped(po))
                    assert h_act is not None
                    h_new = o_t * h_act(F, c_new)
                else:
                    rz_rr = F.FullyConnected(
                        h,
                        F.slice_axis(r, axis=0, begin=0, end=2 * hidden),
                        num_hidden=2 * hidden,
                        no_bias=True,
                    )
                    rh = F.slice_axis(r, axis=0, begin=2 * hidden, end=3 * hidden)
                    z_t = f(F, clipped(gate(0, xt) + gate(0, rz_rr)))
                    r_t = f(F, clipped(gate(1, xt) + gate(1, rz_rr)))
                    if cfg.linear_before_reset:
                        hr = F.FullyConnected(h, rh, num_hidden=hidden, no_bias=True)
                        if rh_bias is not None:
                            hr = F.broadcast_add(hr, F.reshape(rh_bias, shape=(1, hidden)))
                        h_pre = gate(2, xt) + r_t * hr
                    else:
                        hr = F.FullyConnected(r_t * h, rh, num_hidden=hidden, no_bias=True)
                        if rh_bias is not None:
                            hr = F.broadcast_add(hr, F.reshape(rh_bias, shape=(1, hidden)))
                        h_pre = gate(2, xt) + hr
                    h_t = g(F, clipped(h_pre))
                    h_new = (1 - z_t) * h_t + z_t * h
                    c_new = None
                if lens is not None:
                    m = masks[t]
                    h_new = F.broadcast_mul(h_new, m) + F.broadcast_mul(h, 1 - m)
                    if lstm:
                        c_new = F.broadcast_mul(c_new, m) + F.broadcast_mul(c, 1 - m)
                    outs.append(F.broadcast_mul(h_new, m))
                else:
                    outs.append(h_new)
                h, c = h_new, c_new
            y = F.stack(*outs, axis=0)
            if backward:
                if lens is not None:
                    y = F.SequenceReverse(
                        y, F.cast(lens, dtype=dtype.name), use_sequence_length=True
                    )
                else:
                    y = F.reverse(y, axis=0)
            ys.append(y)
            last_h.append(h)
            last_c.append(c)
        y_all = F.stack(*ys, axis=1)  # (steps, dirs, batch, hidden)
        y_h = F.stack(*last_h, axis=0)
        if cfg.layout:
            y_all = F.transpose(y_all, axes=(2, 0, 1, 3))
            y_h = F.transpose(y_h, axes=(1, 0, 2))
        results = [y_all, y_h]
        if lstm:
            y_c = F.stack(*last_c, axis=0)
            results.append(F.transpose(y_c, axes=(1, 0, 2)) if cfg.layout else y_c)
        return [v if name else None for v, name in zip(results, outputs, strict=False)]

    return Translated(run, inputs)


#: The translation of every operator type of this family.
OPS: dict[str, Translation] = {"LSTM": _recurrent, "GRU": _recurrent}
