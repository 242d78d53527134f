"""Pooling: ``MaxPool``, ``AveragePool`` and ``GlobalAveragePool``.

``mx.nd.Pooling`` takes one symmetric padding and no dilation. Other ONNX paddings
(asymmetric, larger than half the kernel, from ``auto_pad``, or ceil-mode windows past
the pads) pad explicitly and pool unpadded: with ``-inf`` for ``MaxPool``; with zeros for
``AveragePool``, whose window means are then rescaled by a constant computed when the
kernel is built, so that each output is divided by the count ONNX prescribes. Dilated
average windows are summed by a depthwise ``mx.nd.Convolution`` with a kernel of ones.

MXNet's pooling returns no argmax: ``MaxPool``'s ``Indices`` come from the windows
themselves, one strided slice of the padded input per kernel offset, stacked; their
``argmax`` picks the offset, and a table built with the kernel maps (offset, output
position) to ONNX's flat index.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Literal

import numpy as np

from d5_plugin_mxnet.ops._base import MXNetOperator, Plan, Signature, mx
from d5_plugin_mxnet.ops._spatial import Window, pad_spatial
from d5core.onnx import average_pool_divisors
from d5core.onnx import operator_rules as rules

__all__ = ["AveragePool", "GlobalAveragePool", "MaxPool"]


class _Pool(rules.PoolRules, MXNetOperator):
    def _native(self, win: Window) -> bool:
        """Whether ``mx.nd.Pooling``'s own padding (floor mode) gives the ONNX result."""
        return (
            win.symmetric
            and not self.ceil_mode
            and all(d == 1 for d in win.dilations)
            and all(b <= k // 2 for (b, _), k in zip(win.pads, win.kernel, strict=True))
        )


class MaxPool(rules.MaxPoolRules, _Pool):
    """ONNX ``MaxPool``, with both outputs: ``Y`` and ``Indices``.

    ``Y`` is ``mx.nd.Pooling`` (on the explicitly padded input where needed), or the
    maximum of the stacked windows when dilated. ``Indices`` are flat positions in the
    unpadded input, ``(n * C + c) * prod(spatial)`` plus the position within the image
    in row-major (``storage_order=0``) or column-major (``storage_order=1``) order,
    computed in float64 (exact below 2**53) and returned as int64.
    """

    def _index_table(
        self, win: Window, out: tuple[int, ...], begin: tuple[int, ...]
    ) -> np.ndarray[Any, Any]:
        """ONNX's position within the image, for each kernel offset (rows) and output
        position (columns, row-major)."""
        order: Literal["C", "F"] = "C" if self.storage_order == 0 else "F"
        grids = np.meshgrid(*(np.arange(o) for o in out), indexing="ij")
        rows = []
        for offset in itertools.product(*(range(k) for k in win.kernel)):
            coords = [
                np.clip(g * s + o * d - b, 0, n - 1).reshape(-1)
                for g, s, o, d, b, n in zip(
                    grids, win.strides, offset, win.dilations, begin, win.sizes, strict=True
                )
            ]
            rows.append(np.ravel_multi_index(coords, win.sizes, order=order))
        table: np.ndarray[Any, Any] = np.stack(rows).astype(np.float64)
        return table

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        win, out = self._window(sig)
        shape = sig.shapes[0]
        assert shape is not None
        n, c = shape[0], shape[1]
        pads = self._explicit_pads(win, out)
        positions = math.prod(out)
        table_np = self._index_table(win, out, win.begin_pads).reshape(-1)
        table = mx.nd.array(table_np, dtype="float64")
        column = mx.nd.array(np.arange(positions).reshape(1, 1, -1), dtype="float64")
        planes = np.arange(n * c, dtype=np.float64) * math.prod(win.sizes)
        offset = mx.nd.array(planes.reshape(n, c, 1), dtype="float64")
        slices = []
        for at in itertools.product(*(range(k) for k in win.kernel)):
            starts = [o * d for o, d in zip(at, win.dilations, strict=True)]
            ends = [b + (m - 1) * s + 1 for b, m, s in zip(starts, out, win.strides, strict=True)]
            slices.append(((None, None, *starts), (None, None, *ends), (None, None, *win.strides)))
        nd = mx.nd
        native, dilated = self._native(win), any(d != 1 for d in win.dilations)
        options = {"kernel": win.kernel, "stride": win.strides, "pool_type": "max"}
        options["pad"] = win.begin_pads if native else (0,) * len(out)
        out_shape = (n, c, *out)

        def kernel(x: Any) -> tuple[Any, Any]:
            xp = pad_spatial(x, shape, pads, -math.inf)
            windows = nd.stack(*(nd.slice(xp, begin=b, end=e, step=s) for b, e, s in slices),
                               axis=2)  # fmt: skip
            y = nd.max(windows, axis=2) if dilated else nd.Pooling(x if native else xp, **options)
            which = nd.cast(nd.argmax(windows, axis=2), "float64")
            spots = nd.broadcast_add(nd.reshape(which, shape=(n, c, positions)) * positions, column)
            picked = nd.broadcast_add(nd.take(table, spots), offset)
            return y, nd.reshape(picked, shape=out_shape)

        notes = ["Indices from stacked window slices and argmax (MXNet's pooling has none)"]
        if dilated:
            notes.append("dilated windows: Y is the maximum of the stacked slices")
        elif not native:
            notes.append("pads applied by mx.nd.pad before pooling")
        return Plan(kernel, dtypes={1: "int64"}, notes=tuple(notes))


class AveragePool(rules.AveragePoolRules, _Pool):
    """ONNX ``AveragePool`` (with opset 19's dilations).

    ``mx.nd.Pooling`` with ``count_include_pad`` when its own padding fits; otherwise
    the explicitly padded input is pooled (or, dilated, summed by a depthwise
    convolution of ones) and multiplied by a constant that makes each output the ONNX
    mean: ``count_include_pad`` counts explicit pads but not the part of a ceil-mode
    window beyond them.
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        win, out = self._window(sig)
        shape = sig.shapes[0]
        assert shape is not None
        pooling, nd = mx.nd.Pooling, mx.nd
        options: dict[str, Any] = {"kernel": win.kernel, "stride": win.strides, "pool_type": "avg"}
        if self._native(win):
            options.update(pad=win.begin_pads, count_include_pad=self.count_include_pad)
            return Plan(lambda x: (pooling(x, **options),))
        pads = self._explicit_pads(win, out)
        divisors = average_pool_divisors(win, out, count_include_pad=self.count_include_pad)
        notes = ("pads applied by mx.nd.pad, means rescaled to ONNX's divisors",)
        if any(d != 1 for d in win.dilations):
            channels = shape[1]
            ones = nd.ones((channels, 1, *win.kernel), dtype=sig.dtype)
            inverse = nd.array(1.0 / divisors, dtype=sig.dtype)
            conv_options = {
                "kernel": win.kernel,
                "stride": win.strides,
                "dilate": win.dilations,
                "pad": (0,) * len(out),
                "num_filter": channels,
                "num_group": channels,
                "no_bias": True,
            }

            def dilated(x: Any) -> tuple[Any]:
                sums = nd.Convolution(pad_spatial(x, shape, pads), ones, **conv_options)
                return (nd.broadcast_mul(sums, inverse),)

            return Plan(dilated, notes=notes)
        options.update(pad=(0,) * len(out), count_include_pad=True)
        scale_np = math.prod(win.kernel) / divisors
        if np.all(scale_np == 1.0):
            return Plan(lambda x: (pooling(pad_spatial(x, shape, pads), **options),), notes=notes)
        scale = nd.array(scale_np, dtype=sig.dtype)

        def rescaled(x: Any) -> tuple[Any]:
            return (nd.broadcast_mul(pooling(pad_spatial(x, shape, pads), **options), scale),)

        return Plan(rescaled, notes=notes)


class GlobalAveragePool(rules.GlobalAveragePoolRules, MXNetOperator):
    """ONNX ``GlobalAveragePool``: ``mx.nd.mean`` over all spatial axes, kept as size 1."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        shape = sig.shapes[0]
        assert shape is not None
        axes, mean = tuple(range(2, len(shape))), mx.nd.mean
        return Plan(lambda x: (mean(x, axis=axes, keepdims=True),))
