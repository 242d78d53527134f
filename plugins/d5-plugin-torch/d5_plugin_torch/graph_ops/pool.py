"""Pooling that torch's pooling functions do not cover: LpPool, and AveragePool with
dilations, as sums over windows computed by a depthwise convolution with a kernel of
ones (which takes strides and dilations)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import onnx
import torch
import torch.nn.functional as F

from d5_plugin_torch.graph_ops.base import Tensor, Translation, TranslatorBase
from d5core.onnx import resolve_pads

__all__ = ["PoolOps", "dilated_average_pool", "window_sums"]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _ceil_extra(size: int, kernel: int, stride: int, dilation: int, begin: int, end: int) -> int:
    """The padding ``ceil_mode`` adds at the end of an axis, so the last partial window
    is computed (a window starting past the input and its begin padding is dropped)."""
    span = (kernel - 1) * dilation + 1
    total = size + begin + end
    out = math.ceil((total - span) / stride) + 1
    if (out - 1) * stride >= size + begin:
        out -= 1
    return max((out - 1) * stride + span - total, 0)


def window_sums(
    x: Tensor,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    pads: Sequence[int],
    ceil: bool,
) -> tuple[Tensor, list[int]]:
    """The sum of ``x`` (``(N, C, *spatial)``) over every pooling window, zeros padded,
    and the F.pad list of the full padding (ONNX pads, then what ``ceil`` adds)."""
    n = len(kernel)
    flat: list[int] = []
    for i in reversed(range(n)):
        extra = (
            _ceil_extra(x.shape[2 + i], kernel[i], strides[i], dilations[i], pads[i], pads[i + n])
            if ceil
            else 0
        )
        flat += [pads[i], pads[i + n] + extra]
    padded = F.pad(x, flat)
    batch, channels = x.shape[:2]
    ones = torch.ones((1, 1, *kernel), dtype=x.dtype, device=x.device)
    sums = _CONV[n](
        padded.reshape(batch * channels, 1, *padded.shape[2:]),
        ones,
        None,
        list(strides),
        0,
        list(dilations),
    )
    return sums.reshape(batch, channels, *sums.shape[2:]), flat


def _geometry(a: dict[str, Any], x: Tensor) -> tuple[list[int], list[int], list[int], list[int]]:
    kernel = [int(k) for k in a["kernel_shape"]]
    n = len(kernel)
    strides = [int(s) for s in a.get("strides") or [1] * n]
    dilations = [int(d) for d in a.get("dilations") or [1] * n]
    begins, ends = resolve_pads(
        x.shape[2:],
        kernel,
        auto_pad=a.get("auto_pad", "NOTSET"),
        pads=a.get("pads"),
        strides=strides,
        dilations=dilations,
    )
    return kernel, strides, dilations, [*begins, *ends]


def dilated_average_pool(a: dict[str, Any], x: Tensor) -> Tensor:
    """AveragePool for any dilations: window sums over the count of the values (and,
    with ``count_include_pad``, of the explicit pads) each window covers."""
    kernel, strides, dilations, pads = _geometry(a, x)
    n = len(kernel)
    total, flat = window_sums(x, kernel, strides, dilations, pads, bool(int(a.get("ceil_mode", 0))))
    ones = torch.ones((1, 1, *x.shape[2:]), dtype=x.dtype, device=x.device)
    explicit = [p for i in reversed(range(n)) for p in (pads[i], pads[i + n])]
    if bool(int(a.get("count_include_pad", 0))):
        region = F.pad(ones, explicit, value=1.0)  # the pads count, what ceil_mode adds not
        region = F.pad(region, [f - e for f, e in zip(flat, explicit, strict=True)])
    else:
        region = F.pad(ones, flat)
    kernel_ones = torch.ones((1, 1, *kernel), dtype=x.dtype, device=x.device)
    count = _CONV[n](region, kernel_ones, None, list(strides), 0, list(dilations))
    return total / count


class PoolOps(TranslatorBase):
    """Translators of pooling operators torch has no function for."""

    def op_LpPool(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        p = float(a.get("p", 2))
        ceil = bool(int(a.get("ceil_mode", 0)))

        def lp_pool(x: Tensor) -> Tensor:
            kernel, strides, dilations, pads = _geometry(a, x)
            sums, _ = window_sums(torch.abs(x) ** p, kernel, strides, dilations, pads, ceil)
            return sums ** (1.0 / p)

        return self._unary(node, lp_pool)
