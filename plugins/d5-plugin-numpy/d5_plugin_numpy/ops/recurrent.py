"""Recurrent layers: ONNX LSTM and GRU (opset 14), forward and exact backward in time.

Both operators take ``X`` (``(T, N, I)``, or ``(N, T, I)`` with ``layout=1``), the input
weights ``W`` (``(D, G*H, I)``), the recurrent weights ``R`` (``(D, G*H, H)``) and the
optional biases ``B`` (``(D, 2*G*H)``: the input biases then the recurrent ones),
``sequence_lens`` (``(N,)`` integers) and ``initial_h`` (``(D, N, H)``, or ``(N, D, H)``
with ``layout=1``); LSTM also ``initial_c`` (as ``initial_h``) and the peepholes ``P``
(``(D, 3*H)``, in the order input, output, forget). ``D`` is 2 for
``direction="bidirectional"``, else 1; ``G`` is 4 for LSTM (gates in the order input,
output, forget, cell) and 3 for GRU (update, reset, hidden). Absent optional inputs are
zeros; an absent input in the middle of the list may be given as ``None``.

The outputs are ``Y`` (``(T, D, N, H)``, or ``(N, T, D, H)`` with ``layout=1``), the last
hidden state ``Y_h`` (shaped as ``initial_h``) and, for LSTM, the last cell state ``Y_c``.
Batch entry ``b`` runs ``sequence_lens[b]`` steps (all ``T`` when absent): the forward
direction over time steps ``0 .. len-1``, the reverse one over ``len-1 .. 0``. Past its
length an entry's ``Y`` is 0 and its states stay as they were, so ``Y_h`` is the state
after its last step (``initial_h`` for a length of 0).

``activations`` (``f, g, h`` per direction for LSTM, ``f, g`` for GRU; defaults
Sigmoid, Tanh, Tanh) may name any activation ONNX lists for recurrent layers: Sigmoid,
Tanh, Relu, HardSigmoid, LeakyRelu, ThresholdedRelu, ScaledTanh, Affine, Elu, Softsign,
Softplus. ``activation_alpha`` and ``activation_beta`` are consumed in order by the
activations that take the value; an activation past the end of the list takes the
default of the ONNX operator of its name (HardSigmoid 0.2 and 0.5, LeakyRelu 0.01,
ThresholdedRelu 1, Elu 1, Affine 1 and 0, ScaledTanh 1 and 1; onnxruntime takes 0 for
the last three). ``clip`` bounds every activation's input to ``[-clip, clip]``; the gradient is
passed where the input is within the bounds (inclusive), as ``clamp`` does.

Backward is back-propagation through time: the exact vector-Jacobian product for ``X``,
``W``, ``R``, ``B``, ``initial_h``, ``initial_c`` and ``P``; ``sequence_lens`` gets
``None``. The gradients of ``Y``, ``Y_h`` and ``Y_c`` are all taken into account.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from d5_plugin_numpy.ops.base import FLOAT_DTYPES, ReferenceOperator
from d5core.api import TensorDescriptor, UsageError
from d5core.onnx import (
    RECURRENT_GATES,
    RecurrentActivationSpec,
    onnx_signature,
    recurrent_attributes,
)

__all__ = ["GRU", "LSTM", "RecurrentActivation"]


def _sigmoid(z: np.ndarray) -> np.ndarray:
    # exp(-|z|) never overflows; both branches give 1 / (1 + exp(-z)).
    e = np.exp(-np.abs(z))
    return np.asarray(np.where(z >= 0, 1 / (1 + e), e / (1 + e)))


@dataclass(frozen=True)
class RecurrentActivation(RecurrentActivationSpec):
    """One activation of a recurrent layer (its ONNX name and parameters, as
    :func:`d5core.api.recurrent_attributes` reads them), computed with numpy."""

    def __call__(self, z: np.ndarray) -> np.ndarray:
        """The activation of ``z``."""
        a, b, name = self.alpha, self.beta, self.name
        if name == "Sigmoid":
            return _sigmoid(z)
        if name == "Tanh":
            return np.asarray(np.tanh(z))
        if name == "Relu":
            return np.asarray(np.maximum(z, 0))
        if name == "HardSigmoid":
            return np.clip(a * z + b, 0, 1)
        if name == "LeakyRelu":
            return np.where(z >= 0, z, a * z)
        if name == "ThresholdedRelu":
            return np.where(z > a, z, 0)
        if name == "ScaledTanh":
            return a * np.tanh(b * z)
        if name == "Affine":
            return a * z + b
        if name == "Elu":
            return np.where(z >= 0, z, a * np.expm1(np.minimum(z, 0)))
        if name == "Softsign":
            return np.asarray(z / (1 + np.abs(z)))
        return np.asarray(np.logaddexp(0, z))  # Softplus

    def derivative(self, z: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The derivative at ``z``, whose activation is ``y``."""
        a, b, name = self.alpha, self.beta, self.name
        if name == "Sigmoid":
            return np.asarray(y * (1 - y))
        if name == "Tanh":
            return np.asarray(1 - y * y)
        if name == "Relu":
            return (z > 0).astype(z.dtype)
        if name == "HardSigmoid":
            u = a * z + b
            return np.where((u > 0) & (u < 1), a, 0).astype(z.dtype)
        if name == "LeakyRelu":
            return np.where(z > 0, 1, a).astype(z.dtype)
        if name == "ThresholdedRelu":
            return (z > a).astype(z.dtype)
        if name == "ScaledTanh":
            t = np.tanh(b * z)
            return a * b * (1 - t * t)
        if name == "Affine":
            return np.full_like(z, a)
        if name == "Elu":
            return np.where(z > 0, 1, y + a).astype(z.dtype)
        if name == "Softsign":
            return np.asarray(1 / (1 + np.abs(z)) ** 2)
        return _sigmoid(z)  # Softplus


