"""Shape operators: ``Reshape``, ``Flatten``, ``Transpose``, ``Concat``, ``Squeeze``,
``Unsqueeze``.

Shape and axes inputs are integers that ONNX passes as tensors; they are read into
Python values when the kernel is built, so the timed call is the MXNet operation alone:
``mx.nd.reshape`` with the fully resolved target (no 0 or -1 left for MXNet to read its
own way), ``mx.nd.transpose`` or ``mx.nd.concat``.
"""

from __future__ import annotations

from d5_plugin_mxnet.ops._base import MXNetOperator, Plan, Signature, kernel_shape, mx
from d5core.onnx import operator_rules as rules

__all__ = ["Concat", "Flatten", "Reshape", "Squeeze", "Transpose", "Unsqueeze"]


def _reshaped(target: tuple[int, ...]) -> Plan:
    """A plan that reshapes its one input to ``target`` (ONNX's; 0-d held as (1,))."""
    reshape, held = mx.nd.reshape, kernel_shape(target)
    return Plan(lambda x: (reshape(x, shape=held),), {} if target else {0: ()})


class Reshape(rules.ReshapeRules, MXNetOperator):
    """ONNX ``Reshape`` (0 copies the input's dimension unless ``allowzero``; -1 is
    inferred): ``mx.nd.reshape``."""

    def _target(self, sig: Signature) -> tuple[int, ...] | None:
        target = super()._target(sig)
        if target is not None and 0 in target:
            raise self.fail(
                f"target shape {target} has an axis of size 0, which MXNet 1.9's arrays cannot hold"
            )
        return target

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        target = self._target(sig)
        assert target is not None
        return _reshaped(target)


class Flatten(rules.FlattenRules, MXNetOperator):
    """ONNX ``Flatten``: a 2-D result split at ``axis``, by ``mx.nd.reshape``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        return _reshaped(self._target(sig))


class Transpose(rules.TransposeRules, MXNetOperator):
    """ONNX ``Transpose`` (default: reverse the axes): ``mx.nd.transpose``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        perm = self._perm(sig)
        if not perm:
            copy = mx.nd.identity
            return Plan(lambda x: (copy(x),), {0: ()})
        transpose = mx.nd.transpose
        return Plan(lambda x: (transpose(x, axes=perm),))


class Concat(rules.ConcatRules, MXNetOperator):
    """ONNX ``Concat`` along ``axis``: ``mx.nd.concat``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        shape = sig.shapes[0]
        assert shape is not None
        concat, axis = mx.nd.concat, self.axis % len(shape)
        return Plan(lambda *xs: (concat(*xs, dim=axis),))


class Squeeze(rules.SqueezeRules, MXNetOperator):
    """ONNX ``Squeeze`` (opset 13: ``axes`` is an input; without it every axis of size 1
    goes): ``mx.nd.reshape`` to the squeezed shape."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        target = self._squeezed(sig)
        assert target is not None
        return _reshaped(target)


class Unsqueeze(rules.UnsqueezeRules, MXNetOperator):
    """ONNX ``Unsqueeze`` (opset 13: ``axes``, a required input, counts in the output's
    rank): ``mx.nd.reshape`` to the expanded shape."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        target = self._expanded(sig)
        assert target is not None
        return _reshaped(target)
