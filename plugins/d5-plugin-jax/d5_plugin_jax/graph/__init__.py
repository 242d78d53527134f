"""ONNX operators as JAX functions, registered in :data:`.registry.REGISTRY`.

Importing this package registers every translation: :mod:`.arithmetic` (element-wise
arithmetic, comparison and logic), :mod:`.activations` (element-wise math and
activations), :mod:`.casts` (Cast, CastLike, Constant), :mod:`.shaping` (shape
operators), :mod:`.windows` (convolution and pooling), :mod:`.normalization` (batch,
instance and local response normalization, Dropout), :mod:`.linalg` (Gemm, MatMul),
:mod:`.reductions` (reductions, arg-max/min, the softmax family), :mod:`.losses` (the
loss operators), :mod:`.sequence` (recurrent operators), :mod:`.attention` (transformer
operators) and :mod:`.extra` (the long tail). Each operator type is registered by one
module.
"""

from __future__ import annotations

from d5_plugin_jax.graph import (
    activations,
    arithmetic,
    attention,
    casts,
    extra,
    linalg,
    losses,
    normalization,
    reductions,
    sequence,
    shaping,
    windows,
)
from d5_plugin_jax.graph.registry import REGISTRY, NodeContext, OpFn, op

__all__ = [
    "REGISTRY",
    "NodeContext",
    "OpFn",
    "activations",
    "arithmetic",
    "attention",
    "casts",
    "extra",
    "linalg",
    "losses",
    "normalization",
    "op",
    "reductions",
    "sequence",
    "shaping",
    "windows",
]
