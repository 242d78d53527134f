"""Quantization and reinterpretation: QuantizeLinear, DequantizeLinear,
DynamicQuantizeLinear, MatMulInteger, QLinearMatMul and BitCast."""

from __future__ import annotations

from typing import Any

import onnx
import torch

from d5_plugin_torch.graph_ops.base import Tensor, Translation, TranslatorBase, onnx_dtype
from d5core.api import UsageError

__all__ = ["QuantizeOps"]

#: The range of each integer type values are quantized into.
_INTEGER_RANGES = {
    torch.uint8: (0, 255),
    torch.int8: (-128, 127),
    torch.int16: (-32768, 32767),
    **({torch.uint16: (0, 65535)} if hasattr(torch, "uint16") else {}),
}


def _per_axis(value: Tensor, shape: torch.Size, axis: int, block: int) -> Tensor:
    """A scale or zero point, broadcastable to ``shape``: a scalar as it is, a vector
    along ``axis``, a blocked tensor repeated ``block`` times along ``axis``."""
    if value.dim() == 0 or value.numel() == 1:
        return value.reshape(())
    ax = axis % len(shape)
    if not block:
        dims = [1] * len(shape)
        dims[ax] = value.numel()
        return value.reshape(dims)
    return value.repeat_interleave(block, ax).narrow(ax, 0, shape[ax])


class QuantizeOps(TranslatorBase):
    """Translators of quantization operators and BitCast."""

    def op_QuantizeLinear(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis, block = int(a.get("axis", 1)), int(a.get("block_size", 0))
        saturate = bool(int(a.get("saturate", 1)))
        declared = onnx_dtype(int(a["output_dtype"])) if a.get("output_dtype") else None
        precision = onnx_dtype(int(a["precision"])) if a.get("precision") else None

        def quantize(x: Tensor, scale: Tensor, zero: Tensor | None = None) -> tuple[Tensor]:
            out = zero.dtype if zero is not None else declared or torch.uint8
            s = _per_axis(scale, x.shape, axis, block)
            q = x.to(precision) / s.to(precision) if precision is not None else x / s
            bounds = _INTEGER_RANGES.get(out)
            if bounds is None:  # float8: no zero point, a (saturating) cast
                if out.is_floating_point and out.itemsize == 1:
                    info = torch.finfo(out)
                    return ((torch.clamp(q, info.min, info.max) if saturate else q).to(out),)
                raise UsageError(f"QuantizeLinear cannot quantize into {out}")
            qi = torch.round(q).to(torch.int32)
            if zero is not None:
                qi = qi + _per_axis(zero, x.shape, axis, block).to(torch.int32)
            return (torch.clamp(qi, *bounds).to(out),)

        return quantize, list(node.input[:3])

    def op_DequantizeLinear(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis, block = int(a.get("axis", 1)), int(a.get("block_size", 0))
        declared = onnx_dtype(int(a["output_dtype"])) if a.get("output_dtype") else None

        def dequantize(x: Tensor, scale: Tensor, zero: Tensor | None = None) -> tuple[Tensor]:
            dx = x.to(torch.float32)
            if zero is not None and not (x.is_floating_point() and x.element_size() == 1):
                dx = dx - _per_axis(zero, x.shape, axis, block).to(torch.float32)
            y = dx * _per_axis(scale, x.shape, axis, block)
            return (y.to(declared or scale.dtype),)

        return dequantize, list(node.input[:3])

    def op_DynamicQuantizeLinear(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        def dynamic(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
            xf = x.to(torch.float32)
            hi = torch.clamp(xf.max(), min=0.0)
            lo = torch.clamp(xf.min(), max=0.0)
            scale = torch.where(hi == lo, torch.ones_like(hi), hi - lo) / 255.0
            zero = torch.round(torch.clamp(-lo / scale, 0.0, 255.0))
            y = torch.clamp(torch.round(xf / scale) + zero, 0.0, 255.0)
            return y.to(torch.uint8), scale.to(x.dtype), zero.to(torch.uint8)

        return dynamic, [node.input[0]]

    def op_BitCast(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        to = onnx_dtype(int(a["to"]))

        def bitcast(x: Tensor) -> Tensor:
            if x.element_size() != to.itemsize:
                raise UsageError(
                    f"BitCast needs types of one width: {x.dtype} has "
                    f"{8 * x.element_size()} bits, {to} {8 * to.itemsize}"
                )
            return x.view(to)

        return self._unary(node, bitcast)

    def op_MatMulInteger(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        def matmul_integer(
            x: Tensor, y: Tensor, x_zero: Tensor | None = None, y_zero: Tensor | None = None
        ) -> tuple[Tensor]:
            xs, ys = x.to(torch.int64), y.to(torch.int64)
            if x_zero is not None:  # per row of x when a vector
                xs = xs - (
                    x_zero.to(torch.int64).reshape(-1, 1)
                    if x_zero.dim()
                    else x_zero.to(torch.int64)
                )
            if y_zero is not None:  # per column of y
                ys = ys - y_zero.to(torch.int64)
            return (torch.matmul(xs, ys).to(torch.int32),)

        return matmul_integer, list(node.input[:4])

    def op_QLinearMatMul(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        def qlinear_matmul(*xs: Tensor | None) -> tuple[Tensor]:
            qa, sa, za, qb, sb, zb, sy, zy = xs
            assert qa is not None and sa is not None and qb is not None and sb is not None
            assert sy is not None
            ia, ib = qa.to(torch.int64), qb.to(torch.int64)
            if za is not None:
                ia = ia - za.to(torch.int64)
            if zb is not None:
                ib = ib - zb.to(torch.int64)
            factor = sa.to(torch.float64) * sb.to(torch.float64) / sy.to(torch.float64)
            y = torch.matmul(ia, ib).to(torch.float64) * factor
            out = qa.dtype if zy is None else zy.dtype
            if zy is not None:
                y = y + zy.to(torch.float64)
            info = torch.iinfo(out)
            return (torch.clamp(torch.round(y), info.min, info.max).to(out),)

        return qlinear_matmul, list(node.input[:8])
