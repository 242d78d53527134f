"""Pooling: ``MaxPool``, ``AveragePool`` and ``GlobalAveragePool``.

torch pools take one symmetric padding of at most half the kernel. Other ONNX paddings
(asymmetric, larger, from ``auto_pad``, or ceil-mode windows past the pads) pad
explicitly with ``F.pad`` and pool unpadded: with ``-inf`` for ``MaxPool``; with zeros for
``AveragePool``, whose window means are then rescaled by a constant computed when the
kernel is built, so that each output is divided by the count ONNX prescribes.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5_plugin_torch.ops._spatial import Window, pad_argument
from d5core.onnx import average_pool_divisors
from d5core.onnx import operator_rules as rules

__all__ = ["AveragePool", "GlobalAveragePool", "MaxPool"]

_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


class _Pool(rules.PoolRules, TorchOperator):
    def _native(self, win: Window) -> bool:
        """Whether torch's own padding gives the ONNX result."""
        return win.symmetric and all(
            b <= k // 2 for (b, _), k in zip(win.pads, win.kernel, strict=True)
        )


class MaxPool(rules.MaxPoolRules, _Pool):
    """ONNX ``MaxPool``, with both outputs: ``Y`` and ``Indices``.

    ``Indices`` are flat positions in the unpadded input, ``(n * C + c) * prod(spatial)``
    plus the position within the image in row-major (``storage_order=0``) or column-major
    (``storage_order=1``) order. torch's pooling returns positions within the (padded)
    image; they are mapped by adding a constant per image and, where the layouts differ,
    by a lookup table, both built with the kernel.
    """

    def _index_table(
        self, sizes: tuple[int, ...], begin: tuple[int, ...], padded: tuple[int, ...]
    ) -> np.ndarray | None:
        """ONNX's position within the image for each of torch's positions within the
        ``padded`` image; ``None`` when they are the same."""
        if padded == sizes and not any(begin) and self.storage_order == 0:
            return None
        coords = np.unravel_index(np.arange(math.prod(padded)), padded)
        inside = [np.clip(c - b, 0, n - 1) for c, b, n in zip(coords, begin, sizes, strict=True)]
        order: Literal["C", "F"] = "C" if self.storage_order == 0 else "F"
        table: np.ndarray = np.ravel_multi_index(inside, sizes, order=order)
        return table

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        win, out = self._window(sig)
        shape = sig.shapes[0]
        assert shape is not None
        pool = _MAX[len(out)]
        kernel, strides, dilations, ceil = win.kernel, win.strides, win.dilations, self.ceil_mode
        sizes = win.sizes
        planes = torch.arange(shape[0] * shape[1], device=sig.device) * math.prod(sizes)
        offset = planes.reshape(shape[0], shape[1], *([1] * len(sizes)))
        if self._native(win):
            padding = win.begin_pads
            table_np = self._index_table(sizes, (0,) * len(sizes), sizes)

            def pooled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                return pool(x, kernel, strides, padding, dilations, ceil, True)

        else:
            pads = self._explicit_pads(win, out)
            pad = pad_argument(pads)
            padded = tuple(n + b + e for n, (b, e) in zip(sizes, pads, strict=True))
            table_np = self._index_table(sizes, win.begin_pads, padded)

            def pooled(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                xp = F.pad(x, pad, value=-math.inf)
                return pool(xp, kernel, strides, 0, dilations, False, True)

        if table_np is None:

            def direct(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                y, where = pooled(x)
                return y, where + offset

            return direct
        table = torch.tensor(table_np, dtype=torch.int64, device=sig.device)
        take = torch.take

        def mapped(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            y, where = pooled(x)
            return y, take(table, where) + offset

        return mapped


class AveragePool(rules.AveragePoolRules, _Pool):
    """ONNX ``AveragePool`` (with opset 19's dilations).

    ``count_include_pad`` counts explicit pads but not the part of a ceil-mode window
    beyond them, as torch does. torch's average pooling has no dilation: dilated windows
    are summed by a depthwise convolution with a kernel of ones, then divided.
    """

    def _divisors(self, win: Window, out: tuple[int, ...]) -> np.ndarray:
        """How many input (or pad) elements ONNX divides each output's sum by."""
        return average_pool_divisors(win, out, count_include_pad=self.count_include_pad)

    def _native(self, win: Window) -> bool:
        return super()._native(win) and all(d == 1 for d in win.dilations)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        win, out = self._window(sig)
        kernel, strides, ceil = win.kernel, win.strides, self.ceil_mode
        if self._native(win):
            pool = _AVG[len(out)]
            padding, include = win.begin_pads, self.count_include_pad

            def native(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
                return (pool(x, kernel, strides, padding, ceil, include),)

            return native
        pad = pad_argument(self._explicit_pads(win, out))
        divisors = self._divisors(win, out)
        if any(d != 1 for d in win.dilations):
            shape = sig.shapes[0]
            assert shape is not None
            channels, dilations, conv = shape[1], win.dilations, _CONV[len(out)]
            ones = torch.ones((channels, 1, *kernel), dtype=sig.dtype, device=sig.device)
            inverse = torch.tensor(1.0 / divisors, dtype=sig.dtype, device=sig.device)

            def dilated(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
                sums = conv(F.pad(x, pad), ones, None, strides, 0, dilations, channels)
                return (sums * inverse,)

            return dilated
        pool = _AVG[len(out)]
        scale_np = math.prod(kernel) / divisors
        if np.all(scale_np == 1.0):

            def padded(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
                return (pool(F.pad(x, pad), kernel, strides, 0, False, True),)

            return padded
        scale = torch.tensor(scale_np, dtype=sig.dtype, device=sig.device)

        def rescaled(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
            return (pool(F.pad(x, pad), kernel, strides, 0, False, True) * scale,)

        return rescaled


class GlobalAveragePool(rules.GlobalAveragePoolRules, TorchOperator):
    """ONNX ``GlobalAveragePool``: the mean over all spatial axes, kept as size 1."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        shape = sig.shapes[0]
        assert shape is not None
        axes = tuple(range(2, len(shape)))

        def kernel(x: torch.Tensor) -> tuple[torch.Tensor]:
            return (torch.mean(x, axes, keepdim=True),)

        return kernel
