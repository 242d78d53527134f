"""Conv and ConvTranspose over 1, 2 or 3 (or more) spatial axes, by im2col and matmul.

A convolution with ``group`` groups multiplies, per group, the weights
``(M/group, C/group * prod(kernel))`` by the windows ``(C/group * prod(kernel), out)``.
ConvTranspose is the adjoint of Conv's input gradient: it multiplies by the transposed
weights and scatters (col2im) what it gets into the output.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np

from d5_plugin_numpy.ops.base import ReferenceOperator, as_ints, as_str
from d5_plugin_numpy.ops.windows import (
    Geometry,
    crop,
    gather,
    pad,
    scatter,
    spatial_attribute,
    window_geometry,
)
from d5core.api import UsageError
from d5core.onnx import AUTO_PADS

__all__ = ["Conv", "ConvTranspose"]


class _ConvBase(ReferenceOperator):
    input_names = ("X", "W", "B")
    min_inputs = 2

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.auto_pad = as_str(attributes["auto_pad"])
        if self.auto_pad not in AUTO_PADS:
            raise UsageError(
                f"{self.op_type} auto_pad must be one of {', '.join(AUTO_PADS)}, "
                f"not {self.auto_pad!r}"
            )
        self.group = int(attributes["group"])
        if self.group < 1:
            raise UsageError(f"{self.op_type} group must be positive, not {self.group}")
        self.kernel_shape = self._ints(attributes, "kernel_shape")
        self.strides = self._ints(attributes, "strides")
        self.dilations = self._ints(attributes, "dilations")
        self.pads = self._ints(attributes, "pads")

    def _ints(self, attributes: Mapping[str, Any], name: str) -> tuple[int, ...] | None:
        value = attributes.get(name)
        return None if value is None else as_ints(value, f"{self.op_type} attribute {name}")

    def _check_common(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_rank(shapes, 0, at_least=3)
        x, w = shapes[0], shapes[1]
        if len(w) != len(x):
            raise UsageError(
                f"{self.input_name(1)} must have rank {len(x)} like X, but has shape {w}"
            )
        if self.kernel_shape is not None and tuple(self.kernel_shape) != tuple(w[2:]):
            raise UsageError(
                f"{self.op_type} kernel_shape {list(self.kernel_shape)} does not match "
                f"the spatial shape {list(w[2:])} of W"
            )
        rank = len(x) - 2
        spatial_attribute(self.strides, rank, 1, "strides", self.op_type)
        spatial_attribute(self.dilations, rank, 1, "dilations", self.op_type)


class Conv(_ConvBase):
    """ONNX Conv: ``X (N, C, *S)``, ``W (M, C/group, *K)``, optional bias ``B (M)``."""

    op_type = "Conv"
    defaults = MappingProxyType(
        {
            "auto_pad": "NOTSET",
            "dilations": None,
            "group": 1,
            "kernel_shape": None,
            "pads": None,
            "strides": None,
        }
    )

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self._check_common(shapes)
        x, w = shapes[0], shapes[1]
        if x[1] != w[1] * self.group or w[0] % self.group:
            raise UsageError(
                f"{self.input_name(1)} has shape {w}; with group={self.group} and X of "
                f"shape {x} it must be (M, {x[1] // self.group}, ...) with M divisible "
                f"by {self.group}"
            )
        if len(shapes) > 2 and tuple(shapes[2]) != (w[0],):
            raise UsageError(f"{self.input_name(2)} must have shape ({w[0]},), not {shapes[2]}")
        self.geometry(x, w)

    def geometry(self, x: Sequence[int], w: Sequence[int]) -> Geometry:
        return window_geometry(
            self.op_type,
            tuple(x[2:]),
            tuple(w[2:]),
            strides=self.strides,
            dilations=self.dilations,
            pads=self.pads,
            auto_pad=self.auto_pad,
        )

    def _windows(self, x: np.ndarray, geo: Geometry) -> np.ndarray:
        """``(N, group, C/group * prod(K), prod(out))``."""
        xp = pad(x, geo.pads_begin, geo.pads_end)
        cols = gather(xp, geo.kernel, geo.strides, geo.dilations, geo.out)
        n, g = x.shape[0], self.group
        return cols.reshape(n, g, -1, math.prod(geo.out))

    #: With :attr:`retain`: the input of the last forward and its windows.
    _kept: tuple[np.ndarray, np.ndarray] | None = None

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x, w = inputs[0], inputs[1]
        geo = self.geometry(x.shape, w.shape)
        g, m = self.group, w.shape[0]
        cols = self._windows(x, geo)
        self._kept = (x, cols) if self.retain else None
        weights = w.reshape(g, m // g, -1)
        y = np.matmul(weights, cols).reshape((x.shape[0], m, *geo.out))
        if len(inputs) > 2:
            y = y + inputs[2].reshape((1, m) + (1,) * len(geo.out))
        return [y.astype(x.dtype, copy=False)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        x, w = inputs[0], inputs[1]
        geo = self.geometry(x.shape, w.shape)
        g, m, n = self.group, w.shape[0], x.shape[0]
        dy = np.asarray(grad_outputs[0], dtype=x.dtype).reshape(n, g, m // g, -1)
        kept, self._kept = self._kept, None
        cols = kept[1] if kept is not None and kept[0] is x else self._windows(x, geo)
        weights = w.reshape(g, m // g, -1)
        dw = np.matmul(dy, cols.swapaxes(-1, -2)).sum(axis=0).reshape(w.shape)
        bias = [dy.sum(axis=(0, 3)).reshape(m)] if len(inputs) > 2 else []
        if 0 in self.unneeded:  # nobody reads dx (the data): skip col2im
            return [None, dw, *bias]
        dcols = np.matmul(weights.swapaxes(-1, -2), dy)
        dcols = dcols.reshape((n, x.shape[1], *geo.kernel, *geo.out))
        padded = [
            s + b + e for s, b, e in zip(x.shape[2:], geo.pads_begin, geo.pads_end, strict=True)
        ]
        dxp = scatter(dcols, padded, geo.kernel, geo.strides, geo.dilations, geo.out)
        dx = crop(dxp, geo.pads_begin, x.shape[2:])
        return [dx, dw, *bias]


@dataclass(frozen=True)
class _Layout:
    """ConvTranspose's geometry per spatial axis: every input element scatters a kernel
    into an array of size ``full``; the output is ``out`` elements of it from ``begin``."""

    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    kernel: tuple[int, ...]
    full: tuple[int, ...]
    begin: tuple[int, ...]
    out: tuple[int, ...]


class ConvTranspose(_ConvBase):
    """ONNX ConvTranspose: ``X (N, C, *S)``, ``W (C, M/group, *K)``, optional ``B (M)``.

    The output has ``stride * (in - 1) + output_padding + (k - 1) * dilation + 1 - pads``
    elements per axis; ``output_shape`` (spatial, or full with N and C) overrides the
    pads, split as ONNX prescribes for ``auto_pad``.
    """

    op_type = "ConvTranspose"
    defaults = MappingProxyType(
        {
            "auto_pad": "NOTSET",
            "dilations": None,
            "group": 1,
            "kernel_shape": None,
            "output_padding": None,
            "output_shape": None,
            "pads": None,
            "strides": None,
        }
    )

    def configure(self, attributes: Mapping[str, Any]) -> None:
        super().configure(attributes)
        self.output_padding = self._ints(attributes, "output_padding")
        self.output_shape = self._ints(attributes, "output_shape")

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self._check_common(shapes)
        x, w = shapes[0], shapes[1]
        if w[0] != x[1]:
            raise UsageError(
                f"{self.input_name(1)} has shape {w}; it must be ({x[1]}, M/group, ...) "
                f"for X of shape {x}"
            )
        if x[1] % self.group:
            raise UsageError(
                f"{self.input_name(0)} has {x[1]} channels, not divisible by group={self.group}"
            )
        m = w[1] * self.group
        if len(shapes) > 2 and tuple(shapes[2]) != (m,):
            raise UsageError(f"{self.input_name(2)} must have shape ({m},), not {shapes[2]}")
        self.layout(x, w)

    def layout(self, x: Sequence[int], w: Sequence[int]) -> _Layout:
        """Where the scattered kernels land and which part of them is the output."""
        spatial, kernel = tuple(x[2:]), tuple(w[2:])
        rank = len(spatial)
        s = spatial_attribute(self.strides, rank, 1, "strides", self.op_type)
        d = spatial_attribute(self.dilations, rank, 1, "dilations", self.op_type)
        op = (0,) * rank if self.output_padding is None else self.output_padding
        if len(op) != rank or any(
            not 0 <= p < max(si, di) for p, si, di in zip(op, s, d, strict=True)
        ):
            raise UsageError(
                f"{self.op_type} output_padding must hold {rank} values, each below its "
                f"stride or dilation, not {list(op)}"
            )
        full = tuple(
            si * (n - 1) + pi + (k - 1) * di + 1
            for si, n, pi, k, di in zip(s, spatial, op, kernel, d, strict=True)
        )
        if self.output_shape is not None or self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            if self.output_shape is not None:
                target = tuple(self.output_shape[-rank:])
            else:
                target = tuple(n * si for n, si in zip(spatial, s, strict=True))
            if len(target) != rank or any(t < 1 for t in target):
                raise UsageError(
                    f"{self.op_type} output_shape {list(target)} does not give "
                    f"{rank} positive spatial sizes"
                )
            total = [f - t for f, t in zip(full, target, strict=True)]
            if self.auto_pad == "SAME_UPPER":
                begin = tuple(max(t, 0) // 2 for t in total)
            else:
                begin = tuple(max(t, 0) - max(t, 0) // 2 for t in total)
            # A target beyond the natural size is reached by zeros at the end, as
            # output_padding would add them (ONNX's example convtranspose_output_shape).
            full = tuple(max(f, t) for f, t in zip(full, target, strict=True))
            return _Layout(s, d, kernel, full, begin, target)
        explicit = self.auto_pad != "VALID" and self.pads is not None
        pads = self.pads if explicit and self.pads is not None else (0,) * (2 * rank)
        if len(pads) != 2 * rank or any(p < 0 for p in pads):
            raise UsageError(
                f"{self.op_type} attribute pads must hold {2 * rank} non-negative values, "
                f"not {list(pads)}"
            )
        out = tuple(f - b - e for f, b, e in zip(full, pads[:rank], pads[rank:], strict=True))
        if any(n < 1 for n in out):
            raise UsageError(f"{self.op_type}: pads {list(pads)} leave an empty output")
        return _Layout(s, d, kernel, full, tuple(pads[:rank]), out)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x, w = inputs[0], inputs[1]
        lay = self.layout(x.shape, w.shape)
        n, c, g = x.shape[0], x.shape[1], self.group
        m = w.shape[1] * g
        weights = w.reshape(g, c // g, -1)
        cols = np.matmul(weights.swapaxes(-1, -2), x.reshape(n, g, c // g, -1))
        cols = cols.reshape((n, m, *lay.kernel, *x.shape[2:]))
        full = scatter(cols, lay.full, lay.kernel, lay.strides, lay.dilations, x.shape[2:])
        y = crop(full, lay.begin, lay.out)
        if len(inputs) > 2:
            y = y + inputs[2].reshape((1, m) + (1,) * len(lay.out))
        return [y.astype(x.dtype, copy=False)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        x, w = inputs[0], inputs[1]
        lay = self.layout(x.shape, w.shape)
        n, c, g = x.shape[0], x.shape[1], self.group
        dy = np.asarray(grad_outputs[0], dtype=x.dtype)
        end = [f - b - o for f, b, o in zip(lay.full, lay.begin, lay.out, strict=True)]
        dfull = pad(dy, lay.begin, end)
        dcols = gather(dfull, lay.kernel, lay.strides, lay.dilations, x.shape[2:])
        dcols = dcols.reshape(n, g, -1, math.prod(x.shape[2:]))
        weights = w.reshape(g, c // g, -1)
        xs = x.reshape(n, g, c // g, -1)
        dx = np.matmul(weights, dcols).reshape(x.shape)
        dw = np.matmul(xs, dcols.swapaxes(-1, -2)).sum(axis=0).reshape(w.shape)
        grads: list[np.ndarray | None] = [dx, dw]
        if len(inputs) > 2:
            grads.append(dy.sum(axis=(0, *range(2, dy.ndim))))
        return grads
