"""Losses: ``SoftmaxCrossEntropyLoss`` (ONNX) and ``MeanSquaredError`` (d5's own)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5core.api import check_class_labels, onnx_signature

__all__ = ["REDUCTIONS", "MeanSquaredError", "SoftmaxCrossEntropyLoss"]

REDUCTIONS = ("mean", "sum", "none")


class _Loss(TorchOperator):
    def configure(self) -> None:
        self.reduction = str(self.attr("reduction"))
        if self.reduction not in REDUCTIONS:
            raise self.fail(
                f"reduction must be one of {', '.join(REDUCTIONS)}, got {self.reduction!r}"
            )


class SoftmaxCrossEntropyLoss(_Loss):
    """ONNX ``SoftmaxCrossEntropyLoss``: outputs the loss and ``log_prob``, computed by
    ``F.log_softmax`` and ``F.nll_loss`` (what ``F.cross_entropy`` runs).

    Labels must lie in ``[0, C)`` or equal ``ignore_index``; labels and weights get no
    gradient (ONNX marks them non-differentiable).
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

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        log_softmax, nll_loss = F.log_softmax, F.nll_loss
        reduction = self.reduction
        # With no ignore_index every label is in range, so torch's default never matches.
        ignore = -100 if self.ignore_index is None else self.ignore_index

        def kernel(
            scores: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor | None = None
        ) -> tuple[torch.Tensor, torch.Tensor]:
            log_prob = log_softmax(scores, 1)
            return nll_loss(log_prob, labels, weights, None, ignore, None, reduction), log_prob

        return kernel


class MeanSquaredError(_Loss):
    """d5's ``MeanSquaredError`` (ONNX has none): ``(prediction - target)²`` reduced by
    ``reduction``; ``F.mse_loss``. Both inputs get gradients."""

    op_type = "MeanSquaredError"
    slots, attribute_defaults = onnx_signature("MeanSquaredError")

    def check(self, sig: Signature) -> None:
        if sig.shapes[0] != sig.shapes[1]:
            raise self.fail(
                f"input target of shape {sig.shapes[1]} must have the shape "
                f"{sig.shapes[0]} of prediction"
            )

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        mse, reduction = F.mse_loss, self.reduction
        return lambda x, y: (mse(x, y, reduction=reduction),)
