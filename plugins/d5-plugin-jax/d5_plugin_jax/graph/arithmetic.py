"""Element-wise arithmetic, comparison and logic operators as JAX functions: Add,
Sub, Mul, Div, Pow, Mod, Sum, Max, Min, Mean, the comparisons, the logical and bitwise
operators and BitShift.

Integer Div truncates toward zero (as d5's numpy reference does), and opsets before 7
broadcast the second input of Add, Sub, Mul, Div and the comparisons by the node's
``broadcast`` and ``axis`` attributes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from d5_plugin_jax.graph._common import Out, fail, jnp, lax, shape_of
from d5_plugin_jax.graph.registry import NodeContext, op
from d5core.onnx import legacy_broadcast, legacy_broadcast_shape

__all__: list[str] = []  # importing the module registers its translations


def _legacy(ctx: NodeContext, a: Any, b: Any) -> Any:
    """``b`` laid out to broadcast against ``a`` as opsets 1-6 say."""
    found = legacy_broadcast(ctx.node.op_type, ctx.opset, ctx.attrs)
    if found is None:
        return b
    broadcast, axis = found
    shape = legacy_broadcast_shape(shape_of(a), shape_of(b), broadcast=broadcast, axis=axis)
    return jnp.reshape(b, shape)


def _div(a: Any, b: Any) -> Any:
    if jnp.issubdtype(a.dtype, jnp.integer):
        return lax.div(a, b.astype(a.dtype))
    return a / b


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": _div,
}


@op("Add", "Sub", "Mul", "Div")
def _arithmetic(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    a, b = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    b = _legacy(ctx, a, b)
    if a.dtype != b.dtype:
        raise fail(ctx, f"inputs have different element types {a.dtype} and {b.dtype}")
    return [_BINARY[ctx.node.op_type](a, b)]


@op("Pow")
def _pow(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    a, b = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    if jnp.issubdtype(a.dtype, jnp.integer) and not jnp.issubdtype(b.dtype, jnp.integer):
        return [jnp.power(a.astype(b.dtype), b).astype(a.dtype)]
    return [jnp.power(a, b.astype(a.dtype))]


@op("Mod")
def _mod(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    a, b = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    if int(ctx.attrs.get("fmod", 0)):
        return [jnp.fmod(a, b)]
    return [jnp.mod(a, b)]  # the sign of the divisor, as Python's %


def _variadic(fn: Callable[[Any, Any], Any]) -> Callable[[NodeContext, Sequence[Any]], Out]:
    def run(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
        values = [jnp.asarray(x) for x in inputs if x is not None]
        result = values[0]
        for x in values[1:]:
            result = fn(result, x)
        return [result]

    return run


op("Sum")(_variadic(lambda a, b: a + b))
op("Max")(_variadic(jnp.maximum))
op("Min")(_variadic(jnp.minimum))


@op("Mean")
def _mean(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    values = [jnp.asarray(x) for x in inputs if x is not None]
    total = values[0]
    for x in values[1:]:
        total = total + x
    return [(total / len(values)).astype(values[0].dtype)]


_COMPARE: dict[str, Callable[[Any, Any], Any]] = {
    "Equal": jnp.equal,
    "Greater": jnp.greater,
    "GreaterOrEqual": jnp.greater_equal,
    "Less": jnp.less,
    "LessOrEqual": jnp.less_equal,
    "And": jnp.logical_and,
    "Or": jnp.logical_or,
    "Xor": jnp.logical_xor,
    "BitwiseAnd": jnp.bitwise_and,
    "BitwiseOr": jnp.bitwise_or,
    "BitwiseXor": jnp.bitwise_xor,
}


@op(*_COMPARE)
def _compare(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    a, b = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    return [_COMPARE[ctx.node.op_type](a, _legacy(ctx, a, b))]


@op("BitShift")
def _bit_shift(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    a, b = jnp.asarray(inputs[0]), jnp.asarray(inputs[1])
    if str(ctx.attrs.get("direction", "")) == "LEFT":
        return [jnp.left_shift(a, b)]
    return [jnp.right_shift(a, b)]
