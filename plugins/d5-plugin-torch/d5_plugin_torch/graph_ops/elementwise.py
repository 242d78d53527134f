"""Element-wise operators: math functions, activations, comparisons, logic, bit
operations, variadic Max/Min/Mean, Pow, Mod, Clip, Where, Cast and CastLike."""

from __future__ import annotations

import math
from functools import reduce
from typing import Any

import onnx
import torch
import torch.nn.functional as F

from d5_plugin_torch.graph_ops.base import (
    One,
    Tensor,
    Translation,
    TranslatorBase,
    onnx_dtype,
    unary_method,
    unsigned_safe,
)
from d5core.api import UsageError

__all__ = ["ElementwiseOps"]

_UINT = {getattr(torch, f"uint{n}"): n for n in (16, 32, 64) if hasattr(torch, f"uint{n}")}
_UINT[torch.uint8] = 8


def _legacy_slope(node: onnx.NodeProto, x: Tensor, s: Tensor) -> Tensor:
    """PRelu's slope before opset 7, shaped to multiply ``x``: as numpy broadcasts it
    when it can; else a 1-d slope lies along the one axis of ``x`` of its length (the
    channels of a per-channel slope), as onnx.reference reads it."""
    if s.dim() <= x.dim() and all(
        d in (1, e) for d, e in zip(reversed(s.shape), reversed(x.shape), strict=False)
    ):
        return s
    axes = [i for i, d in enumerate(x.shape) if s.dim() == 1 and d == s.shape[0]]
    if len(axes) != 1:
        raise UsageError(
            f"node {node.name!r} (PRelu): slope of shape {list(s.shape)} fits no single "
            f"axis of X of shape {list(x.shape)}"
        )
    shape = [1] * x.dim()
    shape[axes[0]] = s.shape[0]
    return s.reshape(shape)


def _float(fn: One) -> One:
    """``fn`` of one tensor; integer tensors go through float64 and back (a numpy-like
    result for Abs of ints would not need it, but Sqrt or Exp of ints do)."""

    def run(x: Tensor) -> Tensor:
        if x.is_floating_point():
            return fn(x)
        return fn(x.to(torch.float64)).to(x.dtype)

    return run


def _sign(x: Tensor) -> Tensor:
    return torch.sign(x) if x.dtype != torch.bool else x


def _selu(alpha: float, gamma: float) -> Any:
    return lambda x: gamma * torch.where(x > 0, x, alpha * torch.expm1(x))


def _shift(x: Tensor, s: Tensor, left: bool) -> Tensor:
    """BitShift: logical for unsigned integers, arithmetic (numpy's ``>>``) for signed."""
    bits = _UINT.get(x.dtype)
    if bits is None or bits == 8:
        return x << s if left else x >> s
    if bits < 64:
        wide, shift = x.to(torch.int64), s.to(torch.int64)
        out = (wide << shift) if left else (wide >> shift)
        return (out & ((1 << bits) - 1)).to(x.dtype)
    v, shift = x.view(torch.int64), s.view(torch.int64)
    if left:
        return (v << shift).view(x.dtype)
    low = ((1 << 63) - 1) >> (shift - 1).clamp(min=0)  # the 64 - shift low bits
    return torch.where(shift == 0, v, (v >> shift) & low).view(x.dtype)


def _bitwise(fn: One) -> One:
    """A bitwise function also for unsigned types torch has no kernels for: on the bits
    viewed as the signed type of the same width (bitwise results do not depend on it)."""
    signed = {t: getattr(torch, f"int{n}") for t, n in _UINT.items() if n > 8}

    def run(*xs: Tensor) -> Tensor:
        to = signed.get(xs[0].dtype)
        if to is None:
            return fn(*xs)
        return fn(*(x.view(to) for x in xs)).view(xs[0].dtype)

    return run


def _mod(fmod: bool) -> Any:
    def run(x: Tensor, y: Tensor) -> Tensor:
        if fmod:
            return torch.fmod(x, y)
        if x.is_floating_point():  # numpy's mod: the sign of y, x itself for y = +-inf
            r = torch.remainder(x, y)
            keep = torch.isinf(y) & torch.isfinite(x) & ((x == 0) | ((x < 0) == (y < 0)))
            return torch.where(keep, x, r)
        return torch.remainder(x, y)

    return unsigned_safe(run)


