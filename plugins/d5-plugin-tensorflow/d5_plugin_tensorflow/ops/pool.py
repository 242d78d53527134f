"""Pooling: ``MaxPool``, ``AveragePool`` and ``GlobalAveragePool``.

``MaxPool`` and ``AveragePool`` run on channels-last data, like the convolutions.
TensorFlow's pooling kernels take ``SAME`` or ``VALID`` padding; other ONNX paddings
(asymmetric, from ``ceil_mode``, or counted by ``count_include_pad``) pad explicitly with
``tf.pad`` in the graph: with ``-inf`` for ``MaxPool``; with zeros for ``AveragePool``,
whose window means are then rescaled by a constant computed when the graph is built, so
that each output is divided by the count ONNX prescribes. Pools TensorFlow has no kernel
for (dilated ones, 3-D ones in float64, 3-D ``MaxPool`` with indices, and under XLA
``MaxPool`` with indices) are written as the maximum or sum over the strided slices of
every kernel position (:func:`~d5_plugin_tensorflow.ops._spatial.window_stack`).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from d5_plugin_tensorflow.ops._base import Plan, Signature, TFOperator, tf
from d5_plugin_tensorflow.ops._spatial import (
    Window,
    channels_first_name,
    channels_last,
    data_format,
    explicit_pads,
    padding_argument,
    same_or_valid,
    window_stack,
)
from d5core.onnx import average_pool_divisors
from d5core.onnx import operator_rules as rules

__all__ = ["AveragePool", "GlobalAveragePool", "MaxPool"]

_LAYOUT_NOTE = (
    "X and the outputs are moved between ONNX's layout and channels-last outside the timed call"
)
_WINDOWS_NOTE = (
    "no TensorFlow kernel for this pool: reduced over the strided slices of each kernel position"
)


class _Pool(rules.PoolRules, TFOperator):
    window_class = Window

    def layout_of(self, sig: Signature) -> str:
        return data_format(len(self.kernel_shape))

    def _shapes(
        self, sig: Signature
    ) -> tuple[tuple[int, ...], Window, tuple[int, ...], tuple[int, ...]]:
        """The input shape, the (lifted) window and its output sizes, and the output's
        ONNX shape."""
        onnx, out = self._window(sig)
        x = sig.shapes[0]
        assert x is not None
        lifted = onnx.lifted()
        return x, lifted, out if len(out) > 1 else (1, *out), (x[0], x[1], *out)


class MaxPool(rules.MaxPoolRules, _Pool):
    """ONNX ``MaxPool``, with both outputs: ``Y`` and ``Indices``.

    ``Indices`` are flat positions in the unpadded input, ``(n * C + c) * prod(spatial)``
    plus the position within the image in row-major (``storage_order=0``) or column-major
    (``storage_order=1``) order. In 1-D and 2-D, ``tf.nn.max_pool_with_argmax`` gives the
    maximum and its position in the (padded) channels-last image; a lookup table built
    with the graph maps those positions to ONNX's. Other pools take the first maximum
    over the window's slices and map the kernel position the same way.
    """

    def _within(self, coords: list[np.ndarray], sizes: tuple[int, ...]) -> np.ndarray:
        """ONNX's position within one image of the (clipped) spatial ``coords``."""
        inside = [np.clip(c, 0, n - 1) for c, n in zip(coords, sizes, strict=True)]
        order: Literal["C", "F"] = "C" if self.storage_order == 0 else "F"
        return np.asarray(np.ravel_multi_index(inside, sizes, order=order), dtype=np.int64)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        x, win, out, out_shape = self._shapes(sig)
        n, c = x[0], x[1]
        sizes = win.sizes
        image = math.prod(sizes)
        # (n * C + c) * prod(spatial), broadcast over the channels-last output.
        planes = (np.arange(n * c, dtype=np.int64) * image).reshape(n, *([1] * len(out)), c)
        notes = [_LAYOUT_NOTE]
        if not self.xla and len(sizes) == 2 and not win.dilated:
            kernel = self._argmax_kernel(win, out, c, planes, notes)
        else:
            kernel = self._windows_kernel(win, out, c, planes, notes)
        layout = channels_last(out_shape)
        return Plan(kernel, (channels_last(x),), (layout, layout), tuple(notes))

    def _argmax_kernel(
        self, win: Window, out: tuple[int, ...], c: int, planes: np.ndarray, notes: list[str]
    ) -> Any:
        named = same_or_valid(win, out)
        ksize, strides = list(win.kernel), list(win.strides)
        if named is None:
            pads = explicit_pads(win, out)
            padding = padding_argument(pads)
            begin = win.begin_pads
            seen = tuple(n + b + e for n, (b, e) in zip(win.sizes, pads, strict=True))
            notes.append("pads: tf.pad with -inf inside the graph")
        else:
            padding, begin, seen = None, (0,) * len(win.sizes), win.sizes
        # argmax = (y * W' + x) * C + c in the image the kernel saw (W' its width).
        where = np.unravel_index(np.arange(math.prod(seen) * c), (*seen, c))
        onnx = self._within([w - b for w, b in zip(where[:-1], begin, strict=True)], win.sizes)
        table = tf.constant(onnx + where[-1] * math.prod(win.sizes), dtype=tf.int64)
        # The table holds the channel's plane; the offset adds the image's.
        offset = tf.constant(planes[..., :1], dtype=tf.int64)
        pool, pad, gather, neg = tf.nn.max_pool_with_argmax, tf.pad, tf.gather, -math.inf

        def kernel(x: Any) -> tuple[Any, Any]:
            if padding is not None:
                x = pad(x, padding, constant_values=neg)
            y, argmax = pool(x, ksize, strides, named or "VALID")
            return y, gather(table, argmax) + offset

        return kernel

    def _windows_kernel(
        self, win: Window, out: tuple[int, ...], c: int, planes: np.ndarray, notes: list[str]
    ) -> Any:
        notes.append(_WINDOWS_NOTE)
        k = math.prod(win.kernel)
        # ONNX's position within the image of each (output position, kernel position).
        grid = np.meshgrid(*(np.arange(o) for o in out), indexing="ij")
        offsets = np.unravel_index(np.arange(k), win.kernel)
        coords = [
            (g * s - b)[..., None] + (j * d)
            for g, s, (b, _), j, d in zip(
                grid, win.strides, win.pads, offsets, win.dilations, strict=True
            )
        ]
        table = tf.constant(self._within(coords, win.sizes).reshape(-1), dtype=tf.int64)
        base = np.arange(math.prod(out), dtype=np.int64).reshape(1, *out, 1) * k
        base_t, offset = tf.constant(base), tf.constant(planes, dtype=tf.int64)
        reduce_max, argmax, gather = tf.reduce_max, tf.math.argmax, tf.gather

        def kernel(x: Any) -> tuple[Any, Any]:
            stack = window_stack(x, win, out, -math.inf)
            first = argmax(stack, axis=-1, output_type=tf.int64)
            return reduce_max(stack, axis=-1), gather(table, first + base_t) + offset

        return kernel


