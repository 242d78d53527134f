"""Losses: ``SoftmaxCrossEntropyLoss`` (ONNX) and ``MeanSquaredError`` (d5's own)."""

from __future__ import annotations

from typing import Any

from d5_plugin_jax.ops._base import JaxOperator, Kernel, Signature, jax, jnp
from d5core.onnx import MeanSquaredErrorRules, SoftmaxCrossEntropyLossRules

__all__ = ["MeanSquaredError", "SoftmaxCrossEntropyLoss"]


def _reduce(values: Any, reduction: str) -> Any:
    if reduction == "sum":
        return jnp.sum(values)
    if reduction == "mean":
        return jnp.mean(values)
    return values


class SoftmaxCrossEntropyLoss(SoftmaxCrossEntropyLossRules, JaxOperator):
    """ONNX ``SoftmaxCrossEntropyLoss``: the loss and ``log_prob`` (``jax.nn.log_softmax``
    over the class axis 1), the log-probability of each label picked with
    ``jnp.take_along_axis``. A label equal to ``ignore_index`` weighs 0; ``mean``
    divides by the total weight of the labels counted. Labels and weights get no
    gradient."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        reduction, ignore = self.reduction, self.ignore_index
        log_softmax = jax.nn.log_softmax

        def kernel(scores: Any, labels: Any, weights: Any = None) -> tuple[Any, Any]:
            log_prob = log_softmax(scores, axis=1)
            kept = labels if ignore is None else jnp.where(labels == ignore, 0, labels)
            picked = jnp.take_along_axis(log_prob, kept[:, None], axis=1)[:, 0]
            weight = jnp.ones_like(picked) if weights is None else weights[kept]
            if ignore is not None:
                weight = jnp.where(labels == ignore, jnp.zeros_like(weight), weight)
            loss = -picked * weight
            if reduction == "sum":
                return jnp.sum(loss), log_prob
            if reduction == "mean":
                return jnp.sum(loss) / jnp.sum(weight), log_prob
            return loss, log_prob

        return kernel


class MeanSquaredError(MeanSquaredErrorRules, JaxOperator):
    """d5's ``MeanSquaredError`` (ONNX has none): ``(prediction - target)²`` reduced by
    ``reduction``; both inputs get gradients."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        reduction = self.reduction
        return lambda x, y: (_reduce(jnp.square(x - y), reduction),)
