"""Activations: Relu, LeakyRelu, Sigmoid, Tanh, Softmax and LogSoftmax."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from d5_plugin_numpy.ops.base import ReferenceOperator
from d5core.api import UsageError

__all__ = ["LeakyRelu", "LogSoftmax", "Relu", "Sigmoid", "Softmax", "Tanh"]


class _Unary(ReferenceOperator):
    input_names = ("X",)


class Relu(_Unary):
    """``max(x, 0)``; the gradient at 0 is taken as 0."""

    op_type = "Relu"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.maximum(x, 0).astype(x.dtype, copy=False)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        x = inputs[0]
        return [np.where(x > 0, grad_outputs[0], 0).astype(x.dtype)]


class LeakyRelu(_Unary):
    """``x`` for ``x >= 0``, ``alpha * x`` below; the gradient at 0 is taken as ``alpha``."""

    op_type = "LeakyRelu"
    defaults = MappingProxyType({"alpha": 0.01})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.alpha = float(attributes["alpha"])

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        return [np.where(x >= 0, x, self.alpha * x).astype(x.dtype)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        x, dy = inputs[0], grad_outputs[0]
        return [np.where(x > 0, dy, self.alpha * dy).astype(x.dtype)]


class Sigmoid(_Unary):
    """``1 / (1 + exp(-x))``, evaluated without overflow for either sign."""

    op_type = "Sigmoid"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        z = np.exp(-np.abs(x))
        return [np.where(x >= 0, 1 / (1 + z), z / (1 + z)).astype(x.dtype)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        y = outputs[0]
        return [(grad_outputs[0] * y * (1 - y)).astype(y.dtype)]


class Tanh(_Unary):
    """The hyperbolic tangent."""

    op_type = "Tanh"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.tanh(inputs[0])]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        y = outputs[0]
        return [(grad_outputs[0] * (1 - y * y)).astype(y.dtype)]


class _AlongAxis(_Unary):
    defaults = MappingProxyType({"axis": -1})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.axis = int(attributes["axis"])

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        rank = len(shapes[0])
        if not -rank <= self.axis < rank:
            raise UsageError(
                f"{self.op_type} axis {self.axis} is out of range for "
                f"{self.input_name(0)} of shape {shapes[0]}"
            )

    def log_softmax(self, x: np.ndarray) -> np.ndarray:
        shifted = x - x.max(axis=self.axis, keepdims=True)
        return np.asarray(shifted - np.log(np.exp(shifted).sum(axis=self.axis, keepdims=True)))


class Softmax(_AlongAxis):
    """ONNX Softmax (opset 13): normalized exponentials along the one axis ``axis``."""

    op_type = "Softmax"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        shifted = np.exp(x - x.max(axis=self.axis, keepdims=True))
        return [(shifted / shifted.sum(axis=self.axis, keepdims=True)).astype(x.dtype)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        y, dy = outputs[0], grad_outputs[0]
        return [(y * (dy - (dy * y).sum(axis=self.axis, keepdims=True))).astype(y.dtype)]


class LogSoftmax(_AlongAxis):
    """ONNX LogSoftmax (opset 13): ``x - log(sum(exp(x)))`` along ``axis``."""

    op_type = "LogSoftmax"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        return [self.log_softmax(x).astype(x.dtype)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        y, dy = outputs[0], grad_outputs[0]
        return [(dy - np.exp(y) * dy.sum(axis=self.axis, keepdims=True)).astype(y.dtype)]
