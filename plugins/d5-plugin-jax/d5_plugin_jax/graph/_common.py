"""What the common operator translations share: the JAX modules, the type of a
translation's result and small readers of a node's shapes, attributes and errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from d5_plugin_jax.graph.program import jax_module
from d5_plugin_jax.graph.registry import NodeContext, static_value
from d5core.api import UsageError

__all__ = ["Out", "axes_input", "fail", "ints", "jax", "jnp", "lax", "shape_of"]

jax = jax_module()
jnp = jax.numpy
lax = jax.lax

#: a translation's result: the node's outputs in order
Out = list[Any]


def shape_of(x: Any) -> tuple[int, ...]:
    """The shape of ``x`` (a JAX or numpy array, or a number) as Python ints."""
    return tuple(int(d) for d in np.shape(x))


def fail(ctx: NodeContext, message: str) -> UsageError:
    """A UsageError naming the node of ``ctx``, to raise."""
    return UsageError(f"node {ctx.node.name!r} ({ctx.node.op_type}): {message}")


def ints(ctx: NodeContext, name: str) -> list[int] | None:
    """The node's attribute ``name`` as a list of ints, or None when it is not set."""
    value = ctx.attrs.get(name)
    return None if value is None else [int(v) for v in np.ravel(value)]


def axes_input(ctx: NodeContext, inputs: Sequence[Any], since: int) -> Any:
    """The ``axes`` of a node: an attribute before opset ``since``, else input 1."""
    if ctx.opset < since:
        axes = ints(ctx, "axes")
        return None if axes is None else np.asarray(axes, np.int64)
    if len(inputs) > 1 and inputs[1] is not None:
        return static_value(ctx, inputs[1], "axes")
    return None
