"""Activations: ``Relu``, ``LeakyRelu``, ``Sigmoid``, ``Tanh``, ``Softmax``, ``LogSoftmax``."""

from __future__ import annotations

from d5_plugin_tensorflow.ops._base import Plan, Signature, TFOperator, tf
from d5core.onnx import LogSoftmaxRules, SoftmaxRules, onnx_signature

__all__ = ["LeakyRelu", "LogSoftmax", "Relu", "Sigmoid", "Softmax", "Tanh"]


class _Unary(TFOperator):
    """An operator of one input, ``X``."""


class Relu(_Unary):
    """ONNX ``Relu``: ``tf.nn.relu``."""

    op_type = "Relu"
    slots, attribute_defaults = onnx_signature("Relu")

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        relu = tf.nn.relu
        return Plan(lambda x: (relu(x),))


class LeakyRelu(_Unary):
    """ONNX ``LeakyRelu``: ``tf.nn.leaky_relu`` with slope ``alpha``."""

    op_type = "LeakyRelu"
    slots, attribute_defaults = onnx_signature("LeakyRelu")

    def configure(self) -> None:
        self.alpha = float(self.attr("alpha"))

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        leaky, alpha = tf.nn.leaky_relu, self.alpha
        return Plan(lambda x: (leaky(x, alpha),))


class Sigmoid(_Unary):
    """ONNX ``Sigmoid``: ``tf.math.sigmoid``."""

    op_type = "Sigmoid"
    slots, attribute_defaults = onnx_signature("Sigmoid")

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        sigmoid = tf.math.sigmoid
        return Plan(lambda x: (sigmoid(x),))


class Tanh(_Unary):
    """ONNX ``Tanh``: ``tf.math.tanh``."""

    op_type = "Tanh"
    slots, attribute_defaults = onnx_signature("Tanh")

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        tanh = tf.math.tanh
        return Plan(lambda x: (tanh(x),))


class Softmax(SoftmaxRules, _Unary):
    """ONNX ``Softmax`` (opset 13: along the one axis ``axis``): ``tf.nn.softmax``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        softmax, axis = tf.nn.softmax, self.axis
        return Plan(lambda x: (softmax(x, axis),))


class LogSoftmax(LogSoftmaxRules, _Unary):
    """ONNX ``LogSoftmax`` (opset 13: along the one axis ``axis``): ``tf.nn.log_softmax``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        log_softmax, axis = tf.nn.log_softmax, self.axis
        return Plan(lambda x: (log_softmax(x, axis),))
