"""Softmax, LogSoftmax and the losses: SoftmaxCrossEntropyLoss and MeanSquaredError.

Softmax before opset 13 flattens its input to a matrix at ``axis`` (the ``coerced``
form) and normalises each row. SoftmaxCrossEntropyLoss picks the log-probability of each
label (labels compared in the logits' type, exact for any class count a float holds),
weighted, with ``ignore_index`` masked out; ``mean`` divides by the sum of the weights
of the kept labels, as ONNX does. MXNet has no rank-0 tensors: a reduced loss is a
one-element vector here, and the executor gives it ONNX's scalar shape on the way out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import onnx

from d5_plugin_mxnet.graph.base import Context, Reader, Translated, Translation, node_error

__all__ = ["OPS"]

_REDUCTIONS = ("mean", "sum", "none")


def _softmax(kind: str) -> Translation:
    def translate(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
        modern = tr.opset >= 13
        axis = int(a.get("axis", -1 if modern else 1))

        def softmax(ctx: Context, xs: Sequence[Any]) -> list[Any]:
            shape, F = ctx.shapes[0], ctx.F
            fn = F.softmax if kind == "Softmax" else F.log_softmax
            ax = axis + len(shape) if axis < 0 else axis
            if modern or ax == len(shape) - 1:
                return [fn(xs[0], axis=ax)]
            rows = F.reshape(xs[0], shape=(math.prod(shape[:ax]), math.prod(shape[ax:])))
            return [F.reshape(fn(rows, axis=1), shape=shape)]

        return Translated(softmax, [node.input[0]])

    return translate


def _reduce(F: Any, value: Any, reduction: str) -> Any:
    if reduction == "sum":
        return F.sum(value)
    if reduction == "mean":
        return F.mean(value)
    return value


def _check_reduction(node: onnx.NodeProto, a: dict[str, Any]) -> str:
    reduction = str(a.get("reduction", "mean"))
    if reduction not in _REDUCTIONS:
        raise node_error(
            node, f"reduction must be one of {', '.join(_REDUCTIONS)}, not {reduction!r}"
        )
    return reduction


def _cross_entropy(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    reduction = _check_reduction(node, a)
    ignore = a.get("ignore_index")
    want_log_prob = len(node.output) > 1 and bool(node.output[1])

    def cross_entropy(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        F = ctx.F
        x, labels = xs[0], xs[1]
        weights = xs[2] if len(xs) > 2 else None
        log_prob = F.log_softmax(x, axis=1)
        index = F.cast(labels, dtype=ctx.dtypes[0])
        picked = F.pick(log_prob, index, axis=1)  # (N, d1, ...)
        weight = None
        if weights is not None:
            safe = index if ignore is None else index * (index != float(ignore))
            weight = F.take(weights, safe)
        if ignore is not None:
            keep = index != float(ignore)
            weight = keep if weight is None else weight * keep
        loss = -picked if weight is None else -(picked * weight)
        if reduction == "mean" and weight is not None:
            value = F.sum(loss) / F.sum(weight)
        else:
            value = _reduce(F, loss, reduction)
        return [value, log_prob] if want_log_prob else [value]

    return Translated(cross_entropy, [i for i in node.input[:3] if i])


def _mean_squared_error(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    reduction = _check_reduction(node, a)

    def mse(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        F = ctx.F
        if ctx.shapes[0] != ctx.shapes[1]:
            raise node_error(
                node,
                f"prediction {ctx.shapes[0]} and target {ctx.shapes[1]} must have the same shape",
            )
        return [_reduce(F, F.square(xs[0] - xs[1]), reduction)]

    return Translated(mse, list(node.input[:2]))


#: The translation of every operator type of this family.
OPS: dict[str, Translation] = {
    "Softmax": _softmax("Softmax"),
    "LogSoftmax": _softmax("LogSoftmax"),
    "SoftmaxCrossEntropyLoss": _cross_entropy,
    "MeanSquaredError": _mean_squared_error,
}
