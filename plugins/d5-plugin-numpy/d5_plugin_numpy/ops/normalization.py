"""BatchNormalization (ONNX opset 15), in inference and in training mode, and
LayerNormalization (opset 17)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from d5_plugin_numpy.ops.base import ReferenceOperator, unbroadcast
from d5core.api import UsageError

__all__ = ["BatchNormalization", "LayerNormalization"]


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


class LayerNormalization(ReferenceOperator):
    """ONNX LayerNormalization (opset 17): normalize ``X`` over the axes from ``axis`` on,
    then scale and shift: ``Y = (X - Mean) * InvStdDev * Scale + B`` with ``InvStdDev =
    1 / sqrt(Var + epsilon)`` and the biased variance. ``Scale`` and the optional ``B``
    broadcast to ``X.shape[axis:]``. The outputs ``Mean`` and ``InvStdDev`` have the shape
    of ``X`` with the normalized axes set to 1.

    Everything is computed in the dtype of ``X`` (as ONNX's reference does), and the
    statistics come out in it too; ``stash_type`` must be 1 (float), its ONNX default.

    Backward is the exact vector-Jacobian product for ``X``, ``Scale`` and ``B``,
    including the cotangents of ``Mean`` and ``InvStdDev`` when they are used.
    """

    op_type = "LayerNormalization"
    input_names = ("X", "Scale", "B")
    min_inputs = 2
    defaults = MappingProxyType({"axis": -1, "epsilon": 1e-5, "stash_type": 1})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.axis = int(attributes["axis"])
        self.epsilon = float(attributes["epsilon"])
        if int(attributes["stash_type"]) != 1:
            raise UsageError(
                f"LayerNormalization stash_type={attributes['stash_type']} is not supported; "
                "the numpy backend computes in the dtype of X and takes stash_type=1"
            )

    def _axis(self, rank: int) -> int:
        if not -rank <= self.axis < rank:
            raise UsageError(
                f"LayerNormalization axis {self.axis} is out of range for X of rank {rank}; "
                f"give one in [{-rank}, {rank - 1}]"
            )
        return self.axis % rank

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_rank(shapes, 0, at_least=1)
        x = shapes[0]
        normalized = x[self._axis(len(x)) :]
        for i in range(1, len(shapes)):
            s = shapes[i]
            fits = len(s) <= len(normalized) and all(
                a in (1, b) for a, b in zip(s[::-1], normalized[::-1], strict=False)
            )
            if not fits:
                raise UsageError(
                    f"{self.input_name(i)} has shape {s}, which does not broadcast to "
                    f"{normalized}, the normalized axes of X of shape {x}"
                )

    def _statistics(self, x: np.ndarray) -> tuple[tuple[int, ...], np.ndarray, np.ndarray]:
        axes = tuple(range(self._axis(x.ndim), x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = np.square(x - mean).mean(axis=axes, keepdims=True)
        inv = (1.0 / np.sqrt(var + self.epsilon)).astype(x.dtype)
        return axes, mean.astype(x.dtype), inv

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x, scale = inputs[0], inputs[1]
        _, mean, inv = self._statistics(x)
        y = (x - mean) * inv * scale
        if len(inputs) > 2:
            y = y + inputs[2]
        return [y.astype(x.dtype), mean, inv]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        x, scale = inputs[0], inputs[1]
        dt = x.dtype
        axes, mean, inv = self._statistics(x)
        count = math.prod(x.shape[a] for a in axes)
        grads = list(grad_outputs) + [None] * (3 - len(grad_outputs))
        dy = np.asarray(grads[0], dtype=dt)
        xhat = (x - mean) * inv
        lead = tuple(range(x.ndim - len(axes)))
        dscale = unbroadcast((dy * xhat).sum(axis=lead), scale.shape)
        g = dy * scale
        dx = inv * (
            g - g.mean(axis=axes, keepdims=True) - xhat * (g * xhat).mean(axis=axes, keepdims=True)
        )
        if grads[1] is not None:  # Mean = mean(X)
            dx = dx + np.asarray(grads[1], dtype=dt) / count
        if grads[2] is not None:  # InvStdDev = (Var + eps) ** -0.5
            dx = dx - np.asarray(grads[2], dtype=dt) * inv**3 * (x - mean) / count
        result: list[np.ndarray | None] = [dx.astype(dt), dscale.astype(dt)]
        if len(inputs) > 2:
            result.append(unbroadcast(dy.sum(axis=lead), inputs[2].shape).astype(dt))
        return result
