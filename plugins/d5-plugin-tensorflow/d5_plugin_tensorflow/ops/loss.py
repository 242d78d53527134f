"""Losses: ``SoftmaxCrossEntropyLoss`` (ONNX) and ``MeanSquaredError`` (d5's own)."""

from __future__ import annotations

from typing import Any

from d5_plugin_tensorflow.ops._base import Layout, Plan, Signature, TFOperator, tf
from d5core.onnx import LOSS_REDUCTIONS as REDUCTIONS
from d5core.onnx import MeanSquaredErrorRules, SoftmaxCrossEntropyLossRules

__all__ = ["REDUCTIONS", "MeanSquaredError", "SoftmaxCrossEntropyLoss"]

class SoftmaxCrossEntropyLoss(SoftmaxCrossEntropyLossRules, TFOperator):
    """ONNX ``SoftmaxCrossEntropyLoss``: outputs the loss and ``log_prob``.

    ``tf.nn.log_softmax`` over the classes, then each position's label picked by
    ``tf.gather``; labels equal to ``ignore_index`` count with weight 0, and ``mean``
    divides by the sum of the weights, as ONNX does. Scores with axes beyond (N, C) are
    given channels-last, ``(N, d1, ..., C)``, so that the classes are the innermost axis
    (moved outside the timed call, like ``log_prob`` on the way back). Labels must lie
    in ``[0, C)`` or equal ``ignore_index``; labels and weights get no gradient.
    """

    def layout_of(self, sig: Signature) -> str:
        scores = sig.shapes[0]
        return "channels_last" if scores is not None and len(scores) > 2 else ""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        scores = sig.shapes[0]
        assert scores is not None
        layouts: tuple[Layout | None, ...] = (None, None)
        if len(sig.shapes) > 2 and sig.shapes[2] is not None:
            layouts += (None,)
        log_layout = None
        if len(scores) > 2:
            log_layout = Layout(scores, (0, *range(2, len(scores)), 1))
            layouts = (log_layout, *layouts[1:])
        reduction, ignore = self.reduction, self.ignore_index
        dims = len(scores) - 1
        log_softmax, gather, where = tf.nn.log_softmax, tf.gather, tf.where
        reduce_sum, expand, squeeze = tf.reduce_sum, tf.expand_dims, tf.squeeze

        def kernel(x: Any, labels: Any, weights: Any = None) -> tuple[Any, Any]:
            log_prob = log_softmax(x, -1)
            valid = None if ignore is None else labels != ignore
            safe = labels if valid is None else where(valid, labels, 0)
            picked = squeeze(gather(log_prob, expand(safe, -1), axis=-1, batch_dims=dims), -1)
            weight = None if weights is None else gather(weights, safe)
            if valid is not None:
                mask = tf.cast(valid, x.dtype)
                weight = mask if weight is None else weight * mask
            loss = -picked if weight is None else -picked * weight
            if reduction == "sum":
                loss = reduce_sum(loss)
            elif reduction == "mean":
                total = tf.cast(tf.size(loss), x.dtype) if weight is None else reduce_sum(weight)
                loss = reduce_sum(loss) / total
            return loss, log_prob

        return Plan(kernel, layouts, (None, log_layout))


class MeanSquaredError(MeanSquaredErrorRules, TFOperator):
    """d5's ``MeanSquaredError`` (ONNX has none): ``(prediction - target)²`` reduced by
    ``reduction``: ``tf.math.squared_difference``, then ``tf.reduce_mean`` or
    ``tf.reduce_sum``. Both inputs get gradients."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        squared = tf.math.squared_difference
        reduce = {"mean": tf.reduce_mean, "sum": tf.reduce_sum}.get(self.reduction)
        if reduce is None:
            return Plan(lambda x, y: (squared(x, y),))
        return Plan(lambda x, y: (reduce(squared(x, y)),))
