"""Helpers shared by the long-tail operators: the JAX modules, numpy-or-JAX
choice, axis normalization and attribute text.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from d5_plugin_jax import _jax
from d5_plugin_jax.graph.attention import all_static, where_of
from d5_plugin_jax.graph.registry import NodeContext
from d5core.api import UsageError

__all__ = ["axis_index", "jax", "jnp", "text", "xp_for"]

jax = _jax.jax()
jnp = jax.numpy


def xp_for(*values: Any) -> Any:
    """numpy for values known while tracing, else ``jax.numpy``."""
    return np if all_static(*values) else jnp


def axis_index(ctx: NodeContext, axis: int, rank: int) -> int:
    if not -rank <= axis < max(rank, 1):
        raise UsageError(f"{where_of(ctx)}: axis {axis} is out of range for rank {rank}")
    return axis % rank if rank else 0


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
