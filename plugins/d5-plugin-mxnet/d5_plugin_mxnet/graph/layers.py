"""Layers with weights or state: Conv, ConvTranspose, BatchNormalization, Dropout, LRN.

Conv is MXNet's ``Convolution`` (what Gluon's ``nn.Conv2D`` runs); ONNX pads that are
not the same on both sides of an axis become an explicit ``pad`` first.
BatchNormalization is MXNet's fused ``BatchNorm`` (``fix_gamma=False``), with the global
statistics in inference. In training MXNet updates its moving statistics in place during
the backward pass, with ONNX's convention (biased batch variance, ``momentum`` weighting
the old value): the node marks those inputs as ``aux``, and the executor feeds buffers
there, so the parameters change only when the running statistics are applied.
Dropout in training multiplies by the reference's mask
(``numpy.random.default_rng(seed).random(shape) >= ratio``, scaled), a constant drawn
once per shape, so it agrees with the numpy reference executor.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx

from d5_plugin_mxnet.graph.base import Context, Reader, Shape, Translated, Translation, node_error
from d5core.onnx import node_pads

__all__ = ["OPS", "explicit_pad", "reference_mask", "spatial_pads"]


def reference_mask(shape: Sequence[int], ratio: float, seed: int) -> npt.NDArray[Any]:
    """The keep mask of a training-mode Dropout as the numpy reference draws it."""
    return np.random.default_rng(seed).random(tuple(shape)) >= ratio


def spatial_pads(
    node: onnx.NodeProto, a: dict[str, Any], kernel: Sequence[int], x_shape: Shape
) -> tuple[list[int], list[int]]:
    """The padding before and after each spatial axis, ``auto_pad`` resolved."""
    begins, ends = node_pads(a, kernel, x_shape, op_type=node.op_type)
    return list(begins), list(ends)


def explicit_pad(
    ctx: Context,
    node: onnx.NodeProto,
    x: Any,
    begins: Sequence[int],
    ends: Sequence[int],
    value: float = 0.0,
) -> Any:
    """``x`` padded by ``begins``/``ends`` on its spatial axes (``value`` outside)."""
    rank = len(ctx.shapes[0])
    if rank not in (4, 5):
        raise node_error(node, f"uneven pads need a 2-d or 3-d input for MXNet, not rank {rank}")
    width = [0, 0, 0, 0]
    for b, e in zip(begins, ends, strict=True):
        width += [int(b), int(e)]
    return ctx.F.pad(x, mode="constant", pad_width=tuple(width), constant_value=value)


def _conv(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    group = int(a.get("group", 1))

    def conv(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        x, w = xs[0], xs[1]
        b = xs[2] if len(xs) > 2 else None
        w_shape = ctx.shapes[1]
        n = len(w_shape) - 2
        kernel = [int(k) for k in (a.get("kernel_shape") or w_shape[2:])]
        begins, ends = spatial_pads(node, a, kernel, ctx.shapes[0])
        if begins != ends:
            x, begins = explicit_pad(ctx, node, x, begins, ends), [0] * n
        return [
            ctx.F.Convolution(
                x,
                w,
                b,
                kernel=tuple(kernel),
                stride=tuple(a.get("strides") or [1] * n),
                dilate=tuple(a.get("dilations") or [1] * n),
                pad=tuple(begins),
                num_filter=int(w_shape[0]),
                num_group=group,
                no_bias=b is None,
            )
        ]

    return Translated(conv, [i for i in node.input[:3] if i])


def _conv_transpose(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    if a.get("output_shape") is not None or a.get("auto_pad", "NOTSET") != "NOTSET":
        raise node_error(
            node, "output_shape and auto_pad are not supported by the mxnet executor; give pads"
        )
    group = int(a.get("group", 1))

    def conv_t(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        x, w = xs[0], xs[1]
        b = xs[2] if len(xs) > 2 else None
        w_shape = ctx.shapes[1]
        n = len(w_shape) - 2
        kernel = tuple(int(k) for k in (a.get("kernel_shape") or w_shape[2:]))
        strides = tuple(int(s) for s in (a.get("strides") or [1] * n))
        dilations = tuple(int(d) for d in (a.get("dilations") or [1] * n))
        pads = [int(p) for p in (a.get("pads") or [0] * 2 * n)]
        adj = tuple(int(p) for p in (a.get("output_padding") or [0] * n))
        y = ctx.F.Deconvolution(
            x,
            w,
            b,
            kernel=kernel,
            stride=strides,
            dilate=dilations,
            pad=(0,) * n,
            adj=adj,
            num_filter=int(w_shape[1]) * group,
            num_group=group,
            no_bias=b is None,
        )
        if not any(pads):
            return [y]
        for axis in range(n):  # crop ONNX's pads from the full output
            full = (
                (ctx.shapes[0][2 + axis] - 1) * strides[axis]
                + adj[axis]
                + (kernel[axis] - 1) * dilations[axis]
                + 1
            )
            begin, end = pads[axis], full - pads[axis + n]
            y = ctx.F.slice_axis(y, axis=2 + axis, begin=begin, end=end)
        return [y]

    return Translated(conv_t, [i for i in node.input[:3] if i])


def _batch_norm(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    if not int(a.get("spatial", 1)):  # opset < 9: statistics per element, not per channel
        raise node_error(
            node, "spatial=0 (per-element statistics) is not supported by the mxnet executor"
        )
    eps, momentum = float(a.get("epsilon", 1e-5)), float(a.get("momentum", 0.9))
    if len([o for o in node.output if o]) > 1:
        raise node_error(
            node, "the mean and variance outputs are not supported by the mxnet executor"
        )
    training = tr.training

    def batch_norm(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        x, scale, bias, mean, var = xs
        return [
            ctx.F.BatchNorm(
                x,
                scale,
                bias,
                mean,
                var,
                eps=eps,
                momentum=momentum,
                fix_gamma=False,
                use_global_stats=not training,
                axis=1,
            )
        ]

    return Translated(batch_norm, list(node.input[:5]), aux=(3, 4) if training else ())


def _dropout(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    with_mask = len(node.output) > 1 and bool(node.output[1])
    given = tr.static(node, 1)
    ratio = float(given.reshape(-1)[0]) if given is not None else float(a.get("ratio", 0.5))
    if not 0.0 <= ratio < 1.0:
        raise node_error(node, f"ratio must lie in [0, 1), not {ratio}")
    if not tr.training:
        ratio = 0.0
    seed = int(a.get("seed", 0))

    def dropout(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        x, shape, dtype = xs[0], ctx.shapes[0], ctx.dtypes[0]
        if ratio == 0.0:
            mask = ctx.F.ones_like(x) if with_mask else None
            return [x, mask] if with_mask else [x]
        keep = reference_mask(shape, ratio, seed)
        scaled = ctx.constant(f"scale{shape}", (keep / (1.0 - ratio)).astype(dtype))
        y = ctx.F.elemwise_mul(x, scaled)
        if not with_mask:
            return [y]
        return [y, ctx.constant(f"mask{shape}", keep.astype(np.uint8))]

    return Translated(dropout, [node.input[0]])


def _lrn(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    size = int(a["size"])
    alpha, beta = float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75))
    bias = float(a.get("bias", 1.0))
    lo = (size - 1) // 2
    hi = size - 1 - lo

    def lrn(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        x, shape, F = xs[0], ctx.shapes[0], ctx.F
        if size % 2 == 1 and ctx.dtypes[0] == np.float32:  # MXNet's kernel: float32 only
            return [F.LRN(x, alpha=alpha, beta=beta, knorm=bias, nsize=size)]
        channels = shape[1]
        sq = F.square(x)
        zeros = F.zeros_like(F.slice_axis(sq, axis=1, begin=0, end=1))
        padded = F.concat(*([zeros] * lo), sq, *([zeros] * hi), dim=1) if size > 1 else sq
        windows = [F.slice_axis(padded, axis=1, begin=i, end=i + channels) for i in range(size)]
        total = F.add_n(*windows) if size > 1 else windows[0]
        return [x * (bias + (alpha / size) * total) ** (-beta)]

    return Translated(lrn, [node.input[0]])


#: The translation of every operator type of this family.
OPS: dict[str, Translation] = {
    "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "BatchNormalization": _batch_norm,
    "Dropout": _dropout,
    "LRN": _lrn,
}
