"""ONNX's recurrent layers, LSTM and GRU, unrolled over the (static) sequence length.

Each direction projects the whole input sequence with one matrix product (input weights
and biases), then runs one step per time position: the recurrent projection, the gates
(LSTM: ``i, o, f, c`` in ONNX's order, with optional peepholes; GRU: ``z, r, h``, with
``linear_before_reset``) and the new state. ``reverse`` and ``bidirectional`` run a
direction over the sequence reversed, within each sequence's own length when
``sequence_lens`` is given (``tf.reverse_sequence``); positions past a sequence's length
keep its state and output zeros. ``layout=1`` (batch first) is transposed on entry and
exit. Activations may be any ONNX lists for recurrent layers, with their
``activation_alpha`` and ``activation_beta``; ``clip`` bounds the gate inputs;
``input_forget`` makes the forget gate ``1 - i``; without ``hidden_size`` the size is
read from ``R``. The gradient is ``tf.GradientTape``'s through the unrolled steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import onnx

from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.graph.translation import NodeBuilder, NodeFn
from d5core.api import UsageError
from d5core.onnx import RECURRENT_GATES, recurrent_attributes

__all__ = ["RecurrentNodes"]

tf = tensorflow()


def _activation(name: str, a: float, b: float) -> Callable[[Any], Any]:
    """The function of an activation named as ONNX's recurrent layers name them."""
    functions: dict[str, Callable[[Any], Any]] = {
        "Sigmoid": tf.sigmoid,
        "Tanh": tf.tanh,
        "Relu": tf.nn.relu,
        "HardSigmoid": lambda x: tf.clip_by_value(a * x + b, 0.0, 1.0),
        "LeakyRelu": lambda x: tf.where(x >= 0, x, a * x),
        "ThresholdedRelu": lambda x: tf.where(x > a, x, tf.zeros_like(x)),
        "ScaledTanh": lambda x: a * tf.tanh(b * x),
        "Affine": lambda x: a * x + b,
        "Elu": lambda x: tf.where(x >= 0, x, a * tf.math.expm1(tf.minimum(x, 0.0))),
        "Softsign": tf.math.softsign,
        "Softplus": tf.math.softplus,
    }
    return functions[name]


