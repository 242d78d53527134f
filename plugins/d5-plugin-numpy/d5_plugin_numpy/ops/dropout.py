"""Dropout (ONNX opset 13), with a reproducible mask."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from d5_plugin_numpy.ops.base import ReferenceOperator
from d5core.api import UsageError

__all__ = ["Dropout"]


class Dropout(ReferenceOperator):
    """ONNX Dropout: inputs ``data``, optional ``ratio`` (default 0.5) and optional
    ``training_mode`` (default false); outputs ``output`` and the boolean ``mask``.

    In inference the output is the input and the mask all true. In training an element
    is kept where ``numpy.random.default_rng(seed).random(data.shape) >= ratio`` and
    scaled by ``1 / (1 - ratio)``. The mask depends only on the ``seed`` attribute (0 if
    absent) and the shape, so every forward call of an operator draws the same mask;
    ONNX leaves an unseeded mask random. ``ratio`` and ``training_mode`` may also be given
    as attributes (as in opsets before 12); an input takes precedence.

    Gradients: ``data`` gets ``dy * mask / (1 - ratio)``; ``ratio`` and ``training_mode``
    are hyperparameters and get ``None``.
    """

    op_type = "Dropout"
    input_names = ("data", "ratio", "training_mode")
    any_dtype_inputs = frozenset({1, 2})
    no_gradient_inputs = frozenset({1, 2})
    defaults = MappingProxyType({"ratio": 0.5, "seed": 0, "training_mode": 0})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.seed = int(attributes["seed"])
        self.default_ratio = float(attributes["ratio"])
        self.default_training = bool(int(attributes["training_mode"]))
        self._ratio_in_range(self.default_ratio)

    def _ratio_in_range(self, ratio: float) -> float:
        if not 0.0 <= ratio < 1.0:
            raise UsageError(f"Dropout ratio must lie in [0, 1), not {ratio}")
        return ratio

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        for i in (1, 2):
            if len(shapes) > i and shapes[i] not in ((), (1,)):
                raise UsageError(f"{self.input_name(i)} must be a scalar, not of shape {shapes[i]}")

    def _setting(self, inputs: Sequence[np.ndarray]) -> tuple[float, bool]:
        ratio = self.default_ratio
        if len(inputs) > 1 and inputs[1] is not None:
            ratio = self._ratio_in_range(float(np.asarray(inputs[1]).reshape(-1)[0]))
        training = self.default_training
        if len(inputs) > 2 and inputs[2] is not None:
            training = bool(np.asarray(inputs[2]).reshape(-1)[0])
        return ratio, training

    def mask(self, shape: tuple[int, ...], ratio: float) -> np.ndarray:
        """The keep mask of a training-mode forward."""
        return np.random.default_rng(self.seed).random(shape) >= ratio

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        ratio, training = self._setting(inputs)
        if not training or ratio == 0.0:
            return [x.copy(), np.ones(x.shape, dtype=bool)]
        keep = self.mask(x.shape, ratio)
        return [(x * keep / (1.0 - ratio)).astype(x.dtype), keep]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        x = inputs[0]
        dy = np.asarray(grad_outputs[0], dtype=x.dtype)
        ratio, training = self._setting(inputs)
        grads: list[np.ndarray | None] = [dy.copy()]
        if training and ratio != 0.0:
            grads[0] = (dy * self.mask(x.shape, ratio) / (1.0 - ratio)).astype(x.dtype)
        return grads + [None] * (len(inputs) - 1)
