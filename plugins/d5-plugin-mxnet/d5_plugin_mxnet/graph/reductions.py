"""Reductions over axes (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSum, ReduceLogSumExp) and ArgMax/ArgMin.

The axes come from the ``axes`` attribute, or (ReduceSum from opset 13, the others from
opset 18) from a static second input; no axes reduce every axis, unless
``noop_with_empty_axes`` makes the node the identity. MXNet has no rank-0 tensors: a
reduction of every axis without ``keepdims`` gives a vector of one, which the executor
returns with ONNX's shape ``()`` where the graph declares a scalar.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import onnx

from d5_plugin_mxnet.graph.base import Context, Reader, Translated, Translation, ints, node_error

__all__ = ["OPS"]

#: ONNX reduction to a function of (F, x, axes, keepdims).
_REDUCERS: dict[str, Callable[[Any, Any, tuple[int, ...], bool], Any]] = {
    "ReduceSum": lambda F, x, ax, k: F.sum(x, axis=ax, keepdims=k),
    "ReduceMean": lambda F, x, ax, k: F.mean(x, axis=ax, keepdims=k),
    "ReduceMax": lambda F, x, ax, k: F.max(x, axis=ax, keepdims=k),
    "ReduceMin": lambda F, x, ax, k: F.min(x, axis=ax, keepdims=k),
    "ReduceProd": lambda F, x, ax, k: F.prod(x, axis=ax, keepdims=k),
    "ReduceSumSquare": lambda F, x, ax, k: F.sum(F.square(x), axis=ax, keepdims=k),
    "ReduceL1": lambda F, x, ax, k: F.sum(F.abs(x), axis=ax, keepdims=k),
    "ReduceL2": lambda F, x, ax, k: F.sqrt(F.sum(F.square(x), axis=ax, keepdims=k)),
    "ReduceLogSum": lambda F, x, ax, k: F.log(F.sum(x, axis=ax, keepdims=k)),
    "ReduceLogSumExp": lambda F, x, ax, k: _log_sum_exp(F, x, ax, k),
}
#: The opset from which each reduction takes its axes as an input (18 for the others).
_AXES_INPUT_FROM = {"ReduceSum": 13}


def _log_sum_exp(F: Any, x: Any, axes: tuple[int, ...], keepdims: bool) -> Any:
    """``log(sum(exp(x)))`` computed stably, shifted by the maximum."""
    peak = F.stop_gradient(F.max(x, axis=axes, keepdims=True))
    total = F.log(F.sum(F.exp(F.broadcast_sub(x, peak)), axis=axes, keepdims=True))
    out = F.broadcast_add(total, peak)
    return out if keepdims else F.squeeze(out, axis=axes)


def _reduce(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    reducer = _REDUCERS[node.op_type]
    keepdims = bool(int(a.get("keepdims", 1)))
    noop = bool(int(a.get("noop_with_empty_axes", 0)))
    if tr.opset >= _AXES_INPUT_FROM.get(node.op_type, 18):
        value = tr.static(node, 1)
        axes = None if value is None else ints(value)
    else:
        axes = ints(a["axes"]) if "axes" in a else None

    def reduce(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        rank = len(ctx.shapes[0])
        if not axes and noop:
            return [ctx.F.identity(xs[0])]
        chosen = tuple(range(rank)) if not axes else tuple(sorted(d % rank for d in axes))
        if not keepdims and len(chosen) == rank and rank > 1:
            # every axis: reduce keeping them, then make the vector of one MXNet holds
            out = reducer(ctx.F, xs[0], chosen, True)
            return [ctx.F.reshape(out, shape=(1,))]
        return [reducer(ctx.F, xs[0], chosen, keepdims)]

    return Translated(reduce, [node.input[0]])


def _arg(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    axis = int(a.get("axis", 0))
    keepdims = bool(int(a.get("keepdims", 1)))
    if int(a.get("select_last_index", 0)):
        raise node_error(node, "select_last_index is not supported by the mxnet executor")
    fn = "argmax" if node.op_type == "ArgMax" else "argmin"

    def arg(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        rank = len(ctx.shapes[0])
        out = getattr(ctx.F, fn)(xs[0], axis=axis % rank, keepdims=keepdims)
        return [ctx.F.cast(out, dtype="int64")]

    return Translated(arg, [node.input[0]])


#: The translation of every operator type of this family.
OPS: dict[str, Translation] = {
    **{op: _reduce for op in _REDUCERS},
    "ArgMax": _arg,
    "ArgMin": _arg,
}
