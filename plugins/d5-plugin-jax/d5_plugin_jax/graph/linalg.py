"""Gemm and MatMul as JAX functions, computed at the highest matmul precision."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from d5_plugin_jax.graph._common import Out, fail, jnp, lax
from d5_plugin_jax.graph.registry import NodeContext, op

__all__: list[str] = []  # importing the module registers its translations


@op("Gemm")
def _gemm(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    a, b = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    c = inputs[2] if len(inputs) > 2 else None
    if int(ctx.attrs.get("transA", 0)):
        a = a.T
    if int(ctx.attrs.get("transB", 0)):
        b = b.T
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise fail(ctx, f"A {tuple(a.shape)} and B {tuple(b.shape)} do not multiply")
    if a.dtype != b.dtype:
        raise fail(ctx, f"A is {a.dtype} and B is {b.dtype}; they must have one type")
    alpha, beta = float(ctx.attrs.get("alpha", 1.0)), float(ctx.attrs.get("beta", 1.0))
    y = jnp.matmul(a, b, precision=lax.Precision.HIGHEST)
    if alpha != 1.0:
        y = y * alpha
    if c is not None:
        c = jnp.asarray(c)
        y = y + (c if beta == 1.0 else beta * c)
    return [y.astype(a.dtype)]


@op("MatMul")
def _matmul(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    a, b = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    return [jnp.matmul(a, b, precision=lax.Precision.HIGHEST)]
