"""Recurrent layers: ONNX ``LSTM`` and ``GRU`` (opset 14) in torch, and plain functions
that compute them on torch tensors.

The functions, for the graph executor and anyone holding torch tensors::

    lstm(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None, *,
         direction="forward", layout=0, hidden_size=None, activations=None,
         activation_alpha=None, activation_beta=None, clip=None, input_forget=0)
        -> (Y, Y_h, Y_c)
    gru(X, W, R, B=None, sequence_lens=None, initial_h=None, *,
        direction="forward", layout=0, hidden_size=None, activations=None,
        activation_alpha=None, activation_beta=None, clip=None, linear_before_reset=0)
        -> (Y, Y_h)

The positional arguments are the ONNX inputs in ONNX order, torch tensors (``None``
where absent; ``sequence_lens`` any integer tensor); the keyword arguments are the ONNX
attributes with the ONNX defaults (strings may be ``bytes``, as onnx stores them). The
floating tensors share one dtype and device. Shapes (``D`` directions, ``G`` gates: 4
for LSTM in the order input, output, forget, cell; 3 for GRU: update, reset, hidden):
``X`` ``(T, N, I)`` (``(N, T, I)`` with ``layout=1``), ``W`` ``(D, G*H, I)``, ``R``
``(D, G*H, H)``, ``B`` ``(D, 2*G*H)``, ``initial_h`` and ``initial_c`` ``(D, N, H)``
(``(N, D, H)`` with ``layout=1``), ``P`` ``(D, 3*H)``. ``Y`` is ``(T, D, N, H)``
(``(N, T, D, H)`` with ``layout=1``); ``Y_h`` and ``Y_c`` are shaped as ``initial_h``.
Bad shapes or attributes raise a one-line :class:`~d5core.api.UsageError` that starts
with the operator type.

Semantics are those of d5's numpy reference (``d5_plugin_numpy.ops.recurrent``): batch
entry ``b`` runs ``sequence_lens[b]`` steps (the reverse direction from step
``len - 1`` down to 0), its ``Y`` is 0 past its length and its states stay as they were;
the activations are any of Sigmoid, Tanh, Relu, HardSigmoid, LeakyRelu,
ThresholdedRelu, ScaledTanh, Affine, Elu, Softsign and Softplus, ``activation_alpha``
and ``activation_beta`` consumed in order by the activations that take them; ``clip``
clamps every activation's input.

The recurrence is written with torch tensor operations, so autograd gives the backward.
When nothing asks for more than torch's own cells compute (default activations, no
``clip``, no ``sequence_lens``, no peepholes, no ``input_forget``; for GRU
``linear_before_reset=1``, the only form torch has), the fused ``torch._VF.lstm`` /
``torch._VF.gru`` kernels run instead, with the gates reordered from ONNX's (``iofc``,
``zrh``) to torch's (``ifgo``, ``rzn``); the tests check that both paths agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5core.api import UsageError
from d5core.onnx import (
    RECURRENT_GATES,
    RecurrentActivationSpec,
    RecurrentAttributes,
    RecurrentRules,
    onnx_signature,
    recurrent_attributes,
)

__all__ = ["GRU", "LSTM", "gru", "lstm"]


@dataclass(frozen=True)
class _Activation(RecurrentActivationSpec):
    """An activation as :func:`d5core.api.recurrent_attributes` reads it, in torch."""

    def __call__(self, z: Tensor) -> Tensor:
        a, b, name = self.alpha, self.beta, self.name
        if name == "Sigmoid":
            return torch.sigmoid(z)
        if name == "Tanh":
            return torch.tanh(z)
        if name == "Relu":
            return torch.relu(z)
        if name == "HardSigmoid":
            return torch.clamp(z * a + b, 0.0, 1.0)
        if name == "LeakyRelu":
            return torch.where(z > 0, z, z * a)
        if name == "ThresholdedRelu":
            return torch.where(z > a, z, torch.zeros_like(z))
        if name == "ScaledTanh":
            return torch.tanh(z * b) * a
        if name == "Affine":
            return z * a + b
        if name == "Elu":
            return F.elu(z, alpha=a)
        if name == "Softsign":
            return F.softsign(z)
        return F.softplus(z)


@dataclass(frozen=True)
class _Config(RecurrentAttributes):
    """The attributes of one LSTM or GRU, read and checked, with the activations as
    torch functions."""

    functions: tuple[tuple[_Activation, ...], ...] = ()

    @property
    def flag(self) -> bool:
        """LSTM: input_forget; GRU: linear_before_reset."""
        return self.input_forget if self.op_type == "LSTM" else self.linear_before_reset


def _config(op_type: str, attributes: Mapping[str, Any]) -> _Config:
    """Read the attributes of ``op_type`` (missing ones take the ONNX defaults)."""
    defaults = onnx_signature(op_type).attribute_defaults
    unknown = sorted(set(attributes) - set(defaults))
    if unknown:
        raise UsageError(
            f"{op_type}: unknown attribute {unknown[0]!r}; it takes: {', '.join(sorted(defaults))}"
        )
    cfg = recurrent_attributes(op_type, attributes, op_type)
    functions = tuple(
        tuple(_Activation(a.name, a.alpha, a.beta) for a in per) for per in cfg.activations
    )
    return _Config(**vars(cfg), functions=functions)


_NAMES = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")


def _shapes(tensors: Sequence[Tensor | None]) -> list[tuple[int, ...] | None]:
    return [None if t is None else tuple(t.shape) for t in tensors]


# -- the recurrences ------------------------------------------------------------------


def _clamp(cfg: _Config) -> Any:
    bound = cfg.clip
    if bound is None:
        return lambda z: z
    return lambda z: torch.clamp(z, -bound, bound)


def _valid(lens: Tensor | None, steps: int, device: torch.device) -> Tensor | None:
    """The ``(T, N, 1)`` mask of the steps each batch entry runs (``None``: all)."""
    if lens is None:
        return None
    positions = torch.arange(steps, device=device).unsqueeze(1)
    return (positions < lens.unsqueeze(0)).unsqueeze(2)


def _order(cfg: _Config, d: int, steps: int) -> range:
    reverse = cfg.direction == "reverse" or d == 1
    return range(steps - 1, -1, -1) if reverse else range(steps)


def _to_layout0(cfg: _Config, x: Tensor, states: list[Tensor | None]) -> tuple[Tensor, list[Any]]:
    if cfg.layout == 0:
        return x, states
    return x.transpose(0, 1), [None if s is None else s.transpose(0, 1) for s in states]


def _from_layout0(cfg: _Config, y: Tensor, states: list[Tensor]) -> tuple[Tensor, ...]:
    if cfg.layout == 0:
        return (y, *states)
    return (y.permute(2, 0, 1, 3), *(s.transpose(0, 1) for s in states))


def _lstm_general(
    cfg: _Config,
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None,
    valid: Tensor | None,
    h0: Tensor | None,
    c0: Tensor | None,
    p: Tensor | None,
) -> tuple[Tensor, Tensor, Tensor]:
    steps, batch = x.shape[0], x.shape[1]
    hidden = r.shape[2]
    clamp = _clamp(cfg)
    ys, hs, cs = [], [], []
    for d in range(cfg.directions):
        fa, ga, ha = cfg.functions[d]
        xw = torch.matmul(x, w[d].t())
        if b is not None:
            xw = xw + (b[d, : 4 * hidden] + b[d, 4 * hidden :])
        rt = r[d].t()
        h = x.new_zeros(batch, hidden) if h0 is None else h0[d]
        c = x.new_zeros(batch, hidden) if c0 is None else c0[d]
        pi = po = pf = None
        if p is not None:
            pi, po, pf = p[d].chunk(3)
        out: list[Tensor] = [x] * steps
        for t in _order(cfg, d, steps):
            a = torch.addmm(xw[t], h, rt)
            ai, ao, af, ac = a.chunk(4, 1)
            gi = fa(clamp(ai if pi is None else ai + pi * c))
            # input_forget couples the forget gate to the input gate
            gf = 1 - gi if cfg.flag else fa(clamp(af if pf is None else af + pf * c))
            c_new = gf * c + gi * ga(clamp(ac))
            go = fa(clamp(ao if po is None else ao + po * c_new))
            h_new = go * ha(c_new)
            if valid is None:
                out[t], h, c = h_new, h_new, c_new
            else:
                m = valid[t]
                out[t] = h_new.masked_fill(~m, 0.0)
                h = torch.where(m, h_new, h)
                c = torch.where(m, c_new, c)
        ys.append(torch.stack(out))
        hs.append(h)
        cs.append(c)
    return torch.stack(ys, 1), torch.stack(hs), torch.stack(cs)


def _gru_general(
    cfg: _Config,
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None,
    valid: Tensor | None,
    h0: Tensor | None,
) -> tuple[Tensor, Tensor]:
    steps, batch = x.shape[0], x.shape[1]
    hidden = r.shape[2]
    clamp = _clamp(cfg)
    ys, hs = [], []
    for d in range(cfg.directions):
        fa, ga = cfg.functions[d]
        xw = torch.matmul(x, w[d].t())
        if b is not None:
            xw = xw + b[d, : 3 * hidden]
        r_zr, r_h = r[d, : 2 * hidden].t(), r[d, 2 * hidden :].t()
        rb_zr = None if b is None else b[d, 3 * hidden : 5 * hidden]
        rb_h = None if b is None else b[d, 5 * hidden :]
        h = x.new_zeros(batch, hidden) if h0 is None else h0[d]
        out: list[Tensor] = [x] * steps
        for t in _order(cfg, d, steps):
            xt = xw[t]
            azr = torch.addmm(xt[:, : 2 * hidden], h, r_zr)
            if rb_zr is not None:
                azr = azr + rb_zr
            az, ar = azr.chunk(2, 1)
            gz, gr = fa(clamp(az)), fa(clamp(ar))
            if cfg.flag:
                u = torch.matmul(h, r_h) if rb_h is None else torch.addmm(rb_h, h, r_h)
                ah = xt[:, 2 * hidden :] + gr * u
            else:
                ah = torch.addmm(xt[:, 2 * hidden :], gr * h, r_h)
                if rb_h is not None:
                    ah = ah + rb_h
            gh = ga(clamp(ah))
            h_new = gh + gz * (h - gh)
            if valid is None:
                out[t], h = h_new, h_new
            else:
                m = valid[t]
                out[t] = h_new.masked_fill(~m, 0.0)
                h = torch.where(m, h_new, h)
        ys.append(torch.stack(out))
        hs.append(h)
    return torch.stack(ys, 1), torch.stack(hs)


def _fused_params(
    w: Tensor, r: Tensor, b: Tensor | None, d: int, order: list[int], gates: int
) -> list[Tensor]:
    """Direction ``d``'s weights and biases in torch's gate order."""
    hidden = r.shape[2]

    def reorder(t: Tensor) -> Tensor:
        chunks = t.chunk(gates, 0)
        return torch.cat([chunks[i] for i in order])

    params = [reorder(w[d]), reorder(r[d])]
    if b is not None:
        params += [reorder(b[d, : gates * hidden]), reorder(b[d, gates * hidden :])]
    else:
        params += [w.new_zeros(gates * hidden)] * 2
    return params


def _fused(
    cfg: _Config,
    x: Tensor,
    w: Tensor,
    r: Tensor,
    b: Tensor | None,
    h0: Tensor | None,
    c0: Tensor | None,
) -> tuple[Tensor, ...]:
    """torch's fused LSTM or GRU (``linear_before_reset=1``), ONNX's gates reordered."""
    is_lstm = cfg.op_type == "LSTM"
    gates = RECURRENT_GATES[cfg.op_type]
    order = [0, 2, 3, 1] if is_lstm else [1, 0, 2]
    steps, batch = x.shape[0], x.shape[1]
    hidden = r.shape[2]
    d = cfg.directions
    params: list[Tensor] = []
    for k in range(d):
        params += _fused_params(w, r, b, k, order, gates)
    reverse = cfg.direction == "reverse"
    if reverse:
        x = x.flip(0)
    h = x.new_zeros(d, batch, hidden) if h0 is None else h0.contiguous()
    # cuDNN differentiates only what ran in training mode (the same with dropout 0), and
    # training mode costs a workspace: only when a gradient will be taken
    leaves = (x, w, r, b, h0, c0)
    train = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in leaves)
    bidirectional = d == 2
    if is_lstm:
        c = x.new_zeros(d, batch, hidden) if c0 is None else c0.contiguous()
        y, yh, yc = torch._VF.lstm(x, (h, c), params, True, 1, 0.0, train, bidirectional, False)
        states = [yh, yc]
    else:
        y, yh = torch._VF.gru(x, h, params, True, 1, 0.0, train, bidirectional, False)
        states = [yh]
    if reverse:
        y = y.flip(0)
    y = y.reshape(steps, batch, d, hidden).transpose(1, 2)
    return (y, *states)


def _can_fuse(cfg: _Config, lens: Tensor | None, p: Tensor | None) -> bool:
    if lens is not None or p is not None or cfg.clip is not None:
        return False
    if not cfg.default_activations:
        return False
    # input_forget (LSTM) must be off; linear_before_reset (GRU) on: torch's only form.
    return cfg.flag == (cfg.op_type == "GRU")


def _run(
    cfg: _Config,
    tensors: Sequence[Tensor | None],
    *,
    check: bool,
    fused: bool,
) -> tuple[Tensor, ...]:
    given = list(tensors) + [None] * (8 - len(tensors))
    x, w, r, b, lens, h0, c0, p = given
    if x is None or w is None or r is None:
        missing = [n for n, t in zip(_NAMES, (x, w, r), strict=False) if t is None]
        raise UsageError(f"{cfg.op_type}: input {missing[0]} is required")
    if check:
        cfg.check_shapes(_shapes(given), cfg.op_type)
    x, (h0, c0) = _to_layout0(cfg, x, [h0, c0])
    if fused and _can_fuse(cfg, lens, p):
        outs = _fused(cfg, x, w, r, b, h0, c0)
        return _from_layout0(cfg, outs[0], list(outs[1:]))
    valid = _valid(lens, x.shape[0], x.device)
    if cfg.op_type == "LSTM":
        y, yh, yc = _lstm_general(cfg, x, w, r, b, valid, h0, c0, p)
        return _from_layout0(cfg, y, [yh, yc])
    y, yh = _gru_general(cfg, x, w, r, b, valid, h0)
    return _from_layout0(cfg, y, [yh])


def lstm(
    X: Tensor,
    W: Tensor,
    R: Tensor,
    B: Tensor | None = None,
    sequence_lens: Tensor | None = None,
    initial_h: Tensor | None = None,
    initial_c: Tensor | None = None,
    P: Tensor | None = None,
    *,
    fused: bool = True,
    **attributes: Any,
) -> tuple[Tensor, Tensor, Tensor]:
    """ONNX LSTM on torch tensors: ``(Y, Y_h, Y_c)`` (see the module docstring).
    ``attributes`` are the ONNX attributes; ``fused=False`` always runs the recurrence
    written out step by step."""
    cfg = _config("LSTM", attributes)
    y, yh, yc = _run(
        cfg, (X, W, R, B, sequence_lens, initial_h, initial_c, P), check=True, fused=fused
    )
    return y, yh, yc


def gru(
    X: Tensor,
    W: Tensor,
    R: Tensor,
    B: Tensor | None = None,
    sequence_lens: Tensor | None = None,
    initial_h: Tensor | None = None,
    *,
    fused: bool = True,
    **attributes: Any,
) -> tuple[Tensor, Tensor]:
    """ONNX GRU on torch tensors: ``(Y, Y_h)`` (see the module docstring).
    ``attributes`` are the ONNX attributes; ``fused=False`` always runs the recurrence
    written out step by step."""
    cfg = _config("GRU", attributes)
    y, yh = _run(cfg, (X, W, R, B, sequence_lens, initial_h), check=True, fused=fused)
    return y, yh


# -- the level-0 operators --------------------------------------------------------------


class _Recurrent(RecurrentRules, TorchOperator):
    config: _Config

    def configure(self) -> None:
        self.config = _config(self.op_type, self.attributes)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        cfg = self.config

        def kernel(*tensors: Tensor | None) -> tuple[Tensor, ...]:
            return _run(cfg, tensors, check=False, fused=True)

        return kernel


class LSTM(_Recurrent):
    """ONNX ``LSTM``: outputs ``Y``, ``Y_h`` and ``Y_c`` (see the module docstring)."""

    op_type = "LSTM"
    slots, attribute_defaults = onnx_signature("LSTM")


class GRU(_Recurrent):
    """ONNX ``GRU``: outputs ``Y`` and ``Y_h`` (see the module docstring)."""

    op_type = "GRU"
    slots, attribute_defaults = onnx_signature("GRU")
