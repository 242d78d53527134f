"""Activations: ``Relu``, ``LeakyRelu``, ``Sigmoid``, ``Tanh``, ``Softmax``, ``LogSoftmax``."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5core.onnx import LogSoftmaxRules, SoftmaxRules, onnx_signature

__all__ = ["LeakyRelu", "LogSoftmax", "Relu", "Sigmoid", "Softmax", "Tanh"]


class _Unary(TorchOperator):
    """An operator of one input, ``X``."""


class Relu(_Unary):
    """ONNX ``Relu``: ``torch.relu``."""

    op_type = "Relu"
    slots, attribute_defaults = onnx_signature("Relu")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        relu = torch.relu
        return lambda x: (relu(x),)


class LeakyRelu(_Unary):
    """ONNX ``LeakyRelu``: ``F.leaky_relu`` with slope ``alpha``."""

    op_type = "LeakyRelu"
    slots, attribute_defaults = onnx_signature("LeakyRelu")

    def configure(self) -> None:
        self.alpha = float(self.attr("alpha"))

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        leaky, alpha = F.leaky_relu, self.alpha
        return lambda x: (leaky(x, alpha),)


class Sigmoid(_Unary):
    """ONNX ``Sigmoid``: ``torch.sigmoid``."""

    op_type = "Sigmoid"
    slots, attribute_defaults = onnx_signature("Sigmoid")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        sigmoid = torch.sigmoid
        return lambda x: (sigmoid(x),)


class Tanh(_Unary):
    """ONNX ``Tanh``: ``torch.tanh``."""

    op_type = "Tanh"
    slots, attribute_defaults = onnx_signature("Tanh")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        tanh = torch.tanh
        return lambda x: (tanh(x),)


class Softmax(SoftmaxRules, _Unary):
    """ONNX ``Softmax`` (opset 13: along the one axis ``axis``): ``torch.softmax``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        softmax, axis = torch.softmax, self.axis
        return lambda x: (softmax(x, axis),)


class LogSoftmax(LogSoftmaxRules, _Unary):
    """ONNX ``LogSoftmax`` (opset 13: along the one axis ``axis``): ``torch.log_softmax``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        log_softmax, axis = torch.log_softmax, self.axis
        return lambda x: (log_softmax(x, axis),)
