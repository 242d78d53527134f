"""BatchNormalization (ONNX opset 15), in inference and in training mode."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from d5_plugin_numpy.ops.base import ReferenceOperator
from d5core.api import UsageError

__all__ = ["BatchNormalization"]


class BatchNormalization(ReferenceOperator):
    """Normalize ``X (N, C, ...)`` per channel, then scale and shift.

    Inference (``training_mode=0``): ``Y = scale * (X - input_mean) / sqrt(input_var +
    epsilon) + B``; the one output is ``Y``.

    Training (``training_mode=1``): the batch's mean and *biased* variance over every
    axis but the channel's normalize ``X``; the outputs are ``Y``, ``running_mean =
    momentum * input_mean + (1 - momentum) * mean`` and ``running_var`` likewise from the
    biased variance (as ONNX specifies; PyTorch updates with the unbiased variance).

    Backward is the exact vector-Jacobian product in both modes: in training mode it
    runs through the batch statistics, and the cotangents of ``running_mean`` and
    ``running_var``, if any are given, flow to ``X``, ``input_mean`` and ``input_var``.
    """

    op_type = "BatchNormalization"
    input_names = ("X", "scale", "B", "input_mean", "input_var")
    min_inputs = 5
    defaults = MappingProxyType({"epsilon": 1e-5, "momentum": 0.9, "training_mode": 0})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.epsilon = float(attributes["epsilon"])
        self.momentum = float(attributes["momentum"])
        self.training = bool(int(attributes["training_mode"]))

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_rank(shapes, 0, at_least=2)
        channels = shapes[0][1]
        for i in range(1, 5):
            if tuple(shapes[i]) != (channels,):
                raise UsageError(
                    f"{self.input_name(i)} must have shape ({channels},) for X of shape "
                    f"{shapes[0]}, not {shapes[i]}"
                )

    @staticmethod
    def _axes(x: np.ndarray) -> tuple[int, ...]:
        return (0, *range(2, x.ndim))

    @staticmethod
    def _per_channel(v: np.ndarray, x: np.ndarray) -> np.ndarray:
        return v.reshape((1, -1) + (1,) * (x.ndim - 2))

    def _statistics(self, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The mean and variance that normalize ``X``, per channel."""
        x = inputs[0]
        if self.training:
            return x.mean(axis=self._axes(x)), x.var(axis=self._axes(x))
        return inputs[3], inputs[4]

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x, scale, bias = inputs[0], inputs[1], inputs[2]
        mean, var = self._statistics(inputs)
        c = self._per_channel
        inv = 1.0 / np.sqrt(var + self.epsilon)
        y = (c(scale * inv, x) * (x - c(mean, x)) + c(bias, x)).astype(x.dtype)
        if not self.training:
            return [y]
        m = self.momentum
        running_mean = (m * inputs[3] + (1 - m) * mean).astype(x.dtype)
        running_var = (m * inputs[4] + (1 - m) * var).astype(x.dtype)
        return [y, running_mean, running_var]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        x, scale = inputs[0], inputs[1]
        dt = x.dtype
        c, axes = self._per_channel, self._axes(x)
        dy = np.asarray(grad_outputs[0], dtype=dt)
        mean, var = self._statistics(inputs)
        inv = 1.0 / np.sqrt(var + self.epsilon)
        xhat = (x - c(mean, x)) * c(inv, x)
        dscale = (dy * xhat).sum(axis=axes)
        dbias = dy.sum(axis=axes)
        if not self.training:
            dx = dy * c(scale * inv, x)
            dmean = -dbias * scale * inv
            dvar = -0.5 * dscale * scale * inv**2
            return [g.astype(dt) for g in (dx, dscale, dbias, dmean, dvar)]
        count = x.size // x.shape[1]
        dxhat = dy * c(scale, x)
        dx = c(inv / count, x) * (
            count * dxhat - c(dxhat.sum(axis=axes), x) - xhat * c((dxhat * xhat).sum(axis=axes), x)
        )
        grads = list(grad_outputs) + [None] * (3 - len(grad_outputs))
        d_rm = np.zeros_like(mean) if grads[1] is None else np.asarray(grads[1], dtype=dt)
        d_rv = np.zeros_like(var) if grads[2] is None else np.asarray(grads[2], dtype=dt)
        m = self.momentum
        # running_mean = m * input_mean + (1 - m) * mean(X); likewise for the variance.
        dx = dx + c((1 - m) * d_rm / count, x) + c((1 - m) * d_rv, x) * 2 * (x - c(mean, x)) / count
        return [g.astype(dt) for g in (dx, dscale, dbias, m * d_rm, m * d_rv)]
