"""The PyTorch graph executor, registered as ``torch`` in the ``d5.frameworks`` group.

:class:`TorchExecutor` translates an ONNX graph once into a list of native torch calls
(``torch.nn.functional`` and tensor methods); every attribute, constant input and opset
difference is resolved at translation, so a run executes only torch code. An input that
describes the result rather than feeding it (a Reshape's shape, Slice's starts, a
reduction's axes) is read at translation when it is a constant or a non-trainable
initializer, and otherwise from its tensor when the node runs (a shape the graph
computes with Shape, Slice and Concat, as exported transformers do). Parameters are
held as torch tensors (``requires_grad`` for the trainable ones); backprop is
``torch.autograd.grad`` of the loss with respect to them.

The layers of the benchmark networks are translated in this module; the other
operators (about 160 ONNX operator types in all: element-wise math, comparisons and bit
operations, reductions, shape and indexing operators, normalizations, Attention,
RotaryEmbedding, LSTM, GRU and RNN, Resize, quantization, signal windows and DFT,
NonMaxSuppression, ...) by the groups of :mod:`d5_plugin_torch.graph_ops`, mixed into
the translator. :attr:`TorchExecutor.supported_ops` lists exactly the translated ones.
Element types torch has no tensors of (strings, int4, int2, float4) are refused in one
line; bfloat16 and float8 arrays (ml_dtypes) travel in and out as such.

Modes match the numpy reference executor: :meth:`~TorchExecutor.inference` runs Dropout
as the identity and BatchNormalization with its running statistics;
:meth:`~TorchExecutor.inference_and_backprop` runs both in training mode. The Dropout
mask is the reference's (``numpy.random.default_rng(seed).random(shape) >= ratio``, as
the level-0 torch operator draws it too), drawn once per shape, so both executors compute
the same outputs, ``mask`` output included, and the same gradients. BatchNormalization
in training mode updates running statistics with ONNX's convention (biased variance,
``momentum`` weighting the old value); they are kept in
:attr:`TorchExecutor.running_stats` and written into the parameters only by
:meth:`TorchExecutor.apply_running_stats`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import reduce
from operator import itemgetter
from typing import Any, ClassVar, NamedTuple

import numpy as np
import onnx
import torch
import torch.nn.functional as F

from d5_plugin_torch.graph_ops.base import Fn, One, Tensor, to_numpy, to_torch
from d5_plugin_torch.graph_ops.control import ControlOps
from d5_plugin_torch.graph_ops.elementwise import ElementwiseOps
from d5_plugin_torch.graph_ops.image import ImageOps
from d5_plugin_torch.graph_ops.normalization import NormalizationOps
from d5_plugin_torch.graph_ops.pool import PoolOps, dilated_average_pool
from d5_plugin_torch.graph_ops.quantize import QuantizeOps
from d5_plugin_torch.graph_ops.reduce import ReduceOps
from d5_plugin_torch.graph_ops.resize import ResizeOps
from d5_plugin_torch.graph_ops.sequence import SequenceOps
from d5_plugin_torch.graph_ops.shape import ShapeOps
from d5_plugin_torch.graph_ops.signal import SignalOps
from d5_plugin_torch.ops._base import resolve_device
from d5_plugin_torch.ops.normalization import reference_mask
from d5core.api import GRAPH_NODE, GraphExecutor, NativeTraining, UsageError, get_bus
from d5core.onnx import (
    constant_value,
    graph_view,
    legacy_broadcast,
    legacy_broadcast_shape,
    node_attributes,
    node_errors,
    node_pads,
)

__all__ = ["DeviceCorrectCounter", "TorchExecutor"]

_CONSTANTS = frozenset({"Constant", "ConstantOfShape"})
#: The domains of ONNX's own operators, the only ones translated.
_DEFAULT_DOMAINS = frozenset({"", "ai.onnx"})
#: d5's own operators (domain ``ai.d5``, ONNX has none) translated too: the regression loss.
_D5_OPS = frozenset({"MeanSquaredError"})
_D5_DOMAIN = "ai.d5"


# -- geometry helpers -----------------------------------------------------------


def _spatial_pads(
    attrs: Mapping[str, Any], kernel: Sequence[int], x_shape: Sequence[int]
) -> list[int]:
    """ONNX pads (begins then ends) for ``x_shape``, resolving ``auto_pad``."""
    begins, ends = node_pads(attrs, kernel, x_shape)
    return [*begins, *ends]


def _torch_pad(pads: Sequence[int]) -> list[int]:
    """ONNX pads (x1_begin, x2_begin, ..., x1_end, ...) as ``F.pad`` wants them."""
    n = len(pads) // 2
    out: list[int] = []
    for i in reversed(range(n)):
        out += [pads[i], pads[i + n]]
    return out


def _symmetric(pads: Sequence[int]) -> list[int] | None:
    n = len(pads) // 2
    return list(pads[:n]) if list(pads[:n]) == list(pads[n:]) else None


# -- integer arithmetic -----------------------------------------------------------

#: Unsigned types torch stores but has no arithmetic kernels for, each with the signed
#: type of its width (torch 2.3 and later have them).
_WIDE_UNSIGNED: dict[torch.dtype, torch.dtype] = {
    getattr(torch, f"uint{n}"): getattr(torch, f"int{n}")
    for n in (16, 32, 64)
    if hasattr(torch, f"uint{n}")
}
_UINT64 = getattr(torch, "uint64", None)
#: The low 63 bits, and the sign bit, of an int64.
_LOW63, _SIGN = (1 << 63) - 1, -(1 << 63)


def _wrapping(fn: One) -> One:
    """``fn`` (add, sub or mul), also for the unsigned types torch lacks kernels for: on
    their bits viewed as the signed type of the same width, whose two's-complement
    arithmetic wraps modulo ``2**n`` exactly as unsigned arithmetic does."""

    def run(x: Tensor, y: Tensor) -> Tensor:
        signed = _WIDE_UNSIGNED.get(x.dtype)
        if signed is None or y.dtype != x.dtype:
            return fn(x, y)
        return fn(x.view(signed), y.view(signed)).view(x.dtype)

    return run


def _divide(x: Tensor, y: Tensor) -> Tensor:
    """ONNX Div: true division of floating tensors; for integers the quotient truncated
    toward zero, in the inputs' type (``[7, -7] / [2, 2]`` is ``[3, -3]``)."""
    integer = _INTEGER_DIVISION.get(x.dtype)  # one lookup: floats pay next to nothing
    return torch.div(x, y) if integer is None else integer(x, y)