def _absent(value: Any) -> bool:
    """Whether an input is absent: ``None``, or ``None`` wrapped in an array (as code
    that converts every input with ``numpy.asarray`` leaves it)."""
    if value is None:
        return True
    return isinstance(value, np.ndarray) and value.dtype == object and value.ndim == 0


class _Clip:
    """The ``clip`` attribute: bounds on an activation's input, and where they pass the
    gradient."""

    def __init__(self, bound: float | None) -> None:
        self.bound = bound

    def __call__(self, z: np.ndarray) -> np.ndarray:
        return z if self.bound is None else np.clip(z, -self.bound, self.bound)

    def mask(self, z: np.ndarray, dz: np.ndarray) -> np.ndarray:
        if self.bound is None:
            return dz
        return np.where((z >= -self.bound) & (z <= self.bound), dz, 0)


class _Recurrent(ReferenceOperator):
    """What LSTM and GRU share: attributes, shape checks, layout and directions."""

    #: Gates per direction.
    gates: ClassVar[int]
    #: The input slots that hold states shaped like ``initial_h``.
    state_inputs: ClassVar[tuple[int, ...]]
    min_inputs = 3
    integer_inputs = frozenset({4})
    absent_inputs = True

    def configure(self, attributes: Mapping[str, Any]) -> None:
        cfg = recurrent_attributes(self.op_type, attributes, self.op_type)
        self.config = cfg
        self.direction, self.directions = cfg.direction, cfg.directions
        self.layout, self.hidden_size = cfg.layout, cfg.hidden_size
        self.clip = _Clip(cfg.clip)
        self.activations = [
            [RecurrentActivation(a.name, a.alpha, a.beta) for a in per] for per in cfg.activations
        ]
        self.input_forget, self.linear_before_reset = cfg.input_forget, cfg.linear_before_reset

    # -- checks ------------------------------------------------------------------

    def check_inputs(self, inputs: Sequence[TensorDescriptor | None]) -> None:
        """As the base class's, but an optional input may be ``None`` (absent)."""
        count = len(inputs)
        if not self.min_inputs <= count <= len(self.input_names):
            raise UsageError(
                f"{self.op_type}: takes {self.min_inputs} to {len(self.input_names)} inputs "
                f"({', '.join(self.input_names)}), not {count}"
            )
        dtype = None
        for i, desc in enumerate(inputs):
            name = self.input_names[i]
            if desc is None:
                if i < self.min_inputs:
                    raise UsageError(f"{self.op_type}: input {name} is required")
                continue
            dt = np.dtype(desc.dtype)
            if i in self.integer_inputs:
                if not np.issubdtype(dt, np.integer):
                    raise UsageError(
                        f"{self.op_type}: input {name} must hold integers, not {desc.dtype}"
                    )
                continue
            if dt.name not in FLOAT_DTYPES:
                raise UsageError(
                    f"{self.op_type}: input {name} has dtype {desc.dtype}; the numpy backend "
                    f"supports {', '.join(FLOAT_DTYPES)}"
                )
            if dtype is not None and dt.name != dtype:
                raise UsageError(
                    f"{self.op_type}: input {name} has dtype {desc.dtype} but X has {dtype}; "
                    f"give all floating inputs one dtype"
                )
            dtype = dt.name
        self.check_shapes_of([None if d is None else tuple(d.shape) for d in inputs])

    def check_shapes_of(self, shapes: Sequence[tuple[int, ...] | None]) -> None:
        """Check the shapes (``None`` for an absent input) against each other."""
        self.config.check_shapes(shapes, self.op_type)

    # -- shared pieces -----------------------------------------------------------

    def _prepare(
        self, inputs: Sequence[np.ndarray | None]
    ) -> tuple[np.ndarray, list[np.ndarray | None], np.ndarray]:
        """``X`` as ``(T, N, I)``, the other inputs (states as ``(D, N, H)``, absent
        ones ``None``), and the ``(T, N)`` mask of the steps each batch entry runs."""
        given = [None if _absent(v) else np.asarray(v) for v in inputs]
        given += [None] * (len(self.input_names) - len(given))
        x = given[0]
        assert x is not None
        if self.layout == 1:
            x = x.swapaxes(0, 1)
            for i in self.state_inputs:
                s = given[i]
                given[i] = None if s is None else s.swapaxes(0, 1)
        steps, batch = x.shape[0], x.shape[1]
        lens = given[4]
        if lens is None:
            valid = np.ones((steps, batch), dtype=bool)
        else:
            lengths = np.asarray(lens).astype(np.int64)
            if np.any(lengths < 0) or np.any(lengths > steps):
                raise UsageError(
                    f"{self.op_type}: sequence_lens must lie in [0, {steps}], "
                    f"not {lengths.tolist()}"
                )
            valid = np.arange(steps)[:, None] < lengths[None, :]
        return x, given, valid

    def _order(self, d: int, steps: int) -> range:
        reverse = self.direction == "reverse" or d == 1
        return range(steps - 1, -1, -1) if reverse else range(steps)

    def _layout_out(self, y: np.ndarray, states: list[np.ndarray]) -> list[np.ndarray]:
        if self.layout == 1:
            return [y.transpose(2, 0, 1, 3).copy(), *(s.swapaxes(0, 1).copy() for s in states)]
        return [y, *states]

    def _layout_grads(
        self, grad_outputs: Sequence[np.ndarray | None], shapes: Sequence[tuple[int, ...]], dt: Any
    ) -> list[np.ndarray]:
        """The output gradients (zeros where absent) in layout 0."""
        grads = []
        for k, shape in enumerate(shapes):
            g = grad_outputs[k] if k < len(grad_outputs) else None
            g = np.zeros(shape, dtype=dt) if g is None else np.asarray(g, dtype=dt)
            if self.layout == 1:
                g = g.transpose(1, 2, 0, 3) if k == 0 else g.swapaxes(0, 1)
            grads.append(g)
        return grads

    def _input_grads(
        self, inputs: Sequence[np.ndarray | None], grads: dict[int, np.ndarray]
    ) -> list[np.ndarray | None]:
        dt = np.asarray(inputs[0]).dtype
        out: list[np.ndarray | None] = []
        for i, value in enumerate(inputs):
            if _absent(value) or i == 4:
                out.append(None)
                continue
            g = grads[i]
            if self.layout == 1 and (i == 0 or i in self.state_inputs):
                g = g.swapaxes(0, 1)
            out.append(np.ascontiguousarray(g, dtype=dt))
        return out


