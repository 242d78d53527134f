"""The table of ONNX operator translations the JAX graph program reads.

Each translation is a plain function ``fn(ctx, inputs) -> outputs``: ``ctx`` is the
:class:`NodeContext` of one node, ``inputs`` its inputs in order (a ``jax.Array``, a
``numpy.ndarray`` for a value known while tracing, or ``None`` for an omitted
optional input), and the result the node's outputs in order.  A translation whose
inputs are all numpy arrays computes in numpy, so that shape arithmetic stays static
under ``jax.jit``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from d5core.api import UsageError

__all__ = [
    "CHECKS",
    "REGISTRY",
    "CheckFn",
    "NodeContext",
    "OpFn",
    "check",
    "is_static",
    "op",
    "static_value",
]


@dataclass(frozen=True)
class NodeContext:
    """What a translation knows about the node it translates."""

    node: onnx.NodeProto
    attrs: Mapping[str, Any]  # decoded attributes (tensors as numpy arrays)
    training: bool  # training mode (Dropout masks, BatchNorm batch statistics)
    rng: Any | None  # a jax PRNG key for this node in training, else None
    opset: int  # the graph's default-domain opset
    #: the values computed so far, by name (what a control-flow node's subgraph reads
    #: from the outer graph); empty where none is given
    scope: Mapping[str, Any] = field(default_factory=dict)


OpFn = Callable[[NodeContext, Sequence[Any]], Sequence[Any]]

REGISTRY: dict[str, OpFn] = {}

#: A check of one node's attributes, run when the executor is built (``ctx.training`` is
#: false and ``ctx.rng`` None then): it raises a UsageError for a node the translation
#: would refuse, so that the refusal comes before anything runs.
CheckFn = Callable[[NodeContext], None]

CHECKS: dict[str, CheckFn] = {}


def op(*op_types: str) -> Callable[[OpFn], OpFn]:
    """Register the decorated function as the translation of ``op_types``."""

    def register(fn: OpFn) -> OpFn:
        for op_type in op_types:
            REGISTRY[op_type] = fn
        return fn

    return register


def check(*op_types: str) -> Callable[[CheckFn], CheckFn]:
    """Register the decorated function as the build-time check of ``op_types``."""

    def register(fn: CheckFn) -> CheckFn:
        for op_type in op_types:
            CHECKS[op_type] = fn
        return fn

    return register


def is_static(value: Any) -> bool:
    """Whether ``value`` is known while tracing (a numpy array or a Python number)."""
    return isinstance(value, (np.ndarray, np.generic, int, float, bool))


def static_value(ctx: NodeContext, value: Any, what: str) -> np.ndarray:
    """``value`` as a numpy array, which it must be: an input ``what`` the node needs
    while the graph is traced (a shape, axes, a ratio).

    :raises UsageError: naming the node when ``value`` is only known at run time.
    """
    if not is_static(value):
        raise UsageError(
            f"node {ctx.node.name!r} ({ctx.node.op_type}): its {what} must be known when the "
            "graph is traced (a constant, an initializer, a fed input, or computed from those "
            "and from shapes)"
        )
    return np.asarray(value)
