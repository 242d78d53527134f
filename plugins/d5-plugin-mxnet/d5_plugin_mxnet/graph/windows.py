"""Pooling windows: MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool.

All run MXNet's ``Pooling`` (what Gluon's pooling layers run). Its padding is the same
on both sides of an axis; other ONNX pads become an explicit ``pad`` first (with
``-inf`` for MaxPool; for AveragePool without ``count_include_pad`` the sums are then
divided by the number of real elements in each window). ``ceil_mode`` is MXNet's
``full`` pooling convention.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import onnx

from d5_plugin_mxnet.graph.base import Context, Reader, Translated, Translation, node_error
from d5_plugin_mxnet.graph.layers import explicit_pad, spatial_pads

__all__ = ["OPS"]


def _window(node: onnx.NodeProto, a: dict[str, Any]) -> tuple[list[int], list[int], str]:
    kernel = [int(k) for k in a["kernel_shape"]]
    n = len(kernel)
    if any(int(d) != 1 for d in a.get("dilations") or [1] * n):
        raise node_error(node, "dilations are not supported by MXNet's pooling; use 1")
    if not 1 <= n <= 3:
        raise node_error(node, f"MXNet pools 1 to 3 spatial axes, not {n}")
    strides = [int(s) for s in a.get("strides") or [1] * n]
    convention = "full" if int(a.get("ceil_mode", 0)) else "valid"
    return kernel, strides, convention


def _floating(node: onnx.NodeProto, ctx: Context) -> None:
    """MXNet pools floating-point tensors only, and reports any other dtype from its
    engine thread, where the error outlives the call (it is raised again when the
    process exits): refuse it before MXNet sees it."""
    dtype = ctx.dtypes[0]
    if dtype is not None and dtype.kind != "f":
        raise node_error(node, f"MXNet pools floating-point tensors only, not {dtype}; cast first")


def _max_pool(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    if len([o for o in node.output if o]) > 1:
        raise node_error(node, "the Indices output is not supported by the mxnet executor")
    kernel, strides, convention = _window(node, a)

    def max_pool(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        _floating(node, ctx)
        x = xs[0]
        begins, ends = spatial_pads(node, a, kernel, ctx.shapes[0])
        if begins != ends:
            x, begins = explicit_pad(ctx, node, x, begins, ends, float("-inf")), [0] * len(kernel)
        return [
            ctx.F.Pooling(
                x,
                kernel=tuple(kernel),
                stride=tuple(strides),
                pad=tuple(begins),
                pool_type="max",
                pooling_convention=convention,
            )
        ]

    return Translated(max_pool, [node.input[0]])


def _average_pool(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    kernel, strides, convention = _window(node, a)
    include = bool(int(a.get("count_include_pad", 0)))

    def average_pool(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        _floating(node, ctx)
        x, F = xs[0], ctx.F
        begins, ends = spatial_pads(node, a, kernel, ctx.shapes[0])

        def pool(value: Any, pads: Sequence[int], count_pad: bool) -> Any:
            return F.Pooling(
                value,
                kernel=tuple(kernel),
                stride=tuple(strides),
                pad=tuple(pads),
                pool_type="avg",
                pooling_convention=convention,
                count_include_pad=count_pad,
            )

        if begins == ends:
            return [pool(x, begins, include)]
        zero = [0] * len(kernel)
        total = pool(explicit_pad(ctx, node, x, begins, ends), zero, True)
        if include:
            return [total]
        ones = explicit_pad(ctx, node, F.ones_like(x), begins, ends)
        return [total / pool(ones, zero, True)]

    return Translated(average_pool, [node.input[0]])


def _global(pool_type: str) -> Translation:
    def translate(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
        def global_pool(ctx: Context, xs: Sequence[Any]) -> list[Any]:
            _floating(node, ctx)
            n = len(ctx.shapes[0]) - 2
            if not 1 <= n <= 3:
                raise node_error(node, f"MXNet pools 1 to 3 spatial axes, not {n}")
            return [ctx.F.Pooling(xs[0], kernel=(1,) * n, global_pool=True, pool_type=pool_type)]

        return Translated(global_pool, [node.input[0]])

    return translate


#: The translation of every operator type of this family.
OPS: dict[str, Translation] = {
    "MaxPool": _max_pool,
    "AveragePool": _average_pool,
    "GlobalAveragePool": _global("avg"),
    "GlobalMaxPool": _global("max"),
}
