"""Losses: ``SoftmaxCrossEntropyLoss`` (ONNX) and ``MeanSquaredError`` (d5's own)."""

from __future__ import annotations

from typing import Any

from d5_plugin_mxnet.ops._base import MXNetOperator, Plan, Signature, mx
from d5core.onnx import LOSS_REDUCTIONS as REDUCTIONS
from d5core.onnx import MeanSquaredErrorRules, SoftmaxCrossEntropyLossRules

__all__ = ["REDUCTIONS", "MeanSquaredError", "SoftmaxCrossEntropyLoss"]

class SoftmaxCrossEntropyLoss(SoftmaxCrossEntropyLossRules, MXNetOperator):
    """ONNX ``SoftmaxCrossEntropyLoss``: outputs the loss and ``log_prob``.

    ``mx.nd.log_softmax`` over the class axis, then ``mx.nd.pick`` of each label's
    log-probability; each element is weighted by its class's weight (``mx.nd.take``) or
    by one, and by zero where the label is ``ignore_index`` (picked with ``mode="clip"``
    so that an out-of-range ignore label reads a valid class first); ``mean`` divides by
    the total weight, as ONNX does. Labels and weights get no gradient.
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        nd, reduction, ignore = mx.nd, self.reduction, self.ignore_index
        labels_shape = sig.shapes[1]
        assert labels_shape is not None
        # Labels have at least the batch axis: only a reduced loss is 0-d.
        shapes: dict[int, tuple[int, ...]] = {} if reduction == "none" else {0: ()}

        def kernel(scores: Any, labels: Any, weights: Any = None) -> tuple[Any, Any]:
            log_prob = nd.log_softmax(scores, axis=1)
            picked = nd.pick(log_prob, labels, axis=1, mode="clip")
            weight = None if weights is None else nd.take(weights, labels, mode="clip")
            if ignore is not None:
                counted = labels != ignore
                weight = counted if weight is None else weight * counted
            losses = -picked if weight is None else -picked * weight
            if reduction == "none":
                return losses, log_prob
            total = nd.sum(losses)
            if reduction == "sum":
                return total, log_prob
            return total / (nd.sum(weight) if weight is not None else losses.size), log_prob

        return Plan(kernel, shapes)


class MeanSquaredError(MeanSquaredErrorRules, MXNetOperator):
    """d5's ``MeanSquaredError`` (ONNX has none): ``(prediction - target)²`` reduced by
    ``reduction`` (``mx.nd.square`` of the difference, then ``mx.nd.mean`` or
    ``mx.nd.sum``). Both inputs get gradients."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        shape = sig.shapes[0]
        assert shape is not None
        nd, reduction = mx.nd, self.reduction
        if reduction == "none":
            return Plan(lambda x, y: (nd.square(x - y),), {} if shape else {0: ()})
        reduce = nd.mean if reduction == "mean" else nd.sum
        return Plan(lambda x, y: (reduce(nd.square(x - y)),), {0: ()})
