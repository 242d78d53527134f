"""Losses: ONNX SoftmaxCrossEntropyLoss, and MeanSquaredError (d5's own, as ONNX has no
such operator)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from d5_plugin_numpy.ops.base import ReferenceOperator, as_str
from d5core.api import UsageError

__all__ = ["MeanSquaredError", "SoftmaxCrossEntropyLoss"]

REDUCTIONS = ("none", "sum", "mean")


def _reduction(value: Any, op_type: str) -> str:
    reduction = as_str(value)
    if reduction not in REDUCTIONS:
        raise UsageError(
            f"{op_type} reduction must be one of {', '.join(REDUCTIONS)}, not {reduction!r}"
        )
    return reduction


class SoftmaxCrossEntropyLoss(ReferenceOperator):
    """ONNX SoftmaxCrossEntropyLoss: ``scores (N, C, d1, ...)``, integer ``labels
    (N, d1, ...)``, optional class ``weights (C)``; outputs ``output`` and ``log_prob``.

    Each position's loss is ``-w[label] * log_softmax(scores, axis=1)[label]``, with
    ``w`` the weights (or 1) and 0 where ``label == ignore_index``. ``mean`` divides the
    sum by the sum of those ``w``, as ONNX does; ``none`` keeps the labels' shape.
    ``labels`` and ``weights`` get no gradient.
    """

    op_type = "SoftmaxCrossEntropyLoss"
    input_names = ("scores", "labels", "weights")
    min_inputs = 2
    integer_inputs = frozenset({1})
    no_gradient_inputs = frozenset({2})
    defaults = MappingProxyType({"ignore_index": None, "reduction": "mean"})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        ignore = attributes["ignore_index"]
        self.ignore_index = None if ignore is None else int(ignore)
        self.reduction = _reduction(attributes["reduction"], self.op_type)

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_rank(shapes, 0, at_least=2)
        scores, labels = shapes[0], shapes[1]
        wanted = (scores[0], *scores[2:])
        if tuple(labels) != wanted:
            raise UsageError(
                f"{self.input_name(1)} must have shape {wanted} for scores of shape "
                f"{scores}, not {labels}"
            )
        if len(shapes) > 2 and tuple(shapes[2]) != (scores[1],):
            raise UsageError(
                f"{self.input_name(2)} must have shape ({scores[1]},), not {shapes[2]}"
            )

    def _parts(self, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``log_prob``, the labels made safe to index with, and each position's weight."""
        scores, labels = inputs[0], np.asarray(inputs[1]).astype(np.int64)
        shifted = scores - scores.max(axis=1, keepdims=True)
        log_prob = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        valid = np.ones(labels.shape, dtype=bool)
        if self.ignore_index is not None:
            valid = labels != self.ignore_index
        classes = scores.shape[1]
        bad = valid & ((labels < 0) | (labels >= classes))
        if bad.any():
            raise UsageError(
                f"SoftmaxCrossEntropyLoss label {int(labels[bad][0])} is outside [0, "
                f"{classes}) and is not the ignore_index"
            )
        safe = np.where(valid, labels, 0)
        if len(inputs) > 2 and inputs[2] is not None:
            weight = np.asarray(inputs[2])[safe]
        else:
            weight = np.ones(labels.shape, dtype=scores.dtype)
        return log_prob, safe, np.where(valid, weight, 0).astype(scores.dtype)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        dt = inputs[0].dtype
        log_prob, safe, weight = self._parts(inputs)
        picked = np.take_along_axis(log_prob, safe[:, None], axis=1)[:, 0]
        loss = -weight * picked
        if self.reduction == "sum":
            loss = np.asarray(loss.sum())
        elif self.reduction == "mean":
            loss = np.asarray(loss.sum() / weight.sum())
        return [loss.astype(dt), log_prob.astype(dt)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        dt = inputs[0].dtype
        log_prob, safe, weight = self._parts(inputs)
        dloss = np.asarray(grad_outputs[0], dtype=dt)
        if self.reduction == "mean":
            dloss = dloss / weight.sum()
        dpicked = -weight * np.broadcast_to(dloss, weight.shape)
        dlog_prob = np.zeros_like(log_prob)
        if len(grad_outputs) > 1 and grad_outputs[1] is not None:
            dlog_prob += np.asarray(grad_outputs[1], dtype=dt)
        np.put_along_axis(
            dlog_prob,
            safe[:, None],
            np.take_along_axis(dlog_prob, safe[:, None], axis=1) + dpicked[:, None],
            axis=1,
        )
        dscores = dlog_prob - np.exp(log_prob) * dlog_prob.sum(axis=1, keepdims=True)
        return [dscores.astype(dt), None] + [None] * (len(inputs) - 2)


class MeanSquaredError(ReferenceOperator):
    """d5's MeanSquaredError: ``(prediction - target)^2`` reduced by ``reduction``
    (``mean`` by default, ``sum`` or ``none``); both inputs have one shape and both get
    gradients."""

    op_type = "MeanSquaredError"
    input_names = ("prediction", "target")
    min_inputs = 2
    defaults = MappingProxyType({"reduction": "mean"})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.reduction = _reduction(attributes["reduction"], self.op_type)

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        if tuple(shapes[1]) != tuple(shapes[0]):
            raise UsageError(
                f"{self.input_name(1)} must have the shape {shapes[0]} of the prediction, "
                f"not {shapes[1]}"
            )

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        p, t = inputs[0], inputs[1]
        sq = np.square(p - t)
        if self.reduction == "sum":
            sq = np.asarray(sq.sum())
        elif self.reduction == "mean":
            sq = np.asarray(sq.mean())
        return [sq.astype(p.dtype)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        p, t = inputs[0], inputs[1]
        dy = np.asarray(grad_outputs[0], dtype=p.dtype)
        if self.reduction == "mean":
            dy = dy / p.size
        dp = (2 * (p - t) * dy).astype(p.dtype)
        return [dp, -dp]
