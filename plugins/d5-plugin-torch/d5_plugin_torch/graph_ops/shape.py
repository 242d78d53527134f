"""Shape and indexing operators: Shape, Size, Reshape, Squeeze, Unsqueeze, Expand,
ConstantOfShape, Gather*, Scatter*, Slice, Split, Tile, Pad, Range, OneHot, NonZero,
Trilu, DepthToSpace, SpaceToDepth, Compress, ReverseSequence and EyeLike.

Inputs that are numbers describing the result (a shape, axes, pads, repeats) are read at
translation when they are constants, else from their tensor when the node runs."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx
import torch
import torch.nn.functional as F

from d5_plugin_torch.graph_ops.base import (
    Tensor,
    Translation,
    TranslatorBase,
    fixed,
    int_list,
    onnx_dtype,
)
from d5core.api import UsageError

__all__ = ["ShapeOps"]

_SCATTER_REDUCE = {"add": "sum", "mul": "prod", "max": "amax", "min": "amin"}


def _positive(index: Tensor, size: int) -> Tensor:
    """Indices with negative ones counted from the end, as int64."""
    index = index.to(torch.int64)
    return torch.where(index < 0, index + size, index)


def _pad_index(n: int, begin: int, end: int, mode: str, device: torch.device) -> Tensor:
    """The source positions of an axis of length ``n`` padded by ``begin``/``end`` in
    ``mode`` (edge, reflect or wrap); negative pads crop."""
    i = torch.arange(-begin, n + end, device=device)
    if mode == "edge":
        return i.clamp(0, n - 1)
    if mode == "wrap":
        return torch.remainder(i, n)
    period = 2 * (n - 1)
    if period == 0:
        return torch.zeros_like(i)
    j = torch.remainder(i, period)
    return torch.where(j < n, j, period - j)


class ShapeOps(TranslatorBase):
    """Translators of shape and indexing operators."""

    def op_Shape(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        start, end = int(a.get("start", 0)), a.get("end")
        stop = None if end is None else int(end)

        def shape(x: Tensor) -> Tensor:
            return torch.tensor(list(x.shape)[start:stop], dtype=torch.int64, device=x.device)

        return self._unary(node, shape)

    def op_Size(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        return self._unary(
            node, lambda x: torch.tensor(x.numel(), dtype=torch.int64, device=x.device)
        )

    def op_Reshape(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        shape_of = self.value(node, 1)
        allowzero = bool(int(a.get("allowzero", 0)))

        def reshape(x: Tensor, s: Tensor | None = None) -> tuple[Tensor]:
            target = int_list(shape_of(s)) or []
            if not allowzero:
                target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
            return (x.reshape(tuple(target)),)

        return reshape, list(node.input[:2])

    def _axes_of(self, node: onnx.NodeProto, a: dict[str, Any]) -> Any:
        """The axes of Squeeze/Unsqueeze: attribute before opset 13, else input 1."""
        if "axes" in a:
            fixed = [int(v) for v in a["axes"]]
            return lambda _t: fixed
        of = self.value(node, 1)
        return lambda t: int_list(of(t))

    def op_Squeeze(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axes_of = self._axes_of(node, a)

        def squeeze(x: Tensor, axes_t: Tensor | None = None) -> tuple[Tensor]:
            axes = axes_of(axes_t)
            dims = axes if axes is not None else [i for i, d in enumerate(x.shape) if d == 1]
            return (x.squeeze(tuple(d % x.dim() for d in dims)) if dims else x,)

        return squeeze, list(node.input[:2])

    def op_Unsqueeze(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axes_of = self._axes_of(node, a)

        def unsqueeze(x: Tensor, axes_t: Tensor | None = None) -> tuple[Tensor]:
            axes = axes_of(axes_t) or []
            rank = x.dim() + len(axes)
            shape = list(x.shape)
            for d in sorted(ax % rank for ax in axes):
                shape.insert(d, 1)
            return (x.reshape(shape),)

        return unsqueeze, list(node.input[:2])

    def op_Expand(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        shape_of = self.value(node, 1)

        def expand(x: Tensor, s: Tensor | None = None) -> tuple[Tensor]:
            shape = np.broadcast_shapes(tuple(x.shape), tuple(int_list(shape_of(s)) or []))
            return (x.expand(shape),)

        return expand, list(node.input[:2])

    def op_ConstantOfShape(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        value = np.asarray(a.get("value", np.zeros(1, np.float32))).reshape(-1)
        fill = torch.as_tensor(value[:1].copy()).reshape(())
        device = self.ex.torch_device

        def constant(s: Tensor) -> tuple[Tensor]:
            shape = [int(d) for d in s.tolist()]
            return (torch.full(shape, fill.item(), dtype=fill.dtype, device=device),)

        return constant, [node.input[0]]

    # -- gathering and scattering ---------------------------------------------------
    def op_Gather(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis = int(a.get("axis", 0))

        def gather(x: Tensor, index: Tensor) -> tuple[Tensor]:
            ax = axis % x.dim()
            flat = _positive(index, x.shape[ax]).reshape(-1)
            picked = torch.index_select(x, ax, flat)
            return (picked.reshape((*x.shape[:ax], *index.shape, *x.shape[ax + 1 :])),)

        return gather, list(node.input[:2])

    def op_GatherElements(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis = int(a.get("axis", 0))

        def gather(x: Tensor, index: Tensor) -> tuple[Tensor]:
            ax = axis % x.dim()
            return (torch.gather(x, ax, _positive(index, x.shape[ax])),)

        return gather, list(node.input[:2])

    def op_GatherND(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        b = int(a.get("batch_dims", 0))

        def gather_nd(x: Tensor, index: Tensor) -> tuple[Tensor]:
            k = index.shape[-1]
            batch = math.prod(x.shape[:b])
            xs = x.reshape(batch, *x.shape[b:])
            idx = index.to(torch.int64).reshape(batch, -1, k)
            rows = torch.arange(batch, device=x.device).reshape(batch, 1).expand(idx.shape[:2])
            cols = tuple(_positive(idx[..., j], x.shape[b + j]) for j in range(k))
            picked = xs[(rows, *cols)]
            return (picked.reshape((*index.shape[:-1], *x.shape[b + k :])),)

        return gather_nd, list(node.input[:2])

    def op_ScatterElements(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis = int(a.get("axis", 0))
        reduction = str(a.get("reduction", "none"))
        if reduction != "none" and reduction not in _SCATTER_REDUCE:
            raise UsageError(f"reduction must be none, add, mul, max or min, not {reduction!r}")

        def scatter(x: Tensor, index: Tensor, updates: Tensor) -> tuple[Tensor]:
            ax = axis % x.dim()
            idx = _positive(index, x.shape[ax])
            if reduction == "none":
                return (torch.scatter(x, ax, idx, updates),)
            return (torch.scatter_reduce(x, ax, idx, updates, _SCATTER_REDUCE[reduction]),)

        return scatter, list(node.input[:3])

    op_Scatter = op_ScatterElements

    def op_ScatterND(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        reduction = str(a.get("reduction", "none"))
        if reduction != "none" and reduction not in _SCATTER_REDUCE:
            raise UsageError(f"reduction must be none, add, mul, max or min, not {reduction!r}")

        def scatter_nd(x: Tensor, index: Tensor, updates: Tensor) -> tuple[Tensor]:
            k = index.shape[-1]
            rest = x.shape[k:]
            rows = x.reshape(math.prod(x.shape[:k]), *rest)
            idx = index.to(torch.int64).reshape(-1, k)
            linear = torch.zeros(idx.shape[0], dtype=torch.int64, device=x.device)
            for j in range(k):
                linear = linear * x.shape[j] + _positive(idx[:, j], x.shape[j])
            upd = updates.reshape(-1, *rest)
            where = linear.reshape(-1, *[1] * len(rest)).expand(upd.shape)
            if reduction == "none":
                out = torch.scatter(rows, 0, where, upd)
            else:
                out = torch.scatter_reduce(rows, 0, where, upd, _SCATTER_REDUCE[reduction])
            return (out.reshape(x.shape),)

        return scatter_nd, list(node.input[:3])

    # -- slicing and joining -----------------------------------------------------------
    def op_Slice(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        if self.opset < 10:
            getters = [fixed(a["starts"]), fixed(a["ends"]), fixed(a.get("axes")), fixed(None)]
            names = [node.input[0]]
        else:
            getters = [self.value(node, i) for i in range(1, 5)]
            names = list(node.input[:5])

        def slice_(x: Tensor, *args: Tensor | None) -> tuple[Tensor]:
            args = args + (None,) * (4 - len(args))
            starts, ends, axes, steps = (int_list(g(t)) for g, t in zip(getters, args, strict=True))
            assert starts is not None and ends is not None
            axes = axes if axes is not None else list(range(len(starts)))
            steps = steps if steps is not None else [1] * len(starts)
            index: list[Any] = [slice(None)] * x.dim()
            flips = []
            for start, end, ax, step in zip(starts, ends, axes, steps, strict=True):
                ax %= x.dim()
                r = range(*slice(start, end, step).indices(x.shape[ax]))
                if step > 0:
                    index[ax] = slice(r.start, max(r.stop, r.start), r.step)
                elif len(r) == 0:
                    index[ax] = slice(0, 0)
                else:  # torch has no negative steps: slice forwards, then flip
                    index[ax] = slice(r[-1], r[0] + 1, -step)
                    flips.append(ax)
            y = x[tuple(index)]
            return (torch.flip(y, flips) if flips else y,)

        return slice_, names

    def op_Split(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis = int(a.get("axis", 0))
        count = len(node.output)
        if "split" in a:
            fixed = [int(v) for v in a["split"]]
            split_of: Any = lambda _t: fixed  # noqa: E731
        else:
            split_of = self.value(node, 1)
        num_outputs = a.get("num_outputs")

        def split(x: Tensor, s: Tensor | None = None) -> tuple[Tensor, ...]:
            ax = axis % x.dim()
            sizes = int_list(split_of(s))
            if not sizes:
                n = x.shape[ax]
                if num_outputs is not None:
                    chunk = -(-n // int(num_outputs))
                    sizes = [min(chunk, n - i * chunk) for i in range(int(num_outputs))]
                else:
                    sizes = [n // count] * count
            return tuple(torch.split(x, sizes, dim=ax))

        return split, list(node.input[:2])

    def op_Tile(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        repeats_of = self.value(node, 1)

        def tile(x: Tensor, r: Tensor | None = None) -> tuple[Tensor]:
            return (x.repeat(*(int_list(repeats_of(r)) or [])),)

        return tile, list(node.input[:2])

    def op_Pad(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        mode = str(a.get("mode", "constant"))
        if mode not in ("constant", "reflect", "edge", "wrap"):
            raise UsageError(f"Pad mode must be constant, reflect, edge or wrap, not {mode!r}")
        if self.opset < 11:
            fixed_pads, fixed_value = [int(v) for v in a["pads"]], float(a.get("value", 0.0))
            pads_of: Any = lambda _t: fixed_pads  # noqa: E731
            value_of: Any = lambda _t: fixed_value  # noqa: E731
            axes_of: Any = lambda _t: None  # noqa: E731
            names = [node.input[0]]
        else:
            pads_of, value_of, axes_of = (self.value(node, i) for i in (1, 2, 3))
            names = list(node.input[:4])

        def pad(x: Tensor, *args: Tensor | None) -> tuple[Tensor]:
            args = args + (None,) * (3 - len(args))
            pads = int_list(pads_of(args[0])) or []
            value = value_of(args[1])
            axes = int_list(axes_of(args[2]))
            dims = [d % x.dim() for d in axes] if axes is not None else list(range(x.dim()))
            n = len(dims)
            per_axis = {d: (pads[i], pads[i + n]) for i, d in enumerate(dims)}
            if mode == "constant":
                fill = (
                    0.0
                    if value is None or np.size(value) == 0
                    else np.asarray(value).reshape(-1)[0].item()
                )
                flat: list[int] = []
                for d in reversed(range(x.dim())):
                    flat += list(per_axis.get(d, (0, 0)))
                return (F.pad(x, flat, value=fill),)
            for d, (begin, end) in per_axis.items():
                if begin or end:
                    x = torch.index_select(x, d, _pad_index(x.shape[d], begin, end, mode, x.device))
            return (x,)

        return pad, names

    def op_Range(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        def range_(start: Tensor, limit: Tensor, delta: Tensor) -> tuple[Tensor]:
            s, e, d = start.item(), limit.item(), delta.item()
            n = max(math.ceil((e - s) / d), 0)
            wide = torch.float64 if start.is_floating_point() else torch.int64
            steps = torch.arange(n, dtype=wide, device=start.device)
            return ((start.to(steps.dtype) + steps * delta.to(steps.dtype)).to(start.dtype),)

        return range_, list(node.input[:3])

    def op_OneHot(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis = int(a.get("axis", -1))

        def one_hot(index: Tensor, depth: Tensor, values: Tensor) -> tuple[Tensor]:
            n = int(depth.reshape(-1)[0].item())
            rank = index.dim() + 1
            ax = axis % rank
            idx = index.to(torch.int64)  # float indices truncate, as onnx's reference does
            idx = torch.where(idx < 0, idx + n, idx).unsqueeze(ax)
            shape = [1] * rank
            shape[ax] = n
            hot = idx == torch.arange(n, device=index.device).reshape(shape)
            return (torch.where(hot, values[1], values[0]),)

        return one_hot, list(node.input[:3])

    def op_NonZero(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        def nonzero(x: Tensor) -> Tensor:
            if x.dim() == 0:
                return torch.zeros((0, int(bool(x))), dtype=torch.int64, device=x.device)
            return torch.nonzero(x).t().contiguous()

        return self._unary(node, nonzero)

    def op_Trilu(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        upper = bool(int(a.get("upper", 1)))
        k_of = self.value(node, 1)

        def trilu(x: Tensor, k_t: Tensor | None = None) -> tuple[Tensor]:
            k = int((int_list(k_of(k_t)) or [0])[0])
            if x.numel() == 0:
                return (x,)
            return (torch.triu(x, k) if upper else torch.tril(x, k),)

        return trilu, list(node.input[:2])

    def op_DepthToSpace(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        b = int(a["blocksize"])
        crd = str(a.get("mode", "DCR")) == "CRD"

        def d2s(x: Tensor) -> Tensor:
            n, c, h, w = x.shape
            if crd:
                y = x.reshape(n, c // (b * b), b, b, h, w).permute(0, 1, 4, 2, 5, 3)
            else:
                y = x.reshape(n, b, b, c // (b * b), h, w).permute(0, 3, 4, 1, 5, 2)
            return y.reshape(n, c // (b * b), h * b, w * b)

        return self._unary(node, d2s)

    def op_SpaceToDepth(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        b = int(a["blocksize"])
        order = (0, 1, 3, 5, 2, 4) if str(a.get("mode", "DCR")) == "CRD" else (0, 3, 5, 1, 2, 4)

        def s2d(x: Tensor) -> Tensor:
            n, c, h, w = x.shape
            y = x.reshape(n, c, h // b, b, w // b, b).permute(*order)
            return y.reshape(n, c * b * b, h // b, w // b)

        return self._unary(node, s2d)

    def op_Compress(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis = a.get("axis")

        def compress(x: Tensor, condition: Tensor) -> tuple[Tensor]:
            if axis is None:
                x, ax = x.reshape(-1), 0
            else:
                ax = int(axis) % x.dim()
            keep = torch.nonzero(condition.reshape(-1)[: x.shape[ax]]).reshape(-1)
            return (torch.index_select(x, ax, keep),)

        return compress, list(node.input[:2])

    def op_ReverseSequence(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        batch_axis, time_axis = int(a.get("batch_axis", 1)), int(a.get("time_axis", 0))

        def reverse(x: Tensor, lengths: Tensor) -> tuple[Tensor]:
            steps = x.shape[time_axis]
            t = torch.arange(steps, device=x.device).reshape(1, steps)
            n = lengths.to(torch.int64).reshape(-1, 1)
            source = torch.where(t < n, n - 1 - t, t)  # (batch, time)
            if batch_axis > time_axis:
                source = source.t()
            shape = [1] * x.dim()
            shape[batch_axis], shape[time_axis] = x.shape[batch_axis], steps
            index = source.reshape(shape).expand(x.shape)
            return (torch.gather(x, time_axis, index),)

        return reverse, list(node.input[:2])

    def op_Unique(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        axis = a.get("axis")
        ordered = bool(int(a.get("sorted", 1)))

        def unique(x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
            ax = 0 if axis is None else int(axis) % x.dim()
            flat = x.reshape(-1) if axis is None else x
            y, inverse, counts = torch.unique(
                flat, sorted=True, return_inverse=True, return_counts=True, dim=ax
            )
            positions = torch.arange(inverse.numel(), device=x.device)
            first = torch.full((y.shape[ax],), inverse.numel(), dtype=torch.int64, device=x.device)
            first = first.scatter_reduce(0, inverse, positions, "amin")
            if not ordered:  # in order of first occurrence
                order = torch.argsort(first)
                rank = torch.argsort(order)
                y = torch.index_select(y, ax, order)
                first, counts, inverse = first[order], counts[order], rank[inverse]
            return y, first, inverse.reshape(-1), counts

        return unique, [node.input[0]]

    def op_EyeLike(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        k = int(a.get("k", 0))
        dtype = onnx_dtype(int(a["dtype"])) if "dtype" in a else None

        def eye_like(x: Tensor) -> Tensor:
            rows = torch.arange(x.shape[0], device=x.device).reshape(-1, 1)
            cols = torch.arange(x.shape[1], device=x.device).reshape(1, -1)
            return (cols - rows == k).to(dtype or x.dtype)

        return self._unary(node, eye_like)
