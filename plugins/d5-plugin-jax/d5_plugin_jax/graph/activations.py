"""Element-wise math and activation operators as JAX functions: the one-input
math (Abs, Exp, Sqrt, the trigonometric family...), Identity, Not, IsNaN, IsInf, Clip and
the activations (Relu, Sigmoid, LeakyRelu, Elu, Selu, PRelu, HardSigmoid...).

Round rounds half to even, as ONNX says; before opset 7 a one-dimensional PRelu slope
lies along the axis of its length.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from d5_plugin_jax.graph._common import Out, fail, jax, jnp, shape_of
from d5_plugin_jax.graph.registry import NodeContext, op

__all__: list[str] = []  # importing the module registers its translations


_UNARY: dict[str, Callable[[Any], Any]] = {
    "Abs": jnp.abs,
    "Neg": jnp.negative,
    "Exp": jnp.exp,
    "Log": jnp.log,
    "Sqrt": jnp.sqrt,
    "Reciprocal": jnp.reciprocal,
    "Floor": jnp.floor,
    "Ceil": jnp.ceil,
    "Round": jnp.round,
    "Sign": jnp.sign,
    "Sin": jnp.sin,
    "Cos": jnp.cos,
    "Tan": jnp.tan,
    "Asin": jnp.arcsin,
    "Acos": jnp.arccos,
    "Atan": jnp.arctan,
    "Sinh": jnp.sinh,
    "Cosh": jnp.cosh,
    "Asinh": jnp.arcsinh,
    "Acosh": jnp.arccosh,
    "Atanh": jnp.arctanh,
    "Sigmoid": lambda x: jax.nn.sigmoid(x),
    "Tanh": jnp.tanh,
    "Relu": lambda x: jnp.maximum(x, jnp.zeros((), x.dtype)),
    "Softplus": lambda x: jnp.logaddexp(x, jnp.zeros((), x.dtype)),
    "Softsign": lambda x: x / (1 + jnp.abs(x)),
    "Mish": lambda x: x * jnp.tanh(jnp.logaddexp(x, jnp.zeros((), x.dtype))),
    "HardSwish": lambda x: x * jnp.clip(x / 6 + 0.5, 0, 1).astype(x.dtype),
    "Identity": lambda x: x,
    "Not": jnp.logical_not,
    "BitwiseNot": jnp.invert,
    "IsNaN": jnp.isnan,
}


@op(*_UNARY)
def _unary(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = inputs[0]
    if ctx.node.op_type == "Identity":
        return [x]
    return [_UNARY[ctx.node.op_type](jnp.asarray(x))]


def _alpha(ctx: NodeContext, default: float) -> float:
    return float(ctx.attrs.get("alpha", default))


@op("LeakyRelu")
def _leaky_relu(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    return [jnp.where(x >= 0, x, x * _alpha(ctx, 0.01))]


@op("Elu")
def _elu(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    return [jnp.where(x > 0, x, _alpha(ctx, 1.0) * jnp.expm1(jnp.minimum(x, 0)))]


@op("Celu")
def _celu(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x, alpha = jnp.asarray(inputs[0]), _alpha(ctx, 1.0)
    return [jnp.maximum(x, 0) + jnp.minimum(0, alpha * jnp.expm1(jnp.minimum(x, 0) / alpha))]


@op("Selu")
def _selu(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    alpha = _alpha(ctx, 1.67326319217681884765625)
    gamma = float(ctx.attrs.get("gamma", 1.05070102214813232421875))
    return [gamma * jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))]


@op("HardSigmoid")
def _hard_sigmoid(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    beta = float(ctx.attrs.get("beta", 0.5))
    return [jnp.clip(_alpha(ctx, 0.2) * x + beta, 0, 1).astype(x.dtype)]


@op("ThresholdedRelu")
def _thresholded_relu(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    return [jnp.where(x > _alpha(ctx, 1.0), x, jnp.zeros((), x.dtype))]


@op("Shrink")
def _shrink(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    bias, lambd = float(ctx.attrs.get("bias", 0.0)), float(ctx.attrs.get("lambd", 0.5))
    zero = jnp.zeros((), x.dtype)
    return [jnp.where(x < -lambd, x + bias, jnp.where(x > lambd, x - bias, zero)).astype(x.dtype)]


@op("PRelu")
def _prelu(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x, slope = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    try:
        np.broadcast_shapes(shape_of(x), shape_of(slope))
    except ValueError:
        # before opset 7 a 1-D slope lies along the axis of its length (the channels)
        axes = [i for i, d in enumerate(shape_of(x)) if slope.ndim == 1 and d == slope.shape[0]]
        if ctx.opset >= 7 or len(axes) != 1:
            raise fail(
                ctx,
                f"slope of shape {shape_of(slope)} does not broadcast to X of shape {shape_of(x)}",
            ) from None
        slope = jnp.reshape(slope, [-1 if i == axes[0] else 1 for i in range(x.ndim)])
    return [jnp.where(x >= 0, x, x * slope)]


@op("IsInf")
def _is_inf(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    neg, pos = int(ctx.attrs.get("detect_negative", 1)), int(ctx.attrs.get("detect_positive", 1))
    return [(jnp.isneginf(x) & bool(neg)) | (jnp.isposinf(x) & bool(pos))]


@op("Clip")
def _clip(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    x = jnp.asarray(inputs[0])
    if ctx.opset < 11:
        low, high = ctx.attrs.get("min"), ctx.attrs.get("max")
    else:
        low = inputs[1] if len(inputs) > 1 else None
        high = inputs[2] if len(inputs) > 2 else None
    if low is not None:
        x = jnp.maximum(x, jnp.asarray(low, x.dtype))
    if high is not None:
        x = jnp.minimum(x, jnp.asarray(high, x.dtype))
    return [x]
