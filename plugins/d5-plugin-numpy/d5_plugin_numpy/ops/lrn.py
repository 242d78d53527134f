"""LRN: local response normalization across channels (ONNX opset 13)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from d5_plugin_numpy.ops.base import ReferenceOperator
from d5core.api import UsageError

__all__ = ["LRN"]


def _window_sum(a: np.ndarray, before: int, after: int) -> np.ndarray:
    """``out[:, c] = sum(a[:, c - before : c + after + 1])``, zeros outside the channels."""
    pad = [(0, 0)] * a.ndim
    pad[1] = (before, after)
    padded = np.pad(a, pad)
    channels = a.shape[1]
    out = np.zeros_like(a)
    for i in range(before + after + 1):
        out += padded[:, i : i + channels]
    return out


class LRN(ReferenceOperator):
    """ONNX LRN on ``X (N, C, ...)``: ``Y = X / (bias + alpha / size * S) ** beta`` where
    ``S[c]`` sums ``X[c']**2`` over ``c' in [c - floor((size-1)/2), c + ceil((size-1)/2)]``.

    Backward is the exact vector-Jacobian product (the window sum is transposed by
    swapping its extents).
    """

    op_type = "LRN"
    input_names = ("X",)
    defaults = MappingProxyType({"alpha": 1e-4, "beta": 0.75, "bias": 1.0, "size": None})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        if attributes["size"] is None or int(attributes["size"]) < 1:
            raise UsageError(f"LRN needs a positive integer size, not {attributes['size']!r}")
        self.size = int(attributes["size"])
        self.alpha = float(attributes["alpha"])
        self.beta = float(attributes["beta"])
        self.bias = float(attributes["bias"])
        self.lo = (self.size - 1) // 2
        self.hi = self.size - 1 - self.lo

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_rank(shapes, 0, at_least=2)

    def _denominator(self, x: np.ndarray) -> np.ndarray:
        return self.bias + (self.alpha / self.size) * _window_sum(x * x, self.lo, self.hi)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        return [(x * self._denominator(x) ** -self.beta).astype(x.dtype)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        x = inputs[0]
        dy = np.asarray(grad_outputs[0], dtype=x.dtype)
        d = self._denominator(x)
        t = dy * x * d ** (-self.beta - 1)
        coef = -2.0 * self.beta * self.alpha / self.size
        dx = dy * d**-self.beta + coef * x * _window_sum(t, self.hi, self.lo)
        return [dx.astype(x.dtype)]
