"""Activations: ``Relu``, ``LeakyRelu``, ``Sigmoid``, ``Tanh``, ``Softmax``, ``LogSoftmax``."""

from __future__ import annotations

from d5_plugin_mxnet.ops._base import Kernel, MXNetOperator, Plan, Signature, mx
from d5core.onnx import LogSoftmaxRules, SoftmaxRules, onnx_signature

__all__ = ["LeakyRelu", "LogSoftmax", "Relu", "Sigmoid", "Softmax", "Tanh"]


def _same_shape(sig: Signature, kernel: Kernel) -> Plan:
    """A plan of one output shaped like the one input (0-d kept 0-d)."""
    shape = sig.shapes[0]
    assert shape is not None
    return Plan(kernel, {} if shape else {0: ()})


class Relu(MXNetOperator):
    """ONNX ``Relu``: ``mx.nd.relu``."""

    op_type = "Relu"
    slots, attribute_defaults = onnx_signature("Relu")

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        relu = mx.nd.relu
        return _same_shape(sig, lambda x: (relu(x),))


class LeakyRelu(MXNetOperator):
    """ONNX ``LeakyRelu``: ``mx.nd.LeakyReLU`` (``act_type="leaky"``) with slope
    ``alpha`` in float32. In float64 MXNet's LeakyReLU loses precision (its output
    carries float32-sized errors, which central differences expose), so there the
    kernel is ``relu(x) - alpha * relu(-x)``."""

    op_type = "LeakyRelu"
    slots, attribute_defaults = onnx_signature("LeakyRelu")

    def configure(self) -> None:
        self.alpha = float(self.attr("alpha"))

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        alpha = self.alpha
        if sig.dtype == "float64":
            relu = mx.nd.relu
            return _same_shape(sig, lambda x: (relu(x) - relu(-x) * alpha,))
        leaky = mx.nd.LeakyReLU
        return _same_shape(sig, lambda x: (leaky(x, act_type="leaky", slope=alpha),))


class Sigmoid(MXNetOperator):
    """ONNX ``Sigmoid``: ``mx.nd.sigmoid``."""

    op_type = "Sigmoid"
    slots, attribute_defaults = onnx_signature("Sigmoid")

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        sigmoid = mx.nd.sigmoid
        return _same_shape(sig, lambda x: (sigmoid(x),))


class Tanh(MXNetOperator):
    """ONNX ``Tanh``: ``mx.nd.tanh``."""

    op_type = "Tanh"
    slots, attribute_defaults = onnx_signature("Tanh")

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        tanh = mx.nd.tanh
        return _same_shape(sig, lambda x: (tanh(x),))


class Softmax(SoftmaxRules, MXNetOperator):
    """ONNX ``Softmax`` (opset 13: along the one axis ``axis``): ``mx.nd.softmax``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        softmax, axis = mx.nd.softmax, self.axis
        return Plan(lambda x: (softmax(x, axis=axis),))


class LogSoftmax(LogSoftmaxRules, MXNetOperator):
    """ONNX ``LogSoftmax`` (opset 13: along the one axis ``axis``): ``mx.nd.log_softmax``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        log_softmax, axis = mx.nd.log_softmax, self.axis
        return Plan(lambda x: (log_softmax(x, axis=axis),))