def _pow(x: Tensor, y: Tensor) -> Tensor:
    """ONNX Pow: the result has X's type, whatever Y's."""
    if x.is_floating_point():
        return torch.pow(x, y if y.dtype == x.dtype or not y.is_floating_point() else y.to(x.dtype))
    return torch.pow(x.to(torch.float64), y.to(torch.float64)).to(x.dtype)


_FLOAT8 = frozenset(
    getattr(torch, n)
    for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, n)
)


def _cast(dtype: torch.dtype, saturate: bool) -> Any:
    """Cast to ``dtype``; to a float8 type, values out of its range become its extreme
    (``saturate``) or, without saturation, infinity where the type has one, else NaN."""
    if dtype not in _FLOAT8:
        return lambda x: x.to(dtype)
    info = torch.finfo(dtype)
    has_inf = dtype == getattr(torch, "float8_e5m2", None)

    def cast(x: Tensor) -> Tensor:
        if not x.is_floating_point():
            x = x.to(torch.float32)
        if saturate:
            return torch.clamp(x, info.min, info.max).to(dtype)
        over = torch.abs(x) > info.max
        far = (
            torch.copysign(torch.full_like(x, math.inf), x)
            if has_inf
            else torch.full_like(x, math.nan)
        )
        return torch.where(over, far, x).to(dtype)

    return cast


