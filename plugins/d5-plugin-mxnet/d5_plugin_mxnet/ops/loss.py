"""Losses: ``SoftmaxCrossEntropyLoss`` (ONNX) and ``MeanSquaredError`` (d5's own)."""

from __future__ import annotations

from typing import Any

from d5_plugin_mxnet.ops._base import MXNetOperator, Plan, Signature, mx
from d5core.api import check_class_labels, onnx_signature

__all__ = ["REDUCTIONS", "MeanSquaredError", "SoftmaxCrossEntropyLoss"]

REDUCTIONS = ("mean", "sum", "none")


class _Loss(MXNetOperator):
    def configure(self) -> None:
        self.reduction = str(self.attr("reduction"))
        if self.reduction not in REDUCTIONS:
            raise self.fail(
                f"reduction must be one of {', '.join(REDUCTIONS)}, got {self.reduction!r}"
            )


class SoftmaxCrossEntropyLoss(_Loss):
    """ONNX ``SoftmaxCrossEntropyLoss``: outputs the loss and ``log_prob``.

    ``mx.nd.log_softmax`` over the class axis, then ``mx.nd.pick`` of each label's
    log-probability; each element is weighted by its class's weight (``mx.nd.take``) or
    by one, and by zero where the label is ``ignore_index`` (picked with ``mode="clip"``
    so that an out-of-range ignore label reads a valid class first); ``mean`` divides by
    the total weight, as ONNX does. Labels and weights get no gradient.
    """

    op_type = "SoftmaxCrossEntropyLoss"
    slots, attribute_defaults = onnx_signature("SoftmaxCrossEntropyLoss")

    def configure(self) -> None:
        super().configure()
        ignore = self.attr("ignore_index")
        self.ignore_index = None if ignore is None else int(ignore)

    def check(self, sig: Signature) -> None:
        scores = self.require_rank(sig, 0, at_least=2, what="(N, C, ...)")
        weights = sig.shapes[2] if len(sig.shapes) > 2 else None
        labels = sig.arrays[1] if sig.values_known else None
        check_class_labels(self.op_type, scores, sig.shapes[1], weights, labels, self.ignore_index)

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


class MeanSquaredError(_Loss):
    """d5's ``MeanSquaredError`` (ONNX has none): ``(prediction - target)²`` reduced by
    ``reduction`` (``mx.nd.square`` of the difference, then ``mx.nd.mean`` or
    ``mx.nd.sum``). Both inputs get gradients."""

    op_type = "MeanSquaredError"
    slots, attribute_defaults = onnx_signature("MeanSquaredError")

    def check(self, sig: Signature) -> None:
        if sig.shapes[0] != sig.shapes[1]:
            raise self.fail(
                f"input target of shape {sig.shapes[1]} must have the shape "
                f"{sig.shapes[0]} of prediction"
            )

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        shape = sig.shapes[0]
        assert shape is not None
        nd, reduction = mx.nd, self.reduction
        if reduction == "none":
            return Plan(lambda x, y: (nd.square(x - y),), {} if shape else {0: ()})
        reduce = nd.mean if reduction == "mean" else nd.sum
        return Plan(lambda x, y: (reduce(nd.square(x - y)),), {0: ()})
