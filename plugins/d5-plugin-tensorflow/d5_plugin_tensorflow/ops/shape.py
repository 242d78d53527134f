"""Shape operators: ``Reshape``, ``Flatten``, ``Transpose``, ``Concat``, ``Squeeze``,
``Unsqueeze``.

Shape and axes inputs are integers that ONNX passes as tensors; they are read into
Python values when the graph is built, so the timed graph holds the reshape (or the
transpose, or the concatenation) alone, with a constant target. ``Reshape``,
``Flatten``, ``Squeeze`` and ``Unsqueeze`` are all one ``tf.reshape``.
"""

from __future__ import annotations

from d5_plugin_tensorflow.ops._base import Plan, Signature, TFOperator, tf
from d5core.onnx import operator_rules as rules

__all__ = ["Concat", "Flatten", "Reshape", "Squeeze", "Transpose", "Unsqueeze"]


def _reshape_to(target: tuple[int, ...]) -> Plan:
    reshape, shape = tf.reshape, list(target)
    return Plan(lambda x: (reshape(x, shape),))


class Reshape(rules.ReshapeRules, TFOperator):
    """ONNX ``Reshape`` (0 copies the input's dimension unless ``allowzero``; -1 is
    inferred): ``tf.reshape`` to the resolved shape."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        target = self._target(sig)
        assert target is not None
        return _reshape_to(target)


class Flatten(rules.FlattenRules, TFOperator):
    """ONNX ``Flatten``: a 2-D result split at ``axis``, by ``tf.reshape``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        return _reshape_to(self._target(sig))


class Transpose(rules.TransposeRules, TFOperator):
    """ONNX ``Transpose`` (default: reverse the axes): ``tf.transpose``, which copies."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        perm = list(self._perm(sig))
        transpose = tf.transpose
        return Plan(lambda x: (transpose(x, perm),))


class Concat(rules.ConcatRules, TFOperator):
    """ONNX ``Concat`` along ``axis``: ``tf.concat``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        concat, axis = tf.concat, self.axis
        return Plan(lambda *xs: (concat(list(xs), axis),))


class Squeeze(rules.SqueezeRules, TFOperator):
    """ONNX ``Squeeze`` (opset 13: ``axes`` is an input; without it every axis of size 1
    goes): ``tf.reshape`` to the shape without them."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        target = self._squeezed(sig)
        assert target is not None
        return _reshape_to(target)


class Unsqueeze(rules.UnsqueezeRules, TFOperator):
    """ONNX ``Unsqueeze`` (opset 13: ``axes``, a required input, counts in the output's
    rank): ``tf.reshape`` to the shape with them."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        target = self._expanded(sig)
        assert target is not None
        return _reshape_to(target)
