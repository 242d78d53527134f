"""Activations: ``Relu``, ``LeakyRelu``, ``Sigmoid``, ``Tanh``, ``Softmax``, ``LogSoftmax``."""

from __future__ import annotations

from d5_plugin_jax.ops._base import JaxOperator, Kernel, Signature, jax, jnp
from d5core.onnx import LogSoftmaxRules, SoftmaxRules, onnx_signature

__all__ = ["LeakyRelu", "LogSoftmax", "Relu", "Sigmoid", "Softmax", "Tanh"]


class Relu(JaxOperator):
    """ONNX ``Relu``: ``jax.nn.relu``."""

    op_type = "Relu"
    slots, attribute_defaults = onnx_signature("Relu")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        relu = jax.nn.relu
        return lambda x: (relu(x),)


class LeakyRelu(JaxOperator):
    """ONNX ``LeakyRelu``: ``x`` where positive, else ``alpha * x``."""

    op_type = "LeakyRelu"
    slots, attribute_defaults = onnx_signature("LeakyRelu")

    def configure(self) -> None:
        self.alpha = float(self.attr("alpha"))

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        alpha, where = self.alpha, jnp.where
        return lambda x: (where(x > 0, x, x * alpha),)


class Sigmoid(JaxOperator):
    """ONNX ``Sigmoid``: ``jax.nn.sigmoid``."""

    op_type = "Sigmoid"
    slots, attribute_defaults = onnx_signature("Sigmoid")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        sigmoid = jax.nn.sigmoid
        return lambda x: (sigmoid(x),)


class Tanh(JaxOperator):
    """ONNX ``Tanh``: ``jnp.tanh``."""

    op_type = "Tanh"
    slots, attribute_defaults = onnx_signature("Tanh")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        tanh = jnp.tanh
        return lambda x: (tanh(x),)


class Softmax(SoftmaxRules, JaxOperator):
    """ONNX ``Softmax`` along ``axis``: ``jax.nn.softmax``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        softmax, axis = jax.nn.softmax, self.axis
        return lambda x: (softmax(x, axis=axis),)


class LogSoftmax(LogSoftmaxRules, JaxOperator):
    """ONNX ``LogSoftmax`` along ``axis``: ``jax.nn.log_softmax``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        log_softmax, axis = jax.nn.log_softmax, self.axis
        return lambda x: (log_softmax(x, axis=axis),)