class LSTM(_Recurrent):
    """ONNX LSTM (see the module docstring); outputs ``Y``, ``Y_h`` and ``Y_c``.

    Per step, with ``a = X_t W^T + H_{t-1} R^T + Wb + Rb`` split into ``i, o, f, c``:
    ``i = f(a_i + P_i C_{t-1})``, ``f = f(a_f + P_f C_{t-1})`` (or ``1 - i`` with
    ``input_forget=1``), ``C_t = f C_{t-1} + i g(a_c)``, ``o = f(a_o + P_o C_t)`` and
    ``H_t = o h(C_t)``.
    """

    op_type = "LSTM"
    input_names = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
    gates = RECURRENT_GATES["LSTM"]
    state_inputs = (5, 6)
    defaults = onnx_signature("LSTM").attribute_defaults

    def _run(
        self, inputs: Sequence[np.ndarray | None], keep: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[Any]]:
        x, given, valid = self._prepare(inputs)
        w, r = given[1], given[2]
        assert w is not None and r is not None
        steps, batch = x.shape[0], x.shape[1]
        hidden, dt = r.shape[2], x.dtype
        y = np.zeros((steps, self.directions, batch, hidden), dtype=dt)
        hs, cs, caches = [], [], []
        clip = self.clip
        for d in range(self.directions):
            fa, ga, ha = self.activations[d]
            b = given[3]
            bias = np.zeros(8 * hidden, dt) if b is None else b[d]
            xw = x @ w[d].T + (bias[: 4 * hidden] + bias[4 * hidden :])
            p = given[7]
            pi, po, pf = (np.zeros(hidden, dt),) * 3 if p is None else np.split(p[d], 3)
            h = np.zeros((batch, hidden), dt) if given[5] is None else given[5][d]
            c = np.zeros((batch, hidden), dt) if given[6] is None else given[6][d]
            steps_cache = []
            for t in self._order(d, steps):
                a = xw[t] + h @ r[d].T
                ai, ao, af, ac = np.split(a, 4, axis=1)
                zi = ai + pi * c
                gi = fa(clip(zi))
                if self.input_forget:
                    zf = None
                    gf = 1 - gi
                else:
                    zf = af + pf * c
                    gf = fa(clip(zf))
                gc = ga(clip(ac))
                c_new = gf * c + gi * gc
                zo = ao + po * c_new
                go = fa(clip(zo))
                hc = ha(c_new)
                h_new = go * hc
                m = valid[t][:, None]
                if keep:
                    steps_cache.append((t, h, c, zi, zf, ac, zo, gi, gf, gc, go, c_new, hc))
                y[t, d] = np.where(m, h_new, 0)
                h = np.where(m, h_new, h)
                c = np.where(m, c_new, c)
            hs.append(h)
            cs.append(c)
            caches.append((steps_cache, x, valid, (pi, po, pf)))
        return y, np.stack(hs).astype(dt), np.stack(cs).astype(dt), caches

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        y, yh, yc, _ = self._run(inputs, keep=False)
        return self._layout_out(y, [yh, yc])

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        y, yh, yc, caches = self._run(inputs, keep=True)
        dt = y.dtype
        dy, dyh, dyc = self._layout_grads(grad_outputs, [y.shape, yh.shape, yc.shape], dt)
        w, r = np.asarray(inputs[1]), np.asarray(inputs[2])
        hidden = r.shape[2]
        clip = self.clip
        x = caches[0][1]
        dx = np.zeros_like(x)
        dw, dr = np.zeros_like(w), np.zeros_like(r)
        db = np.zeros((self.directions, 8 * hidden), dt)
        dp = np.zeros((self.directions, 3 * hidden), dt)
        dh0 = np.zeros_like(dyh)
        dc0 = np.zeros_like(dyc)
        for d in range(self.directions):
            fa, ga, ha = self.activations[d]
            steps_cache, _, valid, (pi, po, pf) = caches[d]
            dh, dc = dyh[d].copy(), dyc[d].copy()
            da_all = np.zeros((x.shape[0], x.shape[1], 4 * hidden), dt)
            dpi, dpo, dpf = (np.zeros(hidden, dt) for _ in range(3))
            for t, h, c, zi, zf, ac, zo, gi, gf, gc, go, c_new, hc in reversed(steps_cache):
                m = valid[t][:, None]
                dht = (dh + dy[t, d]) * m
                dct = dc * m
                dgo = dht * hc
                dcn = dct + dht * go * ha.derivative(c_new, hc)
                dzo = clip.mask(zo, dgo * fa.derivative(clip(zo), go))
                dcn = dcn + dzo * po
                dpo += (dzo * c_new).sum(axis=0)
                dgf, dgi, dgc = dcn * c, dcn * gc, dcn * gi
                dc_prev = dcn * gf
                if zf is None:
                    dgi = dgi - dgf
                    dzf = np.zeros_like(dgf)
                else:
                    dzf = clip.mask(zf, dgf * fa.derivative(clip(zf), gf))
                    dc_prev = dc_prev + dzf * pf
                    dpf += (dzf * c).sum(axis=0)
                dzi = clip.mask(zi, dgi * fa.derivative(clip(zi), gi))
                dc_prev = dc_prev + dzi * pi
                dpi += (dzi * c).sum(axis=0)
                dzc = clip.mask(ac, dgc * ga.derivative(clip(ac), gc))
                da = np.concatenate([dzi, dzo, dzf, dzc], axis=1)
                da_all[t] = da
                dr[d] += da.T @ h
                dh = np.where(m, da @ r[d], dh)
                dc = np.where(m, dc_prev, dc)
            dx += da_all @ w[d]
            dw[d] = np.einsum("tng,tni->gi", da_all, x)
            db[d, : 4 * hidden] = db[d, 4 * hidden :] = da_all.sum(axis=(0, 1))
            dp[d] = np.concatenate([dpi, dpo, dpf])
            dh0[d], dc0[d] = dh, dc
        grads = {0: dx, 1: dw, 2: dr, 3: db, 5: dh0, 6: dc0, 7: dp}
        return self._input_grads(inputs, grads)