def _truncated(x: Tensor, y: Tensor) -> Tensor:
    """Integer division rounded toward zero, in the inputs' type."""
    return torch.div(x, y, rounding_mode="trunc")


def _truncated_in_int64(x: Tensor, y: Tensor) -> Tensor:
    """For uint16 and uint32, which torch cannot divide: exact in int64."""
    return _truncated(x.to(torch.int64), y.to(torch.int64)).to(x.dtype)


def _truncated_uint64(x: Tensor, y: Tensor) -> Tensor:
    """For uint64, which no wider type holds: see :func:`_unsigned_div64`."""
    return _unsigned_div64(x.view(torch.int64), y.view(torch.int64)).view(x.dtype)


def _unsigned_at_least(a: Tensor, b: Tensor) -> Tensor:
    """``a >= b`` for uint64 values held as int64 bits."""
    return (a ^ _SIGN) >= (b ^ _SIGN)


def _unsigned_div64(n: Tensor, d: Tensor) -> Tensor:
    """``n // d`` for uint64 values held as int64 bits, from signed operations (Hacker's
    Delight, 9-3): halve ``n`` so it is non-negative, divide, double, and correct by one."""
    big = d < 0  # a divisor of 2**63 or more: the quotient is 0 or 1
    divisor = torch.where(big, torch.ones_like(d), d)
    q = torch.div((n >> 1) & _LOW63, divisor, rounding_mode="trunc") << 1
    q = q + _unsigned_at_least(n - q * divisor, divisor).to(torch.int64)
    return torch.where(big, _unsigned_at_least(n, d).to(torch.int64), q)


#: How Div divides each integer type; floating types are missing (true division).
_INTEGER_DIVISION: dict[torch.dtype, One] = {
    **{t: _truncated for t in (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)},
    **{t: _truncated_in_int64 for t in _WIDE_UNSIGNED if t != _UINT64},
    **({_UINT64: _truncated_uint64} if _UINT64 is not None else {}),
}


# -- operators ----------------------------------------------------------------------

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}
_MAXPOOL = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVGPOOL = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}


