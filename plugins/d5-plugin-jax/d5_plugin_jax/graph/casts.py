"""Cast, CastLike and Constant as JAX functions.

A cast follows ONNX: narrow integer types (int4, uint4, int2, uint2) truncate toward zero
and wrap to their bits, and float8 types saturate to their largest finite value unless
the node's ``saturate`` is 0.  A value known while tracing stays a numpy array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from d5_plugin_jax.graph._common import Out, fail, jnp
from d5_plugin_jax.graph.registry import NodeContext, is_static, op
from d5core.onnx import constant_value

__all__: list[str] = []  # importing the module registers its translations


def _onnx_dtype(ctx: NodeContext, code: int) -> np.dtype[Any]:
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(int(code)))
    except Exception:
        raise fail(ctx, f"element type {code} has no numpy equivalent") from None


#: Narrow integer types: values are truncated toward zero and wrapped to their bits (as
#: onnx's reference evaluator and d5's reference cast them).
_NARROW_INTS = {"int4": (4, True), "uint4": (4, False), "int2": (2, True), "uint2": (2, False)}


def _cast_to(ctx: NodeContext, x: Any, dtype: np.dtype[Any]) -> Any:
    """``x`` as ``dtype`` as ONNX's Cast converts: narrow integers wrap, float8 types
    saturate to their largest finite value unless ``saturate`` is 0."""
    xp: Any = np if is_static(x) else jnp
    x = xp.asarray(x)
    if dtype.name in _NARROW_INTS and x.dtype.kind == "f":
        bits, signed = _NARROW_INTS[dtype.name]
        whole = xp.where(xp.isfinite(x), xp.trunc(x), 0).astype(np.int64)
        span = 1 << bits
        wrapped = (whole + span // 2) % span - span // 2 if signed else whole % span
        return wrapped.astype(dtype)
    saturate = int(ctx.attrs.get("saturate", 1))
    if dtype.name.startswith("float8") and x.dtype.kind == "f" and saturate:
        top = float(jnp.finfo(dtype).max)
        x = xp.clip(x, -top, top)
    return x.astype(dtype)


@op("Cast")
def _cast(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    return [_cast_to(ctx, inputs[0], _onnx_dtype(ctx, int(ctx.attrs["to"])))]


@op("CastLike")
def _cast_like(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    return [_cast_to(ctx, inputs[0], np.dtype(inputs[1].dtype))]


@op("Constant")
def _constant(ctx: NodeContext, inputs: Sequence[Any]) -> Out:
    return [constant_value(ctx.node, [])]
