"""Reductions and orderings: the Reduce* family, ArgMax/ArgMin, CumSum, CumProd, TopK,
Hardmax, Einsum and Det."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import onnx
import torch

from d5_plugin_torch.graph_ops.base import Tensor, Translation, TranslatorBase, fixed, int_list
from d5core.api import UsageError

__all__ = ["ReduceOps"]

#: A reduction of ``x`` over ``dims`` (a non-empty tuple), keeping them as size 1.
Reducer = Callable[[Tensor, tuple[int, ...]], Tensor]

#: The opset from which each reduction takes its axes as an input, not an attribute.
_AXES_INPUT_FROM = {"ReduceSum": 13}


def _in_float(fn: Reducer) -> Reducer:
    """``fn`` computed in float64 for integer inputs, the result cast back."""

    def run(x: Tensor, dims: tuple[int, ...]) -> Tensor:
        if x.is_floating_point():
            return fn(x, dims)
        return fn(x.to(torch.float64), dims).to(x.dtype)

    return run


def _extreme(fn: Callable[..., Tensor], empty: float) -> Reducer:
    """amax or amin; over zero elements, ``empty`` (-inf or inf) as ONNX says."""

    def run(x: Tensor, dims: tuple[int, ...]) -> Tensor:
        if any(x.shape[d] == 0 for d in dims):
            shape = [1 if i in dims else n for i, n in enumerate(x.shape)]
            fill: float | bool = (empty > 0) if x.dtype == torch.bool else empty
            return torch.full(shape, fill, dtype=x.dtype, device=x.device)
        if x.dtype == torch.bool:
            return fn(x.to(torch.uint8), dim=dims, keepdim=True).to(torch.bool)
        return fn(x, dim=dims, keepdim=True)

    return run


def _prod(x: Tensor, dims: tuple[int, ...]) -> Tensor:
    for d in dims:
        x = torch.prod(x, dim=d, keepdim=True)
    return x


_REDUCERS: dict[str, Reducer] = {
    "ReduceSum": lambda x, d: torch.sum(x, dim=d, keepdim=True),
    "ReduceMean": _in_float(lambda x, d: torch.mean(x, dim=d, keepdim=True)),
    "ReduceMax": _extreme(torch.amax, -math.inf),
    "ReduceMin": _extreme(torch.amin, math.inf),
    "ReduceProd": _prod,
    "ReduceL1": lambda x, d: torch.sum(torch.abs(x), dim=d, keepdim=True),
    "ReduceL2": _in_float(lambda x, d: torch.sqrt(torch.sum(x * x, dim=d, keepdim=True))),
    "ReduceLogSum": _in_float(lambda x, d: torch.log(torch.sum(x, dim=d, keepdim=True))),
    "ReduceLogSumExp": _in_float(lambda x, d: torch.logsumexp(x, dim=d, keepdim=True)),
    "ReduceSumSquare": lambda x, d: torch.sum(x * x, dim=d, keepdim=True),
}


def _identity(x: Tensor) -> Tensor:
    return x


#: Each reduction over no axis at all (``noop_with_empty_axes`` with empty axes): its
#: element-wise part, as onnx's reference computes it.
_OVER_NO_AXIS: dict[str, Callable[[Tensor], Tensor]] = {
    "ReduceL1": torch.abs,
    "ReduceL2": lambda x: torch.sqrt(x * x) if x.is_floating_point() else torch.abs(x),
    "ReduceLogSum": lambda x: torch.log(x) if x.is_floating_point() else x,
    "ReduceSumSquare": lambda x: x * x,
}


class ReduceOps(TranslatorBase):
    """Translators of reductions and orderings."""

    def _reduce(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        op = node.op_type
        fn = _REDUCERS[op]
        keepdims = bool(int(a.get("keepdims", 1)))
        noop = bool(int(a.get("noop_with_empty_axes", 0)))
        attribute = self.opset < _AXES_INPUT_FROM.get(op, 18)
        axes_of = fixed(a.get("axes")) if attribute else self.value(node, 1)
        elementwise = _OVER_NO_AXIS.get(op, _identity)

        def reduce(x: Tensor, axes_t: Tensor | None = None) -> tuple[Tensor]:
            axes = int_list(axes_of(axes_t))
            if not axes:
                if noop:
                    return (elementwise(x),)
                axes = list(range(x.dim()))
            dims = tuple(sorted({d % x.dim() for d in axes})) if x.dim() else ()
            if not dims:
                return (fn(x.reshape(1), (0,)).reshape(()).to(x.dtype),)
            y = fn(x, dims).to(x.dtype)
            return (y if keepdims else y.squeeze(dims),)

        return reduce, list(node.input[:2])

    op_ReduceSum = _reduce
    op_ReduceMean = _reduce
    op_ReduceMax = _reduce
    op_ReduceMin = _reduce
    op_ReduceProd = _reduce
    op_ReduceL1 = _reduce
    op_ReduceL2 = _reduce
    op_ReduceLogSum = _reduce
    op_ReduceLogSumExp = _reduce
    op_ReduceSumSquare = _reduce

    def _arg(
        self, node: onnx.NodeProto, a: dict[str, Any], fn: Callable[..., Tensor]
    ) -> Translation:
        axis = int(a.get("axis", 0))
        keepdims = bool(int(a.get("keepdims", 1)))
        last = bool(int(a.get("select_last_index", 0)))

        def arg(x: Tensor) -> Tensor:
            ax = axis % x.dim()
            if last:
                flipped = fn(torch.flip(x, (ax,)), dim=ax, keepdim=keepdims)
                return x.shape[ax] - 1 - flipped
            return fn(x, dim=ax, keepdim=keepdims)

        return self._unary(node, arg)

    def op_ArgMax(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._arg(node, a, torch.argmax)

    def op_ArgMin(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._arg(node, a, torch.argmin)

    def _cumulative(
        self, node: onnx.NodeProto, a: dict[str, Any], fn: Callable[..., Tensor], first: int
    ) -> Translation:
        """CumSum or CumProd: ``fn`` along the axis input; ``exclusive`` starts from
        ``first`` (0 or 1), ``reverse`` runs from the end."""
        exclusive, reverse = bool(a.get("exclusive", 0)), bool(a.get("reverse", 0))
        axis_of = self.value(node, 1)

        def cumulative(x: Tensor, axis_t: Tensor | None) -> tuple[Tensor]:
            ax = (int_list(axis_of(axis_t)) or [0])[0] % x.dim()
            y = torch.flip(x, (ax,)) if reverse else x
            s = fn(y, dim=ax).to(x.dtype)
            if exclusive:
                start = torch.full_like(s.narrow(ax, 0, 1), first)
                s = torch.cat([start, s.narrow(ax, 0, s.shape[ax] - 1)], ax)
            return (torch.flip(s, (ax,)) if reverse else s,)

        return cumulative, list(node.input[:2])

    def op_CumSum(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._cumulative(node, a, torch.cumsum, 0)

    def op_CumProd(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._cumulative(node, a, torch.cumprod, 1)

    def op_TopK(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis = int(a.get("axis", -1))
        largest = bool(a.get("largest", 1))  # sorted or not, the sorted order is allowed
        if self.opset < 10:
            k_fixed = int(a["k"])
            k_of = self.value(node, len(node.input))  # no such input
        else:
            k_fixed = -1
            k_of = self.value(node, 1)

        def topk(x: Tensor, k_t: Tensor | None = None) -> tuple[Tensor, Tensor]:
            k = k_fixed if k_fixed >= 0 else int(int_list(k_of(k_t))[0])  # type: ignore[index]
            # a stable sort keeps equal values in index order, as ONNX wants
            values, indices = torch.sort(x, dim=axis, descending=largest, stable=True)
            return values.narrow(axis, 0, k), indices.narrow(axis, 0, k)

        return topk, list(node.input[:2]) if self.opset >= 10 else [node.input[0]]

    def op_Hardmax(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        coerce = self.opset < 13
        axis = int(a.get("axis", 1 if coerce else -1))

        def hardmax(x: Tensor) -> Tensor:
            ax = axis % x.dim()
            y = x.reshape(math.prod(x.shape[:ax]), -1) if coerce else x
            dim = 1 if coerce else ax
            hot = torch.nn.functional.one_hot(torch.argmax(y, dim=dim), y.shape[dim])
            return hot.movedim(-1, dim).to(x.dtype).reshape(x.shape)

        return self._unary(node, hardmax)

    def op_Det(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._unary(node, torch.linalg.det)

    def op_Einsum(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        equation = str(a["equation"]).replace(" ", "")
        if not equation:
            raise UsageError("Einsum needs an equation")
        return (lambda *xs: (torch.einsum(equation, *xs),)), list(node.input)