class GRU(_Recurrent):
    """ONNX GRU (see the module docstring); outputs ``Y`` and ``Y_h``.

    Per step: ``z = f(X_t W_z^T + H_{t-1} R_z^T + Wb_z + Rb_z)``, ``r`` likewise,
    ``h = g(X_t W_h^T + (r H_{t-1}) R_h^T + Rb_h + Wb_h)`` (with
    ``linear_before_reset=1``: ``g(X_t W_h^T + r (H_{t-1} R_h^T + Rb_h) + Wb_h)``) and
    ``H_t = (1 - z) h + z H_{t-1}``.
    """

    op_type = "GRU"
    input_names = ("X", "W", "R", "B", "sequence_lens", "initial_h")
    gates = RECURRENT_GATES["GRU"]
    state_inputs = (5,)
    defaults = onnx_signature("GRU").attribute_defaults

    def _run(
        self, inputs: Sequence[np.ndarray | None], keep: bool
    ) -> tuple[np.ndarray, np.ndarray, list[Any]]:
        x, given, valid = self._prepare(inputs)
        w, r = given[1], given[2]
        assert w is not None and r is not None
        steps, batch = x.shape[0], x.shape[1]
        hidden, dt = r.shape[2], x.dtype
        y = np.zeros((steps, self.directions, batch, hidden), dtype=dt)
        hs, caches = [], []
        clip, lbr = self.clip, self.linear_before_reset
        for d in range(self.directions):
            fa, ga = self.activations[d]
            b = given[3]
            bias = np.zeros(6 * hidden, dt) if b is None else b[d]
            xw = x @ w[d].T + bias[: 3 * hidden]
            rb = bias[3 * hidden :]
            r_zr, r_h = r[d][: 2 * hidden], r[d][2 * hidden :]
            h = np.zeros((batch, hidden), dt) if given[5] is None else given[5][d]
            steps_cache = []
            for t in self._order(d, steps):
                azr = xw[t][:, : 2 * hidden] + h @ r_zr.T + rb[: 2 * hidden]
                az, ar = azr[:, :hidden], azr[:, hidden:]
                gz, gr = fa(clip(az)), fa(clip(ar))
                if lbr:
                    u = h @ r_h.T + rb[2 * hidden :]
                    ah = xw[t][:, 2 * hidden :] + gr * u
                else:
                    u = gr * h
                    ah = xw[t][:, 2 * hidden :] + u @ r_h.T + rb[2 * hidden :]
                gh = ga(clip(ah))
                h_new = (1 - gz) * gh + gz * h
                m = valid[t][:, None]
                if keep:
                    steps_cache.append((t, h, az, ar, ah, gz, gr, gh, u))
                y[t, d] = np.where(m, h_new, 0)
                h = np.where(m, h_new, h)
            hs.append(h)
            caches.append((steps_cache, x, valid))
        return y, np.stack(hs).astype(dt), caches

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        y, yh, _ = self._run(inputs, keep=False)
        return self._layout_out(y, [yh])

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        y, yh, caches = self._run(inputs, keep=True)
        dt = y.dtype
        dy, dyh = self._layout_grads(grad_outputs, [y.shape, yh.shape], dt)
        w, r = np.asarray(inputs[1]), np.asarray(inputs[2])
        hidden = r.shape[2]
        clip, lbr = self.clip, self.linear_before_reset
        x = caches[0][1]
        dx = np.zeros_like(x)
        dw, dr = np.zeros_like(w), np.zeros_like(r)
        db = np.zeros((self.directions, 6 * hidden), dt)
        dh0 = np.zeros_like(dyh)
        for d in range(self.directions):
            fa, ga = self.activations[d]
            steps_cache, _, valid = caches[d]
            r_zr, r_h = r[d][: 2 * hidden], r[d][2 * hidden :]
            dh = dyh[d].copy()
            da_all = np.zeros((x.shape[0], x.shape[1], 3 * hidden), dt)
            drb = np.zeros(3 * hidden, dt)
            for t, h, az, ar, ah, gz, gr, gh, u in reversed(steps_cache):
                m = valid[t][:, None]
                dht = (dh + dy[t, d]) * m
                dgz = dht * (h - gh)
                dgh = dht * (1 - gz)
                dh_prev = dht * gz
                dah = clip.mask(ah, dgh * ga.derivative(clip(ah), gh))
                if lbr:
                    dgr = dah * u
                    du = dah * gr
                    dr[d][2 * hidden :] += du.T @ h
                    drb[2 * hidden :] += du.sum(axis=0)
                    dh_prev = dh_prev + du @ r_h
                else:
                    du = dah @ r_h
                    dr[d][2 * hidden :] += dah.T @ u
                    drb[2 * hidden :] += dah.sum(axis=0)
                    dgr = du * h
                    dh_prev = dh_prev + du * gr
                daz = clip.mask(az, dgz * fa.derivative(clip(az), gz))
                dar = clip.mask(ar, dgr * fa.derivative(clip(ar), gr))
                dazr = np.concatenate([daz, dar], axis=1)
                dr[d][: 2 * hidden] += dazr.T @ h
                drb[: 2 * hidden] += dazr.sum(axis=0)
                dh_prev = dh_prev + dazr @ r_zr
                da_all[t] = np.concatenate([dazr, dah], axis=1)
                dh = np.where(m, dh_prev, dh)
            dx += da_all @ w[d]
            dw[d] = np.einsum("tng,tni->gi", da_all, x)
            db[d, : 3 * hidden] = da_all.sum(axis=(0, 1))
            db[d, 3 * hidden :] = drb
            dh0[d] = dh
        grads = {0: dx, 1: dw, 2: dr, 3: db, 5: dh0}
        return self._input_grads(inputs, grads)
