"""Losses: ``SoftmaxCrossEntropyLoss`` (ONNX) and ``MeanSquaredError`` (d5's own)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5core.onnx import LOSS_REDUCTIONS as REDUCTIONS
from d5core.onnx import MeanSquaredErrorRules, SoftmaxCrossEntropyLossRules

__all__ = ["REDUCTIONS", "MeanSquaredError", "SoftmaxCrossEntropyLoss"]

class SoftmaxCrossEntropyLoss(SoftmaxCrossEntropyLossRules, TorchOperator):
    """ONNX ``SoftmaxCrossEntropyLoss``: outputs the loss and ``log_prob``, computed by
    ``F.log_softmax`` and ``F.nll_loss`` (what ``F.cross_entropy`` runs).

    Labels must lie in ``[0, C)`` or equal ``ignore_index``; labels and weights get no
    gradient (ONNX marks them non-differentiable).
    """

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


class MeanSquaredError(MeanSquaredErrorRules, TorchOperator):
    """d5's ``MeanSquaredError`` (ONNX has none): ``(prediction - target)²`` reduced by
    ``reduction``; ``F.mse_loss``. Both inputs get gradients."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        mse, reduction = F.mse_loss, self.reduction
        return lambda x, y: (mse(x, y, reduction=reduction),)
