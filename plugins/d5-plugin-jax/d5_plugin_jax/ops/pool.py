"""Pooling: ``MaxPool``, ``AveragePool`` and ``GlobalAveragePool``.

ONNX's paddings (asymmetric, from ``auto_pad``, ceil-mode windows past the pads) become
explicit pads and unpadded, floor-mode windows (:meth:`PoolRules._explicit_pads`): with
``-inf`` for ``MaxPool``, zeros for ``AveragePool``, whose window sums
(``lax.reduce_window``) are divided by the counts ONNX prescribes, computed when the
kernel is built.

JAX has no pooling that returns the position of each maximum, which ONNX's ``MaxPool``
outputs as ``Indices``: the kernel takes the ``prod(kernel_shape)`` strided views of the
padded input (one per tap of the window), stacks them, and takes the maximum and its
first position with ``argmax``; a table built with the kernel maps each tap to ONNX's
flat index. ``Y`` is picked at that position, so its gradient goes to the first
maximum of each window, as in d5's reference.
"""

from __future__ import annotations

import itertools
import math
from typing import Any, Literal

import numpy as np

from d5_plugin_jax.ops._base import JaxOperator, Kernel, Signature, jax, jnp
from d5core.onnx import average_pool_divisors
from d5core.onnx import operator_rules as rules

__all__ = ["AveragePool", "GlobalAveragePool", "MaxPool"]

lax = jax.lax


def _pad_config(pads: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    return [(0, 0, 0), (0, 0, 0)] + [(b, e, 0) for b, e in pads]


class MaxPool(rules.MaxPoolRules, JaxOperator):
    """ONNX ``MaxPool``, with both outputs: ``Y`` and ``Indices`` (see the module
    docstring). ``Indices`` are flat positions in the unpadded input,
    ``(n * C + c) * prod(spatial)`` plus the position within the image in row-major
    (``storage_order=0``) or column-major (``storage_order=1``) order."""

    def _result_dtype(self, index: int, computed: Any, sig: Signature) -> np.dtype[Any] | None:
        return np.dtype(np.int64) if index == 1 else None

    def _table(self, sig: Signature) -> tuple[list[tuple[int, int]], list[Any], np.ndarray]:
        """The explicit pads, the start of each tap in the padded input, and the
        ``(taps, N, C, out...)`` table of ONNX's flat index for each tap and output."""
        win, out = self._window(sig)
        shape = sig.shapes[0]
        assert shape is not None
        pads = self._explicit_pads(win, out)
        sizes = win.sizes
        taps = list(itertools.product(*(range(k) for k in win.kernel)))
        order: Literal["C", "F"] = "C" if self.storage_order == 0 else "F"
        table = np.empty((len(taps), shape[0], shape[1], *out), dtype=np.int64)
        planes = (np.arange(shape[0] * shape[1]) * math.prod(sizes)).reshape(
            shape[0], shape[1], *([1] * len(sizes))
        )
        starts = []
        for t, tap in enumerate(taps):
            start = [k * d for k, d in zip(tap, win.dilations, strict=True)]
            starts.append(start)
            coords = np.meshgrid(
                *(
                    np.clip(st + np.arange(o) * s - b, 0, n - 1)
                    for st, o, s, (b, _), n in zip(
                        start, out, win.strides, pads, sizes, strict=True
                    )
                ),
                indexing="ij",
            )
            flat = np.asarray(np.ravel_multi_index(coords, sizes, order=order))
            table[t] = planes + flat[None, None]
        return pads, starts, table

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        win, out = self._window(sig)
        pads, starts, table_np = self._table(sig)
        shape = sig.shapes[0]
        assert shape is not None
        config = _pad_config(pads)
        strides = (1, 1, *win.strides)
        limits = [
            (
                shape[0],
                shape[1],
                *(st + (o - 1) * s + 1 for st, o, s in zip(start, out, win.strides, strict=True)),
            )
            for start in starts
        ]
        begins = [(0, 0, *start) for start in starts]
        index_type = "int64" if sig.wide else "int32"
        table = table_np.astype(index_type)
        self.timed_notes = ("Y and Indices from the stacked taps of each window (argmax)",)

        def kernel(x: Any) -> tuple[Any, Any]:
            low = lax.convert_element_type(-jnp.inf, x.dtype)
            xp = lax.pad(x, low, config)
            stacked = jnp.stack(
                [lax.slice(xp, b, lim, strides) for b, lim in zip(begins, limits, strict=True)]
            )
            where = jnp.argmax(stacked, axis=0)[None]
            y = jnp.take_along_axis(stacked, where, axis=0)[0]
            indices = jnp.take_along_axis(jnp.asarray(table), where, axis=0)[0]
            return y, indices

        return kernel


class AveragePool(rules.AveragePoolRules, JaxOperator):
    """ONNX ``AveragePool`` (with opset 19's dilations): window sums by
    ``lax.reduce_window`` over the zero-padded input, divided by ONNX's counts
    (``count_include_pad`` counts explicit pads but not the part of a ceil-mode window
    beyond them)."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        win, out = self._window(sig)
        config = _pad_config(self._explicit_pads(win, out))
        divisors = average_pool_divisors(win, out, count_include_pad=self.count_include_pad)
        inverse_np = (1.0 / divisors).astype(sig.dtype)
        dims = (1, 1, *win.kernel)
        strides = (1, 1, *win.strides)
        dilation = (1, 1, *win.dilations)

        # a concrete zero makes reduce_window the differentiable window sum
        zero = np.zeros((), dtype=sig.dtype)

        def kernel(x: Any) -> tuple[Any]:
            xp = lax.pad(x, zero, config)
            sums = lax.reduce_window(xp, zero, lax.add, dims, strides, "VALID", None, dilation)
            return (sums * jnp.asarray(inverse_np),)

        return kernel


class GlobalAveragePool(rules.GlobalAveragePoolRules, JaxOperator):
    """ONNX ``GlobalAveragePool``: the mean over all spatial axes, kept as size 1."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        shape = sig.shapes[0]
        assert shape is not None
        axes = tuple(range(2, len(shape)))
        return lambda x: (jnp.mean(x, axis=axes, keepdims=True),)
