"""``BatchNormalization``, ``LayerNormalization`` and ``Dropout`` (with the reference's
Dropout mask). Each is written as its formula in ``jax.numpy``; XLA fuses it, and
``jax.vjp`` differentiates every output, the statistics included."""

from __future__ import annotations

from typing import Any

from d5_plugin_jax.ops._base import JaxOperator, Kernel, Signature, jax, jnp
from d5core.onnx import (
    BatchNormalizationRules,
    DropoutRules,
    LayerNormalizationRules,
    reference_mask,
)

__all__ = ["BatchNormalization", "Dropout", "LayerNormalization"]


class BatchNormalization(BatchNormalizationRules, JaxOperator):
    """ONNX ``BatchNormalization`` (opset 15).

    Inference mode normalizes with ``input_mean`` and ``input_var``. Training mode
    normalizes with the batch's mean and (biased) variance and also returns
    ``running = input * momentum + batch * (1 - momentum)`` for both statistics.
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        shape = sig.shapes[0]
        assert shape is not None
        eps, momentum, keep = self.epsilon, self.momentum, 1.0 - self.momentum
        axes = (0, *range(2, len(shape)))
        channel = (1, shape[1]) + (1,) * (len(shape) - 2)
        rsqrt = jax.lax.rsqrt

        def normalize(x: Any, s: Any, b: Any, mean: Any, var: Any) -> Any:
            factor = (s * rsqrt(var + eps)).reshape(channel)
            return (x - mean.reshape(channel)) * factor + b.reshape(channel)

        if self.training:

            def train(x: Any, s: Any, b: Any, mu: Any, var: Any) -> tuple[Any, ...]:
                m = jnp.mean(x, axis=axes)
                v = jnp.mean(jnp.square(x - m.reshape(channel)), axis=axes)
                y = normalize(x, s, b, m, v)
                return y, mu * momentum + m * keep, var * momentum + v * keep

            return train
        return lambda x, s, b, mu, var: (normalize(x, s, b, mu, var),)


class LayerNormalization(LayerNormalizationRules, JaxOperator):
    """ONNX ``LayerNormalization`` (opset 17): ``X`` normalized over the axes from
    ``axis`` on, times ``Scale``, plus ``B``; also the ``Mean`` and ``InvStdDev`` of each
    normalized slice (shape ``X[:axis]`` then ones), all in the type of ``X``
    (``stash_type`` is read but JAX computes in that type). ``Scale`` and ``B`` may be of
    the normalized shape or broadcast to it."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        dims = self._normalized(sig)
        eps, rsqrt = self.epsilon, jax.lax.rsqrt

        def kernel(x: Any, s: Any, b: Any = None) -> tuple[Any, Any, Any]:
            mean = jnp.mean(x, axis=dims, keepdims=True)
            centered = x - mean
            inv = rsqrt(jnp.mean(jnp.square(centered), axis=dims, keepdims=True) + eps)
            y = centered * inv * s
            if b is not None:
                y = y + b
            return y, mean, inv

        return kernel


class Dropout(DropoutRules, JaxOperator):
    """ONNX ``Dropout`` (opset 13), with its ``output`` and boolean ``mask``.

    In training mode the mask is the reference's (numpy's generator seeded with the
    ``seed`` attribute), drawn when the kernel is built, so ``forward`` validates
    against the numpy reference element by element; the compiled program multiplies by
    the mask scaled by ``1 / (1 - ratio)`` (JAX's own random bits would differ from
    numpy's). The drawing of the mask is not timed.
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        ratio, training = self._mode(sig)
        shape = sig.shapes[0]
        assert shape is not None
        if not training or ratio == 0.0:
            return lambda x: (x, jnp.ones(shape, dtype=bool))
        keep = reference_mask(shape, ratio, self.seed)
        scaled = (keep / (1.0 - ratio)).astype(sig.dtype)
        self.timed_notes = ("the mask is numpy's (the reference's), drawn when prepared",)
        return lambda x: (x * jnp.asarray(scaled), jnp.asarray(keep))