class AveragePool(rules.AveragePoolRules, _Pool):
    """ONNX ``AveragePool`` (with opset 19's dilations): ``tf.nn.avg_pool``.

    TensorFlow's ``SAME`` divides by the input elements in each window, which is ONNX's
    ``count_include_pad=0``; other paddings are explicit zeros, then a rescale.
    ``count_include_pad`` counts explicit pads but not the part of a ceil-mode window
    beyond them, as the reference does.
    """

    def _divisors(self, win: Window, out: tuple[int, ...]) -> np.ndarray:
        """How many input (or pad) elements ONNX divides each output's sum by."""
        return average_pool_divisors(win, out, count_include_pad=self.count_include_pad)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        x, win, out, out_shape = self._shapes(sig)
        dtype = sig.tf_dtype
        notes = [_LAYOUT_NOTE]
        divisors = self._divisors(win, out).reshape(1, *out, 1)
        no_kernel = len(out) == 3 and sig.dtype == "float64" and not self.xla
        if win.dilated or no_kernel:
            notes.append(_WINDOWS_NOTE)
            inverse = tf.constant(1.0 / divisors, dtype=dtype)
            reduce_sum = tf.reduce_sum

            def windows(x: Any) -> tuple[Any]:
                return (reduce_sum(window_stack(x, win, out, 0.0), axis=-1) * inverse,)

            kernel: Any = windows
        else:
            kernel = self._native(win, out, divisors, dtype, notes)
        return Plan(kernel, (channels_last(x),), (channels_last(out_shape),), tuple(notes))

    def _native(
        self, win: Window, out: tuple[int, ...], divisors: np.ndarray, dtype: Any, notes: list[str]
    ) -> Any:
        ksize, strides = list(win.kernel), list(win.strides)
        pool = tf.nn.avg_pool
        named = same_or_valid(win, out)
        if named == "SAME" and self.count_include_pad:
            named = None
        if named is not None:

            def native(x: Any) -> tuple[Any]:
                return (pool(x, ksize, strides, named),)

            return native
        padding = padding_argument(explicit_pads(win, out))
        scale_np = math.prod(win.kernel) / divisors
        notes.append("pads: tf.pad with zeros inside the graph, then a rescale to ONNX's counts")
        pad = tf.pad
        if np.all(scale_np == 1.0):

            def padded(x: Any) -> tuple[Any]:
                return (pool(pad(x, padding), ksize, strides, "VALID"),)

            return padded
        scale = tf.constant(scale_np, dtype=dtype)

        def rescaled(x: Any) -> tuple[Any]:
            return (pool(pad(x, padding), ksize, strides, "VALID") * scale,)

        return rescaled


class GlobalAveragePool(rules.GlobalAveragePoolRules, TFOperator):
    """ONNX ``GlobalAveragePool``: ``tf.reduce_mean`` over the spatial axes, kept as
    size 1, in ONNX's own channels-first layout."""

    def layout_of(self, sig: Signature) -> str:
        x = sig.shapes[0]
        assert x is not None
        return channels_first_name(len(x))

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        shape = sig.shapes[0]
        assert shape is not None
        axes = list(range(2, len(shape)))
        mean = tf.reduce_mean

        def kernel(x: Any) -> tuple[Any]:
            return (mean(x, axes, keepdims=True),)

        return Plan(kernel)
