"""Reductions over axes, arg-extrema, cumulative sums, top-k, and the normalizations
and losses built on them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.graph.translation import ChannelsLast, NodeBuilder, NodeFn, ints, rank_of
from d5core.api import UsageError

__all__ = ["ReductionNodes", "negative_log_likelihood"]

tf = tensorflow()

#: ONNX reduction name to a function of (x, axes, keepdims).
_REDUCERS: dict[str, Callable[[Any, list[int], bool], Any]] = {
    "ReduceSum": lambda x, ax, k: tf.reduce_sum(x, ax, keepdims=k),
    "ReduceMean": lambda x, ax, k: tf.reduce_mean(x, ax, keepdims=k),
    "ReduceMax": lambda x, ax, k: (tf.reduce_any if x.dtype == tf.bool else tf.reduce_max)(
        x, ax, keepdims=k
    ),
    "ReduceMin": lambda x, ax, k: (tf.reduce_all if x.dtype == tf.bool else tf.reduce_min)(
        x, ax, keepdims=k
    ),
    "ReduceProd": lambda x, ax, k: tf.reduce_prod(x, ax, keepdims=k),
    "ReduceL1": lambda x, ax, k: tf.reduce_sum(tf.abs(x), ax, keepdims=k),
    "ReduceL2": lambda x, ax, k: _in_float(
        lambda v: tf.sqrt(tf.reduce_sum(v * v, ax, keepdims=k)), x
    ),
    "ReduceLogSum": lambda x, ax, k: tf.math.log(tf.reduce_sum(x, ax, keepdims=k)),
    "ReduceLogSumExp": lambda x, ax, k: tf.reduce_logsumexp(x, ax, keepdims=k),
    "ReduceSumSquare": lambda x, ax, k: tf.reduce_sum(x * x, ax, keepdims=k),
}
#: The opset from which each reduction takes its axes as an input.
_AXES_INPUT_FROM = {"ReduceSum": 13}


def _in_float(fn: Callable[[Any], Any], x: Any) -> Any:
    """``fn(x)`` computed in float64 for an integer ``x``, cast back."""
    if x.dtype.is_floating:
        return fn(x)
    return tf.cast(fn(tf.cast(x, tf.float64)), x.dtype)


def _safe_labels(labels: Any, ignore: int | None) -> tuple[Any, Any]:
    """Labels as int64 with ``ignore`` replaced by 0, and where they are valid (``None``
    when nothing is ignored)."""
    labels = tf.cast(labels, tf.int64)
    if ignore is None:
        return labels, None
    valid = tf.not_equal(labels, ignore)
    return tf.where(valid, labels, tf.zeros_like(labels)), valid


def _reduce_loss(
    loss: Any, safe: Any, valid: Any, w: Any | None, reduction: str, dtype: Any
) -> Any:
    """Weight each position's ``-logp[label]`` (``loss``) and reduce it as ONNX's
    NegativeLogLikelihoodLoss does."""
    weight = None if w is None else tf.gather(w, safe)
    if valid is not None:
        mask = tf.cast(valid, dtype)
        weight = mask if weight is None else weight * mask
    if weight is not None:
        loss = loss * weight
    if reduction == "sum":
        return tf.reduce_sum(loss)
    if reduction == "mean":
        count = tf.cast(tf.size(loss), dtype) if weight is None else tf.reduce_sum(weight)
        return tf.reduce_sum(loss) / count
    return loss


def negative_log_likelihood(
    logp: Any, labels: Any, w: Any | None, ignore: int | None, reduction: str
) -> Any:
    """ONNX NegativeLogLikelihoodLoss of log-probabilities ``(N, C, d...)``: each
    position's ``-w[label] * logp[label]``, 0 where ``label == ignore``; ``mean`` divides
    the sum by the sum of the weights used."""
    rank = rank_of(logp)
    safe, valid = _safe_labels(labels, ignore)
    moved = logp if rank == 2 else tf.transpose(logp, [0, *range(2, rank), 1])
    picked = tf.gather(moved, safe[..., None], batch_dims=rank - 1)[..., 0]
    return _reduce_loss(-picked, safe, valid, w, reduction, logp.dtype)


def check_reduction(reduction: str) -> str:
    if reduction not in ("none", "sum", "mean"):
        raise UsageError(f"reduction must be none, sum or mean, not {reduction!r}")
    return reduction


class ReductionNodes(NodeBuilder):
    """Translations of reductions."""

    def _reduce(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        reducer = _REDUCERS[node.op_type]
        keepdims = bool(int(a.get("keepdims", 1)))
        noop = bool(int(a.get("noop_with_empty_axes", 0)))
        from_input = self.opset >= _AXES_INPUT_FROM.get(node.op_type, 18)

        def reduce(x: Any, axes_in: Any = None) -> tuple[Any]:
            given = axes_in if from_input else a.get("axes")
            axes = [] if given is None else [ax % max(rank_of(x), 1) for ax in ints(given)]
            if not axes:
                if noop:
                    return (tf.identity(x),)
                axes = list(range(rank_of(x)))
            return (reducer(x, axes, keepdims),)

        if from_input and len(node.input) > 1 and node.input[1]:
            return self._node(node, reduce, node.input[:2], static=frozenset({1}))
        return self._node(node, reduce, [node.input[0]])

    op_ReduceSum = op_ReduceMean = op_ReduceMax = op_ReduceMin = op_ReduceProd = _reduce
    op_ReduceL1 = op_ReduceL2 = op_ReduceLogSum = op_ReduceLogSumExp = _reduce
    op_ReduceSumSquare = _reduce

    def _arg_extremum(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        axis = int(a.get("axis", 0))
        keepdims = bool(int(a.get("keepdims", 1)))
        last = bool(int(a.get("select_last_index", 0)))
        find = tf.argmax if node.op_type == "ArgMax" else tf.argmin

        def arg(x: Any) -> tuple[Any]:
            ax = axis % rank_of(x)
            if last:  # the last of equal extrema: search the reversed axis
                size = x.shape[ax]
                index = size - 1 - find(tf.reverse(x, [ax]), axis=ax)
            else:
                index = find(x, axis=ax)
            return (tf.expand_dims(index, ax) if keepdims else index,)

        return self._node(node, arg, [node.input[0]])

    op_ArgMax = op_ArgMin = _arg_extremum

    def op_CumSum(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        exclusive = bool(int(a.get("exclusive", 0)))
        reverse = bool(int(a.get("reverse", 0)))

        def cumsum(x: Any, axis: np.ndarray) -> tuple[Any]:
            ax = int(np.asarray(axis).reshape(-1)[0]) % rank_of(x)
            return (tf.math.cumsum(x, ax, exclusive=exclusive, reverse=reverse),)

        return self._node(node, cumsum, node.input[:2], static=frozenset({1}))

    def op_TopK(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        axis = int(a.get("axis", -1))
        largest = bool(int(a.get("largest", 1)))

        def top_k(x: Any, k: np.ndarray) -> tuple[Any, Any]:
            rank = rank_of(x)
            ax = axis % rank
            order = [*(i for i in range(rank) if i != ax), ax]
            moved = tf.transpose(x, order) if ax != rank - 1 else x
            count = int(np.asarray(k).reshape(-1)[0])
            keys = moved if largest else -moved  # ties keep the lower index first either way
            _, index = tf.math.top_k(keys, count, sorted=True)
            values = tf.gather(moved, index, batch_dims=rank - 1)
            back = [order.index(i) for i in range(rank)]
            if ax != rank - 1:
                values, index = tf.transpose(values, back), tf.transpose(index, back)
            return values, tf.cast(index, tf.int64)

        return self._node(node, top_k, node.input[:2], static=frozenset({1}))

    def op_Hardmax(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        axis = int(a.get("axis", -1 if self.opset >= 13 else 1))
        coerce = self.opset < 13

        def hardmax(x: Any) -> tuple[Any]:
            shape = x.shape.as_list()
            ax = axis % len(shape)
            if coerce:
                flat = tf.reshape(x, [int(np.prod(shape[:ax])), -1])
                y = tf.one_hot(tf.argmax(flat, axis=1), flat.shape[1], dtype=x.dtype)
                return (tf.reshape(y, shape),)
            return (tf.one_hot(tf.argmax(x, axis=ax), shape[ax], axis=ax, dtype=x.dtype),)

        return self._node(node, hardmax, [node.input[0]])

    def op_GlobalMaxPool(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        def onnx_fn(x: Any) -> tuple[Any]:
            return (tf.reduce_max(x, axis=list(range(2, rank_of(x))), keepdims=True),)

        def cl_fn(x: Any) -> tuple[Any]:
            return (tf.reduce_max(x, axis=list(range(1, rank_of(x) - 1)), keepdims=True),)

        return self._node(node, onnx_fn, [node.input[0]], cl=ChannelsLast(cl_fn, (0,)))

    def op_LpNormalization(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        axis, p = int(a.get("axis", -1)), int(a.get("p", 2))
        if p not in (1, 2):
            raise UsageError(f"attribute p must be 1 or 2, not {p}")

        def lp(x: Any) -> tuple[Any]:
            ax = axis % rank_of(x)
            norm = (
                tf.reduce_sum(tf.abs(x), ax, keepdims=True)
                if p == 1
                else tf.sqrt(tf.reduce_sum(x * x, ax, keepdims=True))
            )
            return (tf.math.divide_no_nan(x, norm),)  # 0 where the norm is 0, as ONNX says

        return self._node(node, lp, [node.input[0]])

    def op_LayerNormalization(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        axis, eps = int(a.get("axis", -1)), float(a.get("epsilon", 1e-5))

        def layer_norm(x: Any, scale: Any, bias: Any = None) -> tuple[Any, ...]:
            rank = rank_of(x)
            axes = list(range(axis % rank, rank))
            wide = x.dtype in (tf.float16, tf.bfloat16)
            v = tf.cast(x, tf.float32) if wide else x
            mean, var = tf.nn.moments(v, axes, keepdims=True)
            inv = tf.math.rsqrt(var + eps)
            y = (v - mean) * inv
            if wide:
                y = tf.cast(y, x.dtype)
            y = y * scale
            if bias is not None:
                y = y + bias
            return y, mean, inv

        return self._node(node, layer_norm, node.input[:3])

    def op_NegativeLogLikelihoodLoss(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        reduction = check_reduction(a.get("reduction", "mean"))
        ignore = a.get("ignore_index")

        def nll(logp: Any, labels: Any, w: Any = None) -> tuple[Any]:
            index = None if ignore is None else int(ignore)
            return (negative_log_likelihood(logp, labels, w, index, reduction),)

        return self._node(node, nll, node.input[:3])