class RecurrentNodes(NodeBuilder):
    """Translations of LSTM and GRU."""

    def _recurrent(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        lstm = node.op_type == "LSTM"
        gates = RECURRENT_GATES[node.op_type]
        cfg = recurrent_attributes(node.op_type, a)
        acts = [[_activation(s.name, s.alpha, s.beta) for s in per] for per in cfg.activations]
        dirs, clip = cfg.directions, cfg.clip
        count = 8 if lstm else 6

        def clipped(v: Any) -> Any:
            return tf.clip_by_value(v, -clip, clip) if clip is not None else v

        def run(*xs: Any) -> tuple[Any, ...]:
            x, w, r, b, lens, h0, c0, p = (list(xs) + [None] * 8)[:8]
            hidden = int(r.shape[-1])
            if cfg.hidden_size is not None and cfg.hidden_size != hidden:
                raise UsageError(
                    f"node {node.name!r} ({node.op_type}): hidden_size is {cfg.hidden_size} "
                    f"but R has shape {tuple(r.shape)}"
                )
            if cfg.layout:  # batch first: to (steps, batch, ...) and (dirs, batch, ...)
                x = tf.transpose(x, (1, 0, 2))
                h0 = None if h0 is None else tf.transpose(h0, (1, 0, 2))
                c0 = None if c0 is None else tf.transpose(c0, (1, 0, 2))
            steps = x.shape[0]
            if steps is None:
                raise UsageError(f"node {node.name!r} ({node.op_type}): unknown sequence length")
            batch = tf.shape(x)[1]
            mask = None
            if lens is not None:
                lens = tf.cast(lens, tf.int32)
                mask = tf.cast(tf.sequence_mask(lens, steps), x.dtype)  # (batch, steps)
            ys, last_h, last_c = [], [], []
            for d in range(dirs):
                f, g = acts[d][0], acts[d][1]
                backward = cfg.direction == "reverse" or d == 1
                seq = x
                if backward:
                    seq = (
                        tf.reverse_sequence(x, lens, seq_axis=0, batch_axis=1)
                        if lens is not None
                        else tf.reverse(x, [0])
                    )
                wb: Any = None
                rb: Any = None
                if b is not None:
                    wb, rb = b[d, : gates * hidden], b[d, gates * hidden :]
                proj = tf.tensordot(seq, w[d], [[2], [1]])  # (steps, batch, gates*hidden)
                if wb is not None:
                    if lstm:
                        proj = proj + wb + rb
                    else:
                        proj = proj + tf.concat(
                            [wb[: 2 * hidden] + rb[: 2 * hidden], wb[2 * hidden :]], 0
                        )
                zeros = tf.zeros(tf.stack([batch, hidden]), x.dtype)
                h = h0[d] if h0 is not None else zeros
                c = (c0[d] if c0 is not None else zeros) if lstm else None
                rd = tf.transpose(r[d])
                outs = []
                for t in range(steps):
                    xt = proj[t]
                    if lstm:
                        pre = xt + tf.matmul(h, rd)
                        pi, po, pf, pc = (pre[:, k * hidden : (k + 1) * hidden] for k in range(4))
                        if p is not None:
                            pi = pi + p[d, :hidden] * c
                            pf = pf + p[d, 2 * hidden :] * c
                        i_t, c_t = f(clipped(pi)), g(clipped(pc))
                        f_t = 1 - i_t if cfg.input_forget else f(clipped(pf))
                        c_new = f_t * c + i_t * c_t
                        if p is not None:
                            po = po + p[d, hidden : 2 * hidden] * c_new
                        h_new = f(clipped(po)) * acts[d][2](c_new)
                    else:
                        zr = tf.matmul(h, rd[:, : 2 * hidden])
                        z_t = f(clipped(xt[:, :hidden] + zr[:, :hidden]))
                        r_t = f(clipped(xt[:, hidden : 2 * hidden] + zr[:, hidden:]))
                        rh = rd[:, 2 * hidden :]
                        if cfg.linear_before_reset:
                            hr = tf.matmul(h, rh)
                            if rb is not None:
                                hr = hr + rb[2 * hidden :]
                            h_pre = xt[:, 2 * hidden :] + r_t * hr
                        else:
                            hr = tf.matmul(r_t * h, rh)
                            if rb is not None:
                                hr = hr + rb[2 * hidden :]
                            h_pre = xt[:, 2 * hidden :] + hr
                        h_new = (1 - z_t) * g(clipped(h_pre)) + z_t * h
                        c_new = None
                    if mask is not None:
                        m = mask[:, t : t + 1]
                        h_new = m * h_new + (1 - m) * h
                        if lstm:
                            c_new = m * c_new + (1 - m) * c
                        outs.append(m * h_new)
                    else:
                        outs.append(h_new)
                    h, c = h_new, c_new
                y = tf.stack(outs, 0)
                if backward:
                    y = (
                        tf.reverse_sequence(y, lens, seq_axis=0, batch_axis=1)
                        if lens is not None
                        else tf.reverse(y, [0])
                    )
                ys.append(y)
                last_h.append(h)
                last_c.append(c)
            y_all = tf.stack(ys, 1)  # (steps, dirs, batch, hidden)
            y_h = tf.stack(last_h, 0)
            if cfg.layout:
                y_all = tf.transpose(y_all, (2, 0, 1, 3))
                y_h = tf.transpose(y_h, (1, 0, 2))
            results: list[Any] = [y_all, y_h]
            if lstm:
                y_c = tf.stack(last_c, 0)
                results.append(tf.transpose(y_c, (1, 0, 2)) if cfg.layout else y_c)
            return tuple(results[: len(node.output)])

        return self._node(node, run, node.input[:count])

    def op_LSTM(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._recurrent(node, a)

    def op_GRU(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._recurrent(node, a)
