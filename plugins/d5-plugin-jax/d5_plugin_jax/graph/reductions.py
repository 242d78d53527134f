"""Reductions as JAX functions: the ReduceSum family, ArgMax, ArgMin, and the
softmax family (Softmax, LogSoftmax, Hardmax).

Before opset 13 the softmax family flattens its input to two dimensions at ``axis``; a
ReduceMax or ReduceMin over an empty axis gives the lowest or highest value of the type.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from d5_plugin_jax.graph._common import Out, axes_input, jax, jnp, lax
from d5_plugin_jax.graph.registry import NodeContext, op
from d5core.onnx import normalize_axes

__all__: list[str] = []  # importing the module registers its translations


def _reduce_axes(ctx: NodeContext, inputs: Sequence[Any], rank: int) -> tuple[int, ...] | None:
    since = 13 if ctx.node.op_type == "ReduceSum" else 18
    axes = axes_input(ctx, inputs, since)
    if axes is None or np.size(axes) == 0:
        if int(ctx.attrs.get("noop_with_empty_axes", 0)):
            return ()
        return None
    return tuple(normalize_axes(ctx.node.op_type, [int(a) for a in np.ravel(axes)], rank))


_REDUCE: dict[str, Callable[..., Any]] = {
    "ReduceSum": lambda x, **k: jnp.sum(x, **k),
    "ReduceMean": lambda x, **k: jnp.mean(x, **k),
    "ReduceMax": lambda x, **k: jnp.max(x, **k),
    "ReduceMin": lambda x, **k: jnp.min(x, **k),
    "ReduceProd": lambda x, **k: jnp.prod(x, **k),
    "ReduceL1": lambda x, **k: jnp.sum(jnp.abs(x), **k),
    "ReduceL2": lambda x, **k: jnp.sqrt(jnp.sum(jnp.square(x), **k)),
    "ReduceLogSum": lambda x, **k: jnp.log(jnp.sum(x, **k)),
    "ReduceLogSumExp": lambda x, **k: jax.scipy.special.logsumexp(x, **k),
    "ReduceSumSquare": lambda x, **k: jnp.sum(jnp.square(x), **k),
}


@op(*_REDUCE)
def _reduce(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    axes = _reduce_axes(ctx, inputs, x.ndim)
    if axes == ():
        return [x]
    keepdims = bool(int(ctx.attrs.get("keepdims", 1)))
    op_type = ctx.node.op_type
    reduced = range(x.ndim) if axes is None else axes
    if op_type in ("ReduceMax", "ReduceMin") and any(x.shape[a] == 0 for a in reduced):
        # an empty set: the identity of the reduction (ONNX: the lowest or highest value)
        low = op_type == "ReduceMax"
        if x.dtype == np.bool_:
            identity: Any = not low
        elif jnp.issubdtype(x.dtype, jnp.floating):
            identity = -np.inf if low else np.inf
        else:
            identity = np.iinfo(x.dtype).min if low else np.iinfo(x.dtype).max
        shape = [
            1 if i in reduced else d for i, d in enumerate(x.shape) if keepdims or i not in reduced
        ]
        return [jnp.full(shape, identity, x.dtype)]
    return [_REDUCE[op_type](x, axis=axes, keepdims=keepdims).astype(x.dtype)]


@op("ArgMax", "ArgMin")
def _arg(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    axis = normalize_axes(ctx.node.op_type, [int(ctx.attrs.get("axis", 0))], x.ndim, "axis")[0]
    keepdims = bool(int(ctx.attrs.get("keepdims", 1)))
    find = jnp.argmax if ctx.node.op_type == "ArgMax" else jnp.argmin
    if int(ctx.attrs.get("select_last_index", 0)):
        flipped = find(jnp.flip(x, axis), axis=axis, keepdims=keepdims)
        index = x.shape[axis] - 1 - flipped
    else:
        index = find(x, axis=axis, keepdims=keepdims)
    return [index.astype(np.int64)]


def _softmax_like(ctx: NodeContext, x: Any, fn: Callable[[Any, int], Any]) -> Any:
    if ctx.opset >= 13:
        axis = int(ctx.attrs.get("axis", -1))
        return fn(x, axis)
    axis = normalize_axes(ctx.node.op_type, [int(ctx.attrs.get("axis", 1))], x.ndim, "axis")[0]
    shape = x.shape
    flat = jnp.reshape(x, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))
    return jnp.reshape(fn(flat, 1), shape)


def _hardmax(x: Any, axis: int) -> Any:
    index = jnp.argmax(x, axis=axis, keepdims=True)
    positions = lax.broadcasted_iota(np.int64, x.shape, axis % x.ndim)
    return (positions == index).astype(x.dtype)


@op("Softmax")
def _softmax(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    return [_softmax_like(ctx, jnp.asarray(inputs[0]), lambda x, a: jax.nn.softmax(x, axis=a))]


@op("LogSoftmax")
def _log_softmax(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    fn = lambda x, a: jax.nn.log_softmax(x, axis=a)  # noqa: E731
    return [_softmax_like(ctx, jnp.asarray(inputs[0]), fn)]


@op("Hardmax")
def _hardmax_op(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    return [_softmax_like(ctx, jnp.asarray(inputs[0]), _hardmax)]