class ElementwiseOps(TranslatorBase):
    """Translators of element-wise operators."""

    # -- one input, no attributes ------------------------------------------------
    op_Abs = unary_method(torch.abs)
    op_Neg = unary_method(torch.neg)
    op_Floor = unary_method(torch.floor)
    op_Ceil = unary_method(torch.ceil)
    op_Round = unary_method(torch.round)
    op_Sign = unary_method(_sign)
    op_Reciprocal = unary_method(torch.reciprocal)
    op_Sin = unary_method(torch.sin)
    op_Cos = unary_method(torch.cos)
    op_Tan = unary_method(torch.tan)
    op_Asin = unary_method(torch.asin)
    op_Acos = unary_method(torch.acos)
    op_Atan = unary_method(torch.atan)
    op_Sinh = unary_method(torch.sinh)
    op_Cosh = unary_method(torch.cosh)
    op_Asinh = unary_method(torch.asinh)
    op_Acosh = unary_method(torch.acosh)
    op_Atanh = unary_method(torch.atanh)
    op_Exp = unary_method(_float(torch.exp))
    op_Log = unary_method(_float(torch.log))
    op_Sqrt = unary_method(_float(torch.sqrt))
    op_Erf = unary_method(_float(torch.erf))
    op_Softplus = unary_method(lambda x: torch.log1p(torch.exp(x)))
    op_Softsign = unary_method(lambda x: x / (1 + torch.abs(x)))
    op_Mish = unary_method(lambda x: x * torch.tanh(F.softplus(x)))
    op_HardSwish = unary_method(F.hardswish)
    op_IsNaN = unary_method(torch.isnan)
    op_Not = unary_method(torch.logical_not)
    op_BitwiseNot = unary_method(_bitwise(torch.bitwise_not))

    # -- one input with attributes -------------------------------------------------
    def op_Elu(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        alpha = float(a.get("alpha", 1.0))
        return self._unary(node, lambda x: torch.where(x > 0, x, alpha * torch.expm1(x)))

    def op_Celu(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        alpha = float(a.get("alpha", 1.0))
        return self._unary(node, lambda x: F.celu(x, alpha))

    def op_Selu(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        alpha = float(a.get("alpha", 1.67326319217681884765625))
        gamma = float(a.get("gamma", 1.05070102214813232421875))
        return self._unary(node, _selu(alpha, gamma))

    def op_HardSigmoid(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        alpha, beta = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))
        return self._unary(node, lambda x: torch.clamp(alpha * x + beta, 0.0, 1.0))

    def op_ThresholdedRelu(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        alpha = float(a.get("alpha", 1.0))
        return self._unary(node, lambda x: torch.where(x > alpha, x, torch.zeros_like(x)))

    def op_Shrink(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        bias, lambd = float(a.get("bias", 0.0)), float(a.get("lambd", 0.5))

        def shrink(x: Tensor) -> Tensor:
            zero = torch.zeros_like(x)
            return torch.where(x < -lambd, x + bias, torch.where(x > lambd, x - bias, zero))

        return self._unary(node, shrink)

    def op_Gelu(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        approximate = str(a.get("approximate", "none"))
        if approximate not in ("none", "tanh"):
            raise UsageError(f"approximate must be 'none' or 'tanh', not {approximate!r}")
        return self._unary(node, lambda x: F.gelu(x, approximate=approximate))

    def op_Swish(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        alpha = float(a.get("alpha", 1.0))
        return self._unary(node, lambda x: x * torch.sigmoid(alpha * x))

    def op_IsInf(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        neg, pos = bool(a.get("detect_negative", 1)), bool(a.get("detect_positive", 1))

        def isinf(x: Tensor) -> Tensor:
            if neg and pos:
                return torch.isinf(x)
            if pos:
                return torch.isposinf(x)
            if neg:
                return torch.isneginf(x)
            return torch.zeros_like(x, dtype=torch.bool)

        return self._unary(node, isinf)

    def op_PRelu(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        if self.opset >= 7:  # unidirectional (numpy) broadcasting of the slope
            return self._binary(node, lambda x, s: torch.where(x >= 0, x, x * s))

        def legacy(x: Tensor, s: Tensor) -> Tensor:
            return torch.where(x >= 0, x, x * _legacy_slope(node, x, s))

        return self._binary(node, legacy)

    def op_Clip(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        if self.opset < 11:
            lo, hi = a.get("min", -math.inf), a.get("max", math.inf)
            return self._unary(node, lambda x: torch.clamp(x, float(lo), float(hi)))

        def clip(x: Tensor, lo: Tensor | None = None, hi: Tensor | None = None) -> tuple[Tensor]:
            if lo is not None:
                x = torch.maximum(x, lo.to(x.dtype)) if lo.numel() else x
            if hi is not None:
                x = torch.minimum(x, hi.to(x.dtype)) if hi.numel() else x
            return (x,)

        return clip, list(node.input[:3])

    # -- comparisons and logic -------------------------------------------------------
    def op_Equal(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, torch.eq)

    def op_Less(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, unsigned_safe(torch.lt))

    def op_Greater(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, unsigned_safe(torch.gt))

    def op_LessOrEqual(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, unsigned_safe(torch.le))

    def op_GreaterOrEqual(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, unsigned_safe(torch.ge))

    def op_And(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, torch.logical_and)

    def op_Or(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, torch.logical_or)

    def op_Xor(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, torch.logical_xor)

    def op_BitwiseAnd(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, _bitwise(torch.bitwise_and))

    def op_BitwiseOr(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, _bitwise(torch.bitwise_or))

    def op_BitwiseXor(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, _bitwise(torch.bitwise_xor))

    def op_BitShift(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        direction = str(a["direction"])
        if direction not in ("LEFT", "RIGHT"):
            raise UsageError(f"direction must be 'LEFT' or 'RIGHT', not {direction!r}")
        left = direction == "LEFT"
        return self._binary(node, lambda x, s: _shift(x, s, left))

    # -- arithmetic ------------------------------------------------------------------
    def op_Pow(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, _pow)

    def op_Mod(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._binary(node, _mod(bool(a.get("fmod", 0))))

    def op_Max(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        fn = unsigned_safe(torch.maximum)
        return (lambda *xs: (reduce(fn, xs),)), list(node.input)

    def op_Min(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        fn = unsigned_safe(torch.minimum)
        return (lambda *xs: (reduce(fn, xs),)), list(node.input)

    def op_Mean(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return (lambda *xs: (reduce(torch.add, xs) / len(xs),)), list(node.input)

    def op_Where(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return (lambda c, x, y: (torch.where(c, x, y),)), list(node.input[:3])

    # -- types -------------------------------------------------------------------------
    def op_Cast(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._unary(node, _cast(onnx_dtype(int(a["to"])), bool(a.get("saturate", 1))))

    def op_CastLike(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        saturate = bool(a.get("saturate", 1))
        return self._binary(node, lambda x, like: _cast(like.dtype, saturate)(x))
