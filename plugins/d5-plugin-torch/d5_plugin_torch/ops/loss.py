"""Losses: ``SoftmaxCrossEntropyLoss`` (ONNX) and ``MeanSquaredError`` (d5's own)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from d5_plugin_torch.ops._base import Kernel, Signature, Slot, TorchOperator

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
    slots = (
        Slot("scores"),
        Slot("labels", kind="index"),
        Slot("weights", optional=True, differentiable=False),
    )
    attribute_defaults: ClassVar[Mapping[str, Any]] = {"ignore_index": None, "reduction": "mean"}

    def configure(self) -> None:
        super().configure()
        ignore = self.attr("ignore_index")
        self.ignore_index = None if ignore is None else int(ignore)

    def check(self, sig: Signature) -> None:
        scores = self.require_rank(sig, 0, at_least=2, what="(N, C, ...)")
        expected = (scores[0], *scores[2:])
        if sig.shapes[1] != expected:
            raise self.fail(
                f"input labels must have shape {expected} (scores {scores} without C), "
                f"got {sig.shapes[1]}"
            )
        if len(sig.shapes) > 2 and sig.shapes[2] not in (None, (scores[1],)):
            raise self.fail(f"input weights must have shape ({scores[1]},), got {sig.shapes[2]}")
        labels = sig.arrays[1]
        if sig.values_known and labels is not None and labels.size:
            bad = (labels < 0) | (labels >= scores[1])
            if self.ignore_index is not None:
                bad &= labels != self.ignore_index
            if bad.any():
                raise self.fail(
                    f"labels must lie in [0, {scores[1]}) or equal ignore_index "
                    f"({self.ignore_index}); found {int(np.asarray(labels)[bad][0])}"
                )

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
    slots = (Slot("prediction"), Slot("target"))
    attribute_defaults: ClassVar[Mapping[str, Any]] = {"reduction": "mean"}

    def check(self, sig: Signature) -> None:
        if sig.shapes[0] != sig.shapes[1]:
            raise self.fail(
                f"input target of shape {sig.shapes[1]} must have the shape "
                f"{sig.shapes[0]} of prediction"
            )

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        mse, reduction = F.mse_loss, self.reduction
        return lambda x, y: (mse(x, y, reduction=reduction),)