class _Translator(
    ElementwiseOps,
    ReduceOps,
    ShapeOps,
    NormalizationOps,
    SequenceOps,
    QuantizeOps,
    ResizeOps,
    ImageOps,
    PoolOps,
    SignalOps,
    ControlOps,
):
    """Builds the torch function of one node; static inputs come from ``constants``.

    The operator groups live in :mod:`d5_plugin_torch.graph_ops`; the layers the
    benchmark networks are made of are translated here.
    """

    def translate(self, node: onnx.NodeProto) -> tuple[Fn, list[str]]:
        """The function and the names of the tensor inputs it takes."""
        a = node_attributes(node)
        method: Callable[[onnx.NodeProto, dict[str, Any]], tuple[Fn, list[str]]] = getattr(
            self, "op_" + node.op_type
        )
        return method(node, a)

    # each op_* returns (fn, tensor input names)

    def op_Relu(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return self._unary(node, F.relu)

    def op_Sigmoid(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return self._unary(node, torch.sigmoid)

    def op_Tanh(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return self._unary(node, torch.tanh)

    def op_Identity(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return self._unary(node, lambda x: x)

    def op_LeakyRelu(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        alpha = float(a.get("alpha", 0.01))
        return self._unary(node, lambda x: F.leaky_relu(x, alpha))

    def _arithmetic(self, node: onnx.NodeProto, a: dict[str, Any], fn: One) -> tuple[Fn, list[str]]:
        """Add, Sub, Mul or Div; before opset 7, ``B`` broadcast as ``broadcast``/``axis``
        say (:func:`~d5core.api.legacy_broadcast_shape`)."""
        legacy = legacy_broadcast(node.op_type, self.opset, a)
        if legacy is None:
            return self._binary(node, fn)
        broadcast, axis = legacy
        where = f"node {node.name!r} ({node.op_type})"

        def legacy_fn(x: Tensor, y: Tensor) -> tuple[Tensor]:
            try:
                shape = legacy_broadcast_shape(x.shape, y.shape, broadcast=broadcast, axis=axis)
            except UsageError as exc:
                raise UsageError(f"{where}: {exc}") from None
            return (fn(x, y.reshape(shape)),)

        return legacy_fn, list(node.input[:2])

    def op_Add(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return self._arithmetic(node, a, _wrapping(torch.add))

    def op_Sub(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return self._arithmetic(node, a, _wrapping(torch.sub))

    def op_Mul(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return self._arithmetic(node, a, _wrapping(torch.mul))

    def op_Div(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return self._arithmetic(node, a, _divide)

    def op_MatMul(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return self._binary(node, torch.matmul)

    def op_Sum(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return (lambda *xs: (reduce(torch.add, xs),)), list(node.input)

    def op_Gemm(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        ta, tb = int(a.get("transA", 0)), int(a.get("transB", 0))

        def gemm(x: Tensor, w: Tensor, c: Tensor | None = None) -> tuple[Tensor]:
            x, w = (x.t() if ta else x), (w.t() if tb else w)
            if c is not None:  # one fused kernel: beta * c + alpha * (x @ w)
                return (torch.addmm(c, x, w, beta=beta, alpha=alpha),)
            y = x @ w
            return (y if alpha == 1.0 else alpha * y,)

        if (ta, tb, alpha, beta) != (0, 1, 1.0, 1.0):
            return gemm, [i for i in node.input if i]

        def linear(x: Tensor, w: Tensor, c: Tensor | None = None) -> tuple[Tensor]:
            # a torch.nn.Linear layer, in one call; F.linear would broadcast operands
            # that Gemm requires to be matrices, so those take the general path
            if x.dim() != 2 or w.dim() != 2:
                return gemm(x, w, c)
            return (F.linear(x, w, c),)

        return linear, [i for i in node.input if i]

    def op_Conv(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        group = int(a.get("group", 1))

        # The geometry is worked out once per pair of input shapes, not on every call.
        plans: dict[tuple[Any, Any], tuple[Any, ...]] = {}

        def conv(x: Tensor, w: Tensor, b: Tensor | None = None) -> tuple[Tensor]:
            plan = plans.get((x.shape, w.shape))
            if plan is None:
                n = w.dim() - 2
                kernel = list(a.get("kernel_shape") or w.shape[2:])
                pads = _spatial_pads(a, kernel, x.shape)
                sym = _symmetric(pads)
                plan = plans[(x.shape, w.shape)] = (
                    None if sym is not None else _torch_pad(pads),
                    sym if sym is not None else [0] * n,
                    list(a.get("strides") or [1] * n),
                    list(a.get("dilations") or [1] * n),
                    _CONV[n],
                )
            pad, sym, strides, dilations, fn = plan
            if pad is not None:
                x = F.pad(x, pad)
            return (fn(x, w, b, strides, sym, dilations, group),)

        return conv, [i for i in node.input if i]

    def op_ConvTranspose(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        group = int(a.get("group", 1))
        auto_pad = str(a.get("auto_pad", "NOTSET"))
        output_shape = a.get("output_shape")

        def convt(x: Tensor, w: Tensor, b: Tensor | None = None) -> tuple[Tensor]:
            n = w.dim() - 2
            strides = list(a.get("strides") or [1] * n)
            y = _CONV_T[n](x, w, b, strides, 0,
                           list(a.get("output_padding") or [0] * n), group,
                           list(a.get("dilations") or [1] * n))  # fmt: skip
            full = list(y.shape[2:])
            if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                # ONNX splits the total padding: the beginning gets total - total // 2
                # (total // 2 with SAME_UPPER); the given pads are ignored. A target
                # larger than the full output zero-fills the end.
                target = (
                    list(output_shape)[-n:]
                    if output_shape is not None
                    else [x.shape[2 + i] * strides[i] for i in range(n)]
                )
                totals = [max(f - t, 0) for f, t in zip(full, target, strict=True)]
                upper = auto_pad == "SAME_UPPER"
                begins = [t // 2 if upper else t - t // 2 for t in totals]
                ends = [f - t - s for f, t, s in zip(full, target, begins, strict=True)]
            else:
                pads = list(a.get("pads") or [0] * 2 * n)
                begins, ends = pads[:n], pads[n:]
            # crop ONNX pads (begin/end) from the full output; a negative one pads
            crop = [p for i in reversed(range(n)) for p in (-begins[i], -ends[i])]
            return (F.pad(y, crop) if any(crop) else y,)

        return convt, [i for i in node.input if i]

    def _softmax(self, node: onnx.NodeProto, a: dict[str, Any], fn: One) -> tuple[Fn, list[str]]:
        if self.opset >= 13:
            axis = int(a.get("axis", -1))
            return self._unary(node, lambda x: fn(x, axis))
        axis = int(a.get("axis", 1))

        def coerced(x: Tensor) -> Tensor:
            ax = axis % x.dim()
            return fn(x.reshape(math.prod(x.shape[:ax]), -1), 1).reshape(x.shape)

        return self._unary(node, coerced)

    def op_Softmax(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return self._softmax(node, a, torch.softmax)

    def op_LogSoftmax(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return self._softmax(node, a, torch.log_softmax)

    def op_MaxPool(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        if len([o for o in node.output if o]) > 1:
            raise UsageError(
                f"node {node.name!r} (MaxPool): the Indices output is not supported by the "
                "torch executor"
            )
        kernel = list(a["kernel_shape"])
        n = len(kernel)
        ceil = bool(int(a.get("ceil_mode", 0)))

        strides = list(a.get("strides") or [1] * n)
        dilations = list(a.get("dilations") or [1] * n)
        plans: dict[Any, tuple[list[int] | None, list[int]]] = {}  # by input shape

        def maxpool(x: Tensor) -> tuple[Tensor]:
            plan = plans.get(x.shape)
            if plan is None:
                pads = _spatial_pads(a, kernel, x.shape)
                sym = _symmetric(pads)
                if sym is None or any(2 * p > k for p, k in zip(sym, kernel, strict=True)):
                    plan = (_torch_pad(pads), [0] * n)
                else:
                    plan = (None, sym)
                plans[x.shape] = plan
            pad, sym = plan
            if pad is not None:
                x = F.pad(x, pad, value=-math.inf)
            return (_MAXPOOL[n](x, kernel, strides, sym, dilations, ceil),)

        return maxpool, [node.input[0]]

    def op_AveragePool(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        kernel = list(a["kernel_shape"])
        n = len(kernel)
        ceil = bool(int(a.get("ceil_mode", 0)))
        include = bool(int(a.get("count_include_pad", 0)))
        if any(d != 1 for d in a.get("dilations") or [1] * n):
            return self._unary(node, lambda x: dilated_average_pool(a, x))
        strides = list(a.get("strides") or [1] * n)

        plans: dict[Any, tuple[list[int], list[int] | None]] = {}  # by input shape

        def avgpool(x: Tensor) -> tuple[Tensor]:
            plan = plans.get(x.shape)
            if plan is None:
                pads = _spatial_pads(a, kernel, x.shape)
                sym = _symmetric(pads)
                fits = sym is not None and all(2 * p <= k for p, k in zip(sym, kernel, strict=True))
                plan = plans[x.shape] = (pads, sym if fits else None)
            pads, sym = plan
            if sym is not None:
                return (_AVGPOOL[n](x, kernel, strides, sym, ceil, include),)
            padded = F.pad(x, _torch_pad(pads))
            total = _AVGPOOL[n](padded, kernel, strides, 0, ceil, True)
            if include:
                return (total,)
            ones = F.pad(torch.ones_like(x[:1, :1]), _torch_pad(pads))
            count = _AVGPOOL[n](ones, kernel, strides, 0, ceil, True)
            return (total / count,)

        return avgpool, [node.input[0]]

    def op_GlobalAveragePool(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        return self._unary(node, lambda x: x.mean(dim=tuple(range(2, x.dim())), keepdim=True))

    def op_BatchNormalization(
        self, node: onnx.NodeProto, a: dict[str, Any]
    ) -> tuple[Fn, list[str]]:
        if not int(a.get("spatial", 1)):  # opset < 9: statistics per element, not per channel
            raise UsageError(
                f"node {node.name!r} (BatchNormalization): spatial=0 (per-element "
                "statistics) is not supported by the torch executor"
            )
        eps, m = float(a.get("epsilon", 1e-5)), float(a.get("momentum", 0.9))
        names = list(node.input[:5])
        with_statistics = len([o for o in node.output if o]) > 1
        if int(a.get("training_mode", 0)) and (with_statistics or not self.training):
            # the node itself asks for batch statistics (opset 14), in every mode
            return self._batch_norm_with_statistics(eps, m), names
        if not self.training:
            return (
                lambda x, s, b, mu, var: (F.batch_norm(x, mu, var, s, b, False, 0.0, eps),)
            ), names
        stats = self.ex.running_stats

        def bn_train(x: Tensor, s: Tensor, b: Tensor, mu: Tensor, var: Tensor) -> tuple[Tensor]:
            n = x.numel() // x.shape[1]
            if n < 2:  # one value per channel: torch's unbiased running variance is undefined
                return bn_by_parts(x, s, b, mu, var)
            # torch's fused kernel (forward and backward) normalises with the biased batch
            # variance, as ONNX does, and updates copies of the running statistics:
            # new = (1 - t) * old + t * batch with t = 1 - momentum, but with the
            # *unbiased* batch variance, which is rescaled below to ONNX's biased one.
            run_mean, run_var = mu.detach().clone(), var.detach().clone()
            y = F.batch_norm(x, run_mean, run_var, s, b, True, 1.0 - m, eps)
            with torch.no_grad():
                kept = m * var.detach()
                stats[names[3]] = run_mean
                stats[names[4]] = kept + (run_var - kept) * ((n - 1) / n)
            return (y,)

        def bn_by_parts(x: Tensor, s: Tensor, b: Tensor, mu: Tensor, var: Tensor) -> tuple[Tensor]:
            axes = [0, *range(2, x.dim())]
            shape = [1, -1] + [1] * (x.dim() - 2)
            bmean = x.mean(dim=axes)
            bvar = x.var(dim=axes, unbiased=False)
            y = (x - bmean.reshape(shape)) * (s * torch.rsqrt(bvar + eps)).reshape(shape)
            with torch.no_grad():
                stats[names[3]] = m * mu + (1 - m) * bmean
                stats[names[4]] = m * var + (1 - m) * bvar
            return (y + b.reshape(shape),)

        return bn_train, names

    @staticmethod
    def _batch_norm_with_statistics(eps: float, m: float) -> Fn:
        """A BatchNormalization node in training mode (opset 14) whose running mean and
        variance are outputs: normalised with the batch statistics, in both modes."""

        def bn(x: Tensor, s: Tensor, b: Tensor, mu: Tensor, var: Tensor) -> tuple[Tensor, ...]:
            axes = [0, *range(2, x.dim())]
            shape = [1, -1] + [1] * (x.dim() - 2)
            bmean, bvar = x.mean(dim=axes), x.var(dim=axes, unbiased=False)
            y = (x - bmean.reshape(shape)) * (s * torch.rsqrt(bvar + eps)).reshape(shape)
            return y + b.reshape(shape), mu * m + bmean * (1 - m), var * m + bvar * (1 - m)

        return bn

    def op_Dropout(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        with_mask = len(node.output) > 1 and bool(node.output[1])
        known, given = self.known(node, 1)
        if not self.training or (known and self._dropout_ratio(node, a, given) == 0.0):
            if not with_mask:
                return self._unary(node, lambda x: x)
            return (lambda x: (x, torch.ones_like(x, dtype=torch.bool))), [node.input[0]]
        seed = int(a.get("seed", 0))
        fixed = self._dropout_ratio(node, a, given) if known else None
        masks: dict[tuple[Any, ...], tuple[Tensor, Tensor]] = {}

        def dropout(x: Tensor, r: Tensor | None = None) -> tuple[Tensor, ...]:
            if fixed is None:
                assert r is not None  # an unknown ratio is an input
                ratio = self._dropout_ratio(node, a, to_numpy(r))
            else:
                ratio = fixed
            key = (tuple(x.shape), x.dtype, x.device, ratio)
            found = masks.get(key)
            if found is None:  # drawn once per shape, as the reference draws it
                keep = reference_mask(tuple(x.shape), ratio, seed)
                scaled = torch.as_tensor(keep / (1.0 - ratio), dtype=x.dtype, device=x.device)
                found = masks[key] = (scaled, torch.as_tensor(keep, device=x.device))
            scaled, mask = found
            return (x * scaled, mask) if with_mask else (x * scaled,)

        return dropout, ([node.input[0]] if known else list(node.input[:2]))

    def _dropout_ratio(
        self, node: onnx.NodeProto, a: dict[str, Any], given: np.ndarray | None
    ) -> float:
        """The ratio of a Dropout node: its input's value, else its attribute (0.5)."""
        ratio = float(given.reshape(-1)[0]) if given is not None else float(a.get("ratio", 0.5))
        if not 0.0 <= ratio < 1.0:
            raise UsageError(f"node {node.name!r} (Dropout): ratio must lie in [0, 1), not {ratio}")
        return ratio

    def op_Flatten(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        axis = int(a.get("axis", 1))

        def flatten(x: Tensor) -> Tensor:
            ax = axis % x.dim() if axis < 0 else axis
            return x.reshape(math.prod(x.shape[:ax]), -1)

        return self._unary(node, flatten)

    def op_Transpose(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        perm = a.get("perm")
        return self._unary(
            node, lambda x: x.permute(*(perm if perm is not None else reversed(range(x.dim()))))
        )

    def op_Concat(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        axis = int(a["axis"])
        return (lambda *xs: (torch.cat(xs, dim=axis),)), list(node.input)

    def op_Constant(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        value = torch.as_tensor(constant_value(node, []), device=self.ex.torch_device)
        return (lambda: (value,)), []

    def op_LRN(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        size = int(a["size"])
        alpha, beta, bias = (
            float(a.get("alpha", 1e-4)),
            float(a.get("beta", 0.75)),
            float(a.get("bias", 1.0)),
        )
        lo = (size - 1) // 2
        hi = size - 1 - lo

        def lrn(x: Tensor) -> Tensor:
            sq = x * x
            pad = [0, 0] * (x.dim() - 2) + [lo, hi]
            padded = F.pad(sq, pad)
            channels = x.shape[1]
            total = reduce(torch.add, (padded[:, i : i + channels] for i in range(size)))
            return x * (bias + (alpha / size) * total).pow(-beta)

        return self._unary(node, lrn)

    def op_SoftmaxCrossEntropyLoss(
        self, node: onnx.NodeProto, a: dict[str, Any]
    ) -> tuple[Fn, list[str]]:
        reduction = a.get("reduction", "mean")
        ignore = a.get("ignore_index")
        ignore_index = -100 if ignore is None else int(ignore)
        want_log_prob = len(node.output) > 1 and bool(node.output[1])

        def sce(x: Tensor, labels: Tensor, w: Tensor | None = None) -> tuple[Tensor, ...]:
            logp = torch.log_softmax(x, dim=1)
            loss = F.nll_loss(logp, labels.long(), w, ignore_index=ignore_index,
                              reduction=reduction)  # fmt: skip
            return (loss, logp) if want_log_prob else (loss,)

        return sce, [i for i in node.input if i]

    def op_MeanSquaredError(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[Fn, list[str]]:
        reduction = a.get("reduction", "mean")
        return self._binary(node, lambda p, t: F.mse_loss(p, t, reduction=reduction))


class DeviceCorrectCounter:
    """Counts correct predictions on the device of the logits; one host sync per take.

    Each :meth:`add` launches the count of its batch (``argmax``, ``==``, ``sum``) and
    adds it, in place, to a running total that stays on the device; only :meth:`take`
    reads it back. Nothing is kept between steps: holding a batch's logits to count
    several batches at once was tried and measured slower, because the held tensors
    changed how the next steps' forward and backward passes got their memory (about
    20 µs more per step on the benchmark MLP, against the 3 µs the batching saved).
    """

    __slots__ = ("_total",)

    def __init__(self) -> None:
        self._total: Tensor | None = None

    def add(self, logits: Tensor, labels: Tensor) -> None:
        """Add the count of rows where ``logits.argmax(-1) == labels`` (no host sync)."""
        hits = (logits.argmax(-1) == labels).sum()
        if self._total is None:
            self._total = hits  # a new tensor of our own: later counts go in place
        else:
            self._total += hits

    def take(self) -> int:
        """Everything added since the last take, as an int (the one host sync); resets."""
        total, self._total = self._total, None
        return 0 if total is None else int(total.item())


@dataclass
class _Step:
    name: str
    op_type: str
    fn: Fn
    inputs: list[str]
    outputs: list[str]


class _Planned(NamedTuple):
    """A step of a run plan: its inputs' getter and the values dropped after it."""

    step: _Step
    inputs: Callable[[Mapping[str, Tensor]], tuple[Any, ...]]
    outputs: tuple[str, ...]
    release: tuple[str, ...]


def _getter(names: Sequence[str]) -> Callable[[Mapping[str, Tensor]], tuple[Any, ...]]:
    """A function of the environment giving the values of ``names`` as a tuple (``None``
    for an empty name: an absent optional input)."""
    if names and all(names):
        get = itemgetter(*names)
        if len(names) == 1:
            return lambda env: (get(env),)
        return get
    return lambda env: tuple(env[n] if n else None for n in names)


class TorchExecutor(GraphExecutor, NativeTraining):
    """Runs an ONNX network with PyTorch, translated once into native torch calls.

    It offers d5's native training path (:class:`d5core.api.NativeTraining`, with the
    optional ``native_correct_counter`` and ``apply_running_stats``), so that the
    ``torch-*`` optimizers train its tensors in place.

    :param network: a ``d5core.api.Network`` or an ``onnx.ModelProto``.
    :param device: ``"cpu"`` (the default) or a CUDA device.
    """

    name: ClassVar[str] = "torch"
    trains: ClassVar[bool] = True
    #: Every operator type the executor translates.
    supported_ops: ClassVar[frozenset[str]] = frozenset(
        n[3:] for n in dir(_Translator) if n.startswith("op_")
    )

    def __init__(self, network: Any, *, device: str = "cpu") -> None:
        super().__init__(network, device=device)
        self.torch_device = resolve_device(device)
        self._graph = graph_view(self.network)
        self.check_supported()
        self._trainable_set = set(self._graph.trainable)
        #: Running statistics of the last training pass, by BatchNormalization input name.
        self.running_stats: dict[str, Tensor] = {}
        self._constants: dict[str, np.ndarray] = {}
        self._fold_constants()
        self._params: dict[str, Tensor] = {}
        self.set_parameters(self._graph.parameters, _initial=True)
        self._const_tensors = {
            k: to_torch(v, self.torch_device, copy=True) for k, v in self._constants.items()
        }
        self._steps = {t: self._translate(t) for t in (False, True)}
        self._plans: dict[tuple[bool, frozenset[str]], list[_Planned]] = {}

    # -- construction ----------------------------------------------------------

    @classmethod
    def supports(cls, op_type: str, domain: str = "", opset: int | None = None) -> bool | None:
        """Whether the executor translates ``op_type``: operators of ONNX's default domain,
        those of :attr:`supported_ops`, and d5's ``MeanSquaredError`` (domain ``ai.d5``)."""
        if domain == _D5_DOMAIN:
            return op_type in _D5_OPS
        return domain in _DEFAULT_DOMAINS and op_type in cls.supported_ops

    def check_supported(self) -> None:
        """Raise a one-line :class:`UsageError` naming the first unsupported node."""
        for node in self._graph.nodes:
            if not self.supports(node.op_type, node.domain):
                raise self.unsupported(node.op_type, node.name, node.domain)

    def _fold_constants(self) -> None:
        """Evaluate once the Constant nodes, and the ConstantOfShape nodes whose shape
        is a constant or a non-trainable initializer (the others run as torch code)."""
        params = self._graph.parameters
        for node in self._graph.nodes:
            if node.op_type not in _CONSTANTS:
                continue
            values = []
            for name in (i for i in node.input if i):
                value = self._constants.get(name)
                if value is None and name not in self._trainable_set:
                    value = params.get(name)
                if value is None:
                    break
                values.append(value)
            else:
                self._constants[node.output[0]] = constant_value(node, values)

    def _translate(self, training: bool) -> list[_Step]:
        translator = _Translator(self, training)
        steps = []
        for node in self._graph.nodes:
            if node.op_type in _CONSTANTS and node.output[0] in self._constants:
                continue  # folded
            with node_errors(node):
                fn, inputs = translator.translate(node)
            steps.append(_Step(node.name, node.op_type, fn, inputs, list(node.output)))
        return steps

    # -- running ---------------------------------------------------------------

    def _to_tensors(self, feeds: Mapping[str, Any]) -> dict[str, Tensor]:
        self._graph.check_feeds(feeds)
        return {
            k: v if isinstance(v, Tensor) else to_torch(v, self.torch_device)
            for k, v in feeds.items()
        }

    def _plan(self, training: bool, keep: frozenset[str] = frozenset()) -> list[_Planned]:
        """The steps of one mode ready to run: each with a getter of its inputs and the
        intermediate values no later step reads (and neither the graph outputs nor
        ``keep`` name), built once per mode and ``keep``.

        :meth:`_run` drops those values from its environment as soon as their last
        reader ran, so the allocator reuses their memory (still warm in cache) for the
        next outputs, as eager PyTorch code does when its temporaries go out of scope.
        Keeping every intermediate alive until the end made the resnet20 batch-32
        forward pass 1.6x slower than ``torch.nn``: each output landed in fresh pages.
        """
        key = (training, keep)
        cached = self._plans.get(key)
        if cached is not None:
            return cached
        kept = keep | frozenset(self._graph.outputs)
        steps = self._steps[training]
        produced = {o for step in steps for o in step.outputs if o}
        last: dict[str, int] = {}
        for index, step in enumerate(steps):
            for name in step.inputs:
                if name in produced:
                    last[name] = index
            for name in step.outputs:  # an output nobody reads is dropped at once
                if name:
                    last.setdefault(name, index)
        releases: list[list[str]] = [[] for _ in steps]
        for name, index in last.items():
            if name not in kept:
                releases[index].append(name)
        plan = [
            _Planned(step, _getter(step.inputs), tuple(step.outputs), tuple(release))
            for step, release in zip(steps, releases, strict=True)
        ]
        self._plans[key] = plan
        return plan

    def _run(self, feeds: Mapping[str, Tensor], plan: Sequence[_Planned]) -> dict[str, Tensor]:
        """Run a :meth:`_plan`; the graph outputs and the plan's kept names are in the
        result."""
        env: dict[str, Tensor] = {**self._params, **self._const_tensors, **feeds}
        bus = get_bus()
        if bus.wants(GRAPH_NODE + ".end"):
            for planned in plan:
                step = planned.step
                with bus.span(GRAPH_NODE, level=1, node=step.name, op_type=step.op_type):
                    outs = step.fn(*planned.inputs(env))
                    if self.torch_device.type == "cuda":
                        torch.cuda.synchronize(self.torch_device)
                env.update(zip(planned.outputs, outs, strict=False))
                for name in planned.release:
                    env.pop(name, None)
        else:
            for step, inputs, outputs, release in plan:
                env.update(zip(outputs, step.fn(*inputs(env)), strict=False))
                for name in release:
                    env.pop(name, None)
        return env

    def _outputs(self, env: Mapping[str, Tensor]) -> dict[str, np.ndarray]:
        return {n: to_numpy(env[n]) for n in self._graph.outputs}

    def _inference_callable(self, tensors: dict[str, Tensor]) -> Callable[[], dict[str, Tensor]]:
        plan = self._plan(False)

        def run() -> dict[str, Tensor]:
            with torch.no_grad():
                return self._run(tensors, plan)

        return run

    def _train_callable(
        self, tensors: dict[str, Tensor], loss: str
    ) -> Callable[[], tuple[dict[str, Tensor], tuple[Tensor | None, ...]]]:
        names = self._graph.trainable
        leaves = [self._params[n] for n in names]
        plan = self._plan(True, frozenset((loss,)))

        def step() -> tuple[dict[str, Tensor], tuple[Tensor | None, ...]]:
            with torch.enable_grad():
                env = self._run(tensors, plan)
                if loss not in env:
                    raise UsageError(f"{loss!r} is not a tensor of the network")
                value = env[loss]
                if not leaves:  # nothing to train: autograd refuses an empty input list
                    return env, ()
                # a one-element loss needs no explicit grad_outputs (torch seeds it with
                # one); passing them costs torch a 0.5 s import of sympy on first use
                seed = None if value.numel() == 1 else torch.ones_like(value)
                grads = torch.autograd.grad(value, leaves, grad_outputs=seed, allow_unused=True)
            return env, grads

        return step

    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the graph in inference mode; every graph output by name."""
        return self._outputs(self._inference_callable(self._to_tensors(feeds))())

    def inference_and_backprop(
        self, feeds: Mapping[str, np.ndarray], loss: str
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Run in training mode and backprop ``loss`` through autograd.

        :return: every graph output, and the gradient for every trainable parameter
            (zeros for one the loss does not depend on).
        """
        env, grads = self._train_callable(self._to_tensors(feeds), loss)()
        result = {}
        for name, g in zip(self._graph.trainable, grads, strict=True):
            p = self._params[name]
            result[name] = (torch.zeros_like(p) if g is None else g).detach().cpu().numpy()
        return self._outputs(env), result

    def prepare_inference(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """Convert ``feeds`` to tensors now; the callable runs only torch code."""
        return self._inference_callable(self._to_tensors(feeds))

    def prepare_train_step(
        self, feeds: Mapping[str, np.ndarray], loss: str
    ) -> Callable[[], object]:
        """Convert ``feeds`` now; the callable runs forward and autograd only."""
        return self._train_callable(self._to_tensors(feeds), loss)

    # -- native (torch-tensor) training ------------------------------------------

    def to_native(self, feeds: Mapping[str, Any]) -> dict[str, Tensor]:
        """``feeds`` as tensors on the executor's device, converted once.

        numpy arrays become tensors sharing their memory on CPU (``torch.as_tensor``);
        tensors pass through untouched. A trainer calls this once per step.

        :raises UsageError: when a graph input is missing.
        """
        return self._to_tensors(feeds)

    def native_parameters(self) -> dict[str, Tensor]:
        """The live trainable tensors by name, in :attr:`_graph.trainable` order.

        These are the tensors the graph reads: updating them in place (as a bound
        torch optimizer does) changes the network; no copy is made.
        """
        return {
            n: self._params[n]
            for n in self._graph.trainable
            if n in self._params and self._params[n].is_floating_point()
        }

    def native_train_step(
        self, feeds: Mapping[str, Any], loss: str
    ) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """:meth:`inference_and_backprop` without leaving torch.

        :param feeds: tensors (from :meth:`to_native`) or numpy arrays by input name.
        :param loss: the name of the loss output.
        :return: every graph output as a detached tensor, and the gradient of every
            trainable parameter as a tensor in trainable order (zeros for one the loss
            does not depend on). Running statistics are updated as in
            :meth:`inference_and_backprop`; nothing is converted to numpy.
        """
        env, grads = self._train_callable(self._to_tensors(feeds), loss)()
        params = self._params
        result = {
            name: torch.zeros_like(params[name]) if g is None else g
            for name, g in zip(self._graph.trainable, grads, strict=True)
        }
        return {n: env[n].detach() for n in self._graph.outputs}, result

    def native_correct_counter(self) -> DeviceCorrectCounter:
        """A counter of correct predictions kept on this executor's device.

        The trainer's native path adds each step's logits and labels and reads the
        count once per epoch (:class:`d5core.api.CorrectCounter`).
        """
        return DeviceCorrectCounter()

    # -- parameters ------------------------------------------------------------

    def get_parameters(self) -> dict[str, np.ndarray]:
        """Every parameter (initializer) by name, as numpy copies."""
        return {k: v.detach().cpu().numpy().copy() for k, v in self._params.items()}

    def set_parameters(self, params: Mapping[str, Any], *, _initial: bool = False) -> None:
        """Replace parameters by name; each must exist and keep its shape."""
        for name, value in params.items():
            array = np.asarray(value)
            old = self._params.get(name)
            if old is None and not _initial:
                raise UsageError(f"the network has no parameter {name!r}")
            if old is not None and tuple(old.shape) != array.shape:
                raise UsageError(
                    f"parameter {name!r} has shape {tuple(old.shape)}, not {array.shape}"
                )
            if old is not None:  # in place: prepared callables keep their leaves
                with torch.no_grad():
                    old.copy_(torch.as_tensor(array, dtype=old.dtype))
                continue
            t = to_torch(array, self.torch_device, copy=True)
            if name in self._trainable_set and t.is_floating_point():
                t.requires_grad_(True)
            self._params[name] = t

    def apply_running_stats(self) -> None:
        """Write the running statistics of the last training pass into the parameters."""
        if not self.running_stats:  # no BatchNormalization: nothing to write, every step
            return
        self.set_parameters({k: v.detach().cpu().numpy() for k, v in self.running_stats.items()
                             if k in self._params})  # fmt: skip
