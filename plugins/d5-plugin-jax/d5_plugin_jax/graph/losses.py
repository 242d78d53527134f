"""Loss operators as JAX functions: SoftmaxCrossEntropyLoss,
NegativeLogLikelihoodLoss and MeanSquaredError, each with ONNX's ``reduction``
(mean, sum or none) and, for the class losses, ``ignore_index`` and class weights.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from d5_plugin_jax.graph._common import Out, fail, jax, jnp
from d5_plugin_jax.graph.registry import NodeContext, op

__all__: list[str] = []  # importing the module registers its translations


def _reduction(ctx: NodeContext) -> str:
    reduction = str(ctx.attrs.get("reduction", "mean"))
    if reduction not in ("mean", "sum", "none"):
        raise fail(ctx, f"unknown reduction {reduction!r}; use mean, sum or none")
    return reduction


def _nll(ctx: NodeContext, log_prob: Any, labels: Any, weights: Any | None) -> Any:
    """The negative log-likelihood of ``labels`` under ``log_prob`` (N, C, d...)."""
    labels = jnp.asarray(labels).astype(np.int64)
    ignore = ctx.attrs.get("ignore_index")
    classes = log_prob.shape[1]
    valid = jnp.ones(labels.shape, bool) if ignore is None else labels != int(ignore)
    safe = jnp.where(valid, labels, 0)
    picked = jnp.take_along_axis(log_prob, jnp.expand_dims(safe, 1), axis=1)[:, 0]
    w = (
        valid.astype(log_prob.dtype)
        if weights is None
        else jnp.where(valid, jnp.asarray(weights)[jnp.clip(safe, 0, classes - 1)], 0).astype(
            log_prob.dtype
        )
    )
    loss = -picked * w
    reduction = _reduction(ctx)
    if reduction == "none":
        return loss
    if reduction == "sum":
        return jnp.sum(loss)
    return jnp.sum(loss) / jnp.sum(w)


@op("SoftmaxCrossEntropyLoss")
def _softmax_cross_entropy(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    scores = jnp.asarray(inputs[0])
    weights = inputs[2] if len(inputs) > 2 else None
    log_prob = jax.nn.log_softmax(scores, axis=1)
    loss = _nll(ctx, log_prob, inputs[1], weights).astype(scores.dtype)
    return [loss, log_prob]


@op("NegativeLogLikelihoodLoss")
def _negative_log_likelihood(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    log_prob = jnp.asarray(inputs[0])
    weights = inputs[2] if len(inputs) > 2 else None
    return [_nll(ctx, log_prob, inputs[1], weights).astype(log_prob.dtype)]


@op("MeanSquaredError")
def _mean_squared_error(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    p, t = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    if p.shape != t.shape:
        raise fail(ctx, f"target of shape {tuple(t.shape)} differs from {tuple(p.shape)}")
    square = jnp.square(p - t)
    reduction = _reduction(ctx)
    if reduction == "sum":
        return [jnp.sum(square)]
    if reduction == "mean":
        return [jnp.mean(square)]
    return [square]
