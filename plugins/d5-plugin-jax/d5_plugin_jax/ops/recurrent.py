"""Recurrent layers: ONNX ``LSTM`` and ``GRU`` (opset 14), each direction one
``lax.scan`` over the time steps.

Shapes (``D`` directions, ``G`` gates: 4 for LSTM in the order input, output, forget,
cell; 3 for GRU: update, reset, hidden): ``X`` ``(T, N, I)`` (``(N, T, I)`` with
``layout=1``), ``W`` ``(D, G*H, I)``, ``R`` ``(D, G*H, H)``, ``B`` ``(D, 2*G*H)``,
``initial_h`` and ``initial_c`` ``(D, N, H)`` (``(N, D, H)`` with ``layout=1``), ``P``
``(D, 3*H)``. ``Y`` is ``(T, D, N, H)`` (``(N, T, D, H)`` with ``layout=1``); ``Y_h``
and ``Y_c`` are shaped as ``initial_h``.

Semantics are those of d5's numpy reference: batch entry ``b`` runs
``sequence_lens[b]`` steps (the reverse direction from step ``len - 1`` down to 0), its
``Y`` is 0 past its length and its states stay as they were; the activations are any of
ONNX's list (read by :func:`d5core.onnx.recurrent_attributes`), ``clip`` clamps every
activation's input. The input projection of all steps is one product before the scan;
``jax.vjp`` differentiates through the scan.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from d5_plugin_jax.ops._base import JaxOperator, Kernel, Signature, jax, jnp
from d5core.onnx import (
    RecurrentActivationSpec,
    RecurrentRules,
    onnx_signature,
    recurrent_attributes,
)

__all__ = ["GRU", "LSTM", "activation"]

lax = jax.lax


def activation(spec: RecurrentActivationSpec) -> Callable[[Any], Any]:
    """The JAX function of one recurrent activation."""
    a, b, name = spec.alpha, spec.beta, spec.name
    table: dict[str, Callable[[Any], Any]] = {
        "Sigmoid": jax.nn.sigmoid,
        "Tanh": jnp.tanh,
        "Relu": jax.nn.relu,
        "HardSigmoid": lambda z: jnp.clip(z * a + b, 0.0, 1.0),
        "LeakyRelu": lambda z: jnp.where(z > 0, z, z * a),
        "ThresholdedRelu": lambda z: jnp.where(z > a, z, jnp.zeros_like(z)),
        "ScaledTanh": lambda z: jnp.tanh(z * b) * a,
        "Affine": lambda z: z * a + b,
        "Elu": lambda z: jax.nn.elu(z, alpha=a),
        "Softsign": jax.nn.soft_sign,
        "Softplus": jax.nn.softplus,
    }
    return table[name]


class _Recurrent(RecurrentRules, JaxOperator):
    def configure(self) -> None:
        self.config = recurrent_attributes(self.op_type, self.attributes, self.op_type)
        self.functions = tuple(tuple(activation(s) for s in per) for per in self.config.activations)

    def _clamp(self) -> Callable[[Any], Any]:
        bound = self.config.clip
        if bound is None:
            return lambda z: z
        return lambda z: jnp.clip(z, -bound, bound)

    def _scan(
        self, step: Callable[..., Any], carry: Any, xs: Any, reverse: bool
    ) -> tuple[Any, Any]:
        carried, stacked = lax.scan(step, carry, xs, reverse=reverse)
        return carried, stacked

    def _valid(self, lens: Any, steps: int) -> Any:
        """The ``(T, N, 1)`` mask of the steps each batch entry runs (``None``: all)."""
        if lens is None:
            return None
        return (jnp.arange(steps)[:, None] < lens[None, :])[:, :, None]

    def _layout_in(self, x: Any, states: list[Any]) -> tuple[Any, list[Any]]:
        if self.config.layout == 0:
            return x, states
        return jnp.swapaxes(x, 0, 1), [None if s is None else jnp.swapaxes(s, 0, 1) for s in states]

    def _layout_out(self, y: Any, states: list[Any]) -> tuple[Any, ...]:
        if self.config.layout == 0:
            return (y, *states)
        return (jnp.transpose(y, (2, 0, 1, 3)), *(jnp.swapaxes(s, 0, 1) for s in states))

    def _reverse(self, d: int) -> bool:
        return self.config.direction == "reverse" or d == 1


class LSTM(_Recurrent):
    """ONNX ``LSTM``: outputs ``Y``, ``Y_h`` and ``Y_c`` (see the module docstring)."""

    op_type = "LSTM"
    slots, attribute_defaults = onnx_signature("LSTM")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        cfg, clamp = self.config, self._clamp()

        def kernel(
            x: Any, w: Any, r: Any, b: Any = None, lens: Any = None,
            h0: Any = None, c0: Any = None, p: Any = None,
        ) -> tuple[Any, ...]:  # fmt: skip
            x, (h0, c0) = self._layout_in(x, [h0, c0])
            steps, batch, hidden = x.shape[0], x.shape[1], r.shape[2]
            valid = self._valid(lens, steps)
            ys, hs, cs = [], [], []
            for d in range(cfg.directions):
                fa, ga, ha = self.functions[d]
                xw = jnp.matmul(x, w[d].T)
                if b is not None:
                    xw = xw + (b[d, : 4 * hidden] + b[d, 4 * hidden :])
                rt = r[d].T
                h = jnp.zeros((batch, hidden), x.dtype) if h0 is None else h0[d]
                c = jnp.zeros((batch, hidden), x.dtype) if c0 is None else c0[d]
                peep = None if p is None else jnp.split(p[d], 3)

                def step(
                    carry: Any,
                    inputs: Any,
                    fa: Any = fa,
                    ga: Any = ga,
                    ha: Any = ha,
                    rt: Any = rt,
                    peep: Any = peep,
                ) -> tuple[Any, Any]:
                    h, c = carry
                    xt, m = inputs
                    ai, ao, af, ac = jnp.split(xt + h @ rt, 4, axis=1)
                    if peep is not None:
                        ai, af = ai + peep[0] * c, af + peep[2] * c
                    gi = fa(clamp(ai))
                    gf = 1 - gi if cfg.input_forget else fa(clamp(af))
                    c_new = gf * c + gi * ga(clamp(ac))
                    if peep is not None:
                        ao = ao + peep[1] * c_new
                    h_new = fa(clamp(ao)) * ha(c_new)
                    if m is None:
                        return (h_new, c_new), h_new
                    out = jnp.where(m, h_new, jnp.zeros_like(h_new))
                    return (jnp.where(m, h_new, h), jnp.where(m, c_new, c)), out

                (h, c), y = self._scan(step, (h, c), (xw, valid), self._reverse(d))
                ys.append(y)
                hs.append(h)
                cs.append(c)
            return self._layout_out(jnp.stack(ys, 1), [jnp.stack(hs), jnp.stack(cs)])

        return kernel


class GRU(_Recurrent):
    """ONNX ``GRU``: outputs ``Y`` and ``Y_h`` (see the module docstring)."""

    op_type = "GRU"
    slots, attribute_defaults = onnx_signature("GRU")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        cfg, clamp = self.config, self._clamp()

        def kernel(
            x: Any, w: Any, r: Any, b: Any = None, lens: Any = None, h0: Any = None
        ) -> tuple[Any, ...]:
            x, (h0,) = self._layout_in(x, [h0])
            steps, batch, hidden = x.shape[0], x.shape[1], r.shape[2]
            valid = self._valid(lens, steps)
            ys, hs = [], []
            for d in range(cfg.directions):
                fa, ga = self.functions[d]
                xw = jnp.matmul(x, w[d].T)
                if b is not None:
                    xw = xw + b[d, : 3 * hidden]
                r_zr, r_h = r[d, : 2 * hidden].T, r[d, 2 * hidden :].T
                rb_zr = None if b is None else b[d, 3 * hidden : 5 * hidden]
                rb_h = None if b is None else b[d, 5 * hidden :]
                h = jnp.zeros((batch, hidden), x.dtype) if h0 is None else h0[d]

                def step(
                    carry: Any,
                    inputs: Any,
                    fa: Any = fa,
                    ga: Any = ga,
                    r_zr: Any = r_zr,
                    r_h: Any = r_h,
                    rb_zr: Any = rb_zr,
                    rb_h: Any = rb_h,
                ) -> tuple[Any, Any]:
                    h = carry
                    xt, m = inputs
                    azr = xt[:, : 2 * hidden] + h @ r_zr
                    if rb_zr is not None:
                        azr = azr + rb_zr
                    az, ar = jnp.split(azr, 2, axis=1)
                    gz, gr = fa(clamp(az)), fa(clamp(ar))
                    if cfg.linear_before_reset:
                        u = h @ r_h if rb_h is None else h @ r_h + rb_h
                        ah = xt[:, 2 * hidden :] + gr * u
                    else:
                        ah = xt[:, 2 * hidden :] + (gr * h) @ r_h
                        if rb_h is not None:
                            ah = ah + rb_h
                    gh = ga(clamp(ah))
                    h_new = gh + gz * (h - gh)
                    if m is None:
                        return h_new, h_new
                    out = jnp.where(m, h_new, jnp.zeros_like(h_new))
                    return jnp.where(m, h_new, h), out

                h, y = self._scan(step, h, (xw, valid), self._reverse(d))
                ys.append(y)
                hs.append(h)
            return self._layout_out(jnp.stack(ys, 1), [jnp.stack(hs)])

        return kernel
