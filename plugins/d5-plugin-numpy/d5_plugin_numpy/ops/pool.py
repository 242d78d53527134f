"""MaxPool, AveragePool and GlobalAveragePool over any number of spatial axes."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from d5_plugin_numpy.ops.base import ReferenceOperator, as_ints, as_str
from d5_plugin_numpy.ops.windows import Geometry, crop, gather, pad, scatter, window_geometry
from d5core.api import UsageError

__all__ = ["AveragePool", "GlobalAveragePool", "MaxPool"]


class _Pool(ReferenceOperator):
    input_names = ("X",)
    min_inputs = 1

    def configure(self, attributes: Mapping[str, Any]) -> None:
        if attributes.get("kernel_shape") is None:
            raise UsageError(f"{self.op_type} needs the attribute kernel_shape")
        self.kernel_shape = as_ints(attributes["kernel_shape"], f"{self.op_type} kernel_shape")
        if any(k < 1 for k in self.kernel_shape):
            raise UsageError(
                f"{self.op_type} kernel_shape must be positive, not {self.kernel_shape}"
            )
        self.auto_pad = as_str(attributes["auto_pad"])
        self.ceil_mode = bool(int(attributes["ceil_mode"]))
        self.attrs = {
            name: None
            if attributes.get(name) is None
            else as_ints(attributes[name], f"{self.op_type} {name}")
            for name in ("strides", "dilations", "pads")
        }

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_rank(shapes, 0, len(self.kernel_shape) + 2)
        self.geometry(shapes[0])

    def geometry(self, shape: Sequence[int]) -> Geometry:
        return window_geometry(
            self.op_type,
            tuple(shape[2:]),
            self.kernel_shape,
            strides=self.attrs["strides"],
            dilations=self.attrs["dilations"],
            pads=self.attrs["pads"],
            auto_pad=self.auto_pad,
            ceil_mode=self.ceil_mode,
        )

    def windows(self, x: np.ndarray, geo: Geometry, fill: float) -> np.ndarray:
        """``(N, C, prod(kernel), *out)``, padded with ``fill``."""
        end = [e + x_ for e, x_ in zip(geo.pads_end, geo.extra_end, strict=True)]
        cols = gather(
            pad(x, geo.pads_begin, end, fill), geo.kernel, geo.strides, geo.dilations, geo.out
        )
        return cols.reshape((*x.shape[:2], -1, *geo.out))

    def unwindow(self, dcols: np.ndarray, shape: Sequence[int], geo: Geometry) -> np.ndarray:
        """The adjoint of :meth:`windows`: add window gradients back into the input."""
        padded = [
            n + b + e + x_
            for n, b, e, x_ in zip(
                shape[2:], geo.pads_begin, geo.pads_end, geo.extra_end, strict=True
            )
        ]
        dcols = dcols.reshape((*shape[:2], *geo.kernel, *geo.out))
        dxp = scatter(dcols, padded, geo.kernel, geo.strides, geo.dilations, geo.out)
        return crop(dxp, geo.pads_begin, shape[2:])


class MaxPool(_Pool):
    """ONNX MaxPool; outputs ``Y`` and ``Indices``.

    Padding is ``-inf``. Within a window the first maximum (in row-major kernel order)
    wins, and backward routes the gradient to it. ``Indices`` are flat positions in the
    unpadded input, ``(n * C + c) * prod(spatial)`` plus the position within the image in
    row-major (``storage_order=0``) or column-major (``storage_order=1``) order.
    """

    op_type = "MaxPool"
    defaults = MappingProxyType(
        {
            "auto_pad": "NOTSET",
            "ceil_mode": 0,
            "dilations": None,
            "kernel_shape": None,
            "pads": None,
            "storage_order": 0,
            "strides": None,
        }
    )

    def configure(self, attributes: Mapping[str, Any]) -> None:
        super().configure(attributes)
        self.storage_order = int(attributes["storage_order"])
        if self.storage_order not in (0, 1):
            raise UsageError(f"MaxPool storage_order must be 0 or 1, not {self.storage_order}")

    def _argmax(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, Geometry]:
        geo = self.geometry(x.shape)
        cols = self.windows(x, geo, -np.inf)
        arg = np.argmax(cols, axis=2)
        y = np.take_along_axis(cols, arg[:, :, None], axis=2)[:, :, 0]
        return y, arg, geo

    #: With :attr:`retain`: the input of the last forward, its argmax and geometry.
    _kept: tuple[np.ndarray, np.ndarray, Geometry] | None = None

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        y, arg, geo = self._argmax(x)
        self._kept = (x, arg, geo) if self.retain else None
        if self.read is not None and 1 not in self.read:  # nobody reads Indices
            return [y.astype(x.dtype, copy=False)]
        return [y.astype(x.dtype, copy=False), self._indices(x.shape, arg, geo)]

    def _indices(self, shape: Sequence[int], arg: np.ndarray, geo: Geometry) -> np.ndarray:
        spatial = tuple(shape[2:])
        offsets = np.unravel_index(arg, geo.kernel)
        grid = np.meshgrid(*(np.arange(n) for n in geo.out), indexing="ij")
        coords = [
            o * s + k * d - b
            for o, s, k, d, b in zip(
                grid, geo.strides, offsets, geo.dilations, geo.pads_begin, strict=True
            )
        ]
        # Clip the (never maximal, but possible for an all-padding window) pad positions.
        coords = [np.clip(c, 0, n - 1) for c, n in zip(coords, spatial, strict=True)]
        # Position within one image: row-major, or column-major for storage_order=1.
        axes = range(len(spatial))
        if self.storage_order == 0:
            steps = [math.prod(spatial[a + 1 :]) for a in axes]
        else:
            steps = [math.prod(spatial[:a]) for a in axes]
        within = sum(c * step for c, step in zip(coords, steps, strict=True))
        planes = np.arange(shape[0] * shape[1]).reshape(shape[0], shape[1])
        planes = planes.reshape(planes.shape + (1,) * len(spatial))
        return (planes * math.prod(spatial) + within).astype(np.int64)

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        x = inputs[0]
        kept, self._kept = self._kept, None
        if kept is not None and kept[0] is x:
            arg, geo = kept[1], kept[2]
        else:
            _, arg, geo = self._argmax(x)
        dy = np.asarray(grad_outputs[0], dtype=x.dtype)
        kernel_size = math.prod(geo.kernel)
        hit = np.arange(kernel_size).reshape((1, 1, -1) + (1,) * len(geo.out)) == arg[:, :, None]
        dcols = np.where(hit, dy[:, :, None], 0).astype(x.dtype)
        return [self.unwindow(dcols, x.shape, geo)]


class AveragePool(_Pool):
    """ONNX AveragePool (with opset 19's dilations).

    With ``count_include_pad=0`` a window's sum is divided by the number of input
    elements in it; with ``count_include_pad=1`` by the number of input and explicit
    padding elements. The extra padding that ``ceil_mode`` adds is never counted, as in
    PyTorch.
    """

    op_type = "AveragePool"
    defaults = MappingProxyType(
        {
            "auto_pad": "NOTSET",
            "ceil_mode": 0,
            "count_include_pad": 0,
            "dilations": None,
            "kernel_shape": None,
            "pads": None,
            "strides": None,
        }
    )

    def configure(self, attributes: Mapping[str, Any]) -> None:
        super().configure(attributes)
        self.count_include_pad = bool(int(attributes["count_include_pad"]))

    def _counts(self, shape: Sequence[int], dtype: Any, geo: Geometry) -> np.ndarray:
        """How many elements each window averages, as ``(1, 1, *out)``."""
        ones = np.ones((1, 1, *shape[2:]), dtype=dtype)
        if self.count_include_pad:
            ones = pad(ones, geo.pads_begin, geo.pads_end, 1.0)
            none = (0,) * len(geo.out)
            counted = dataclasses.replace(geo, pads_begin=none, pads_end=none)
            return np.asarray(self.windows(ones, counted, 0.0).sum(axis=2))
        return np.asarray(self.windows(ones, geo, 0.0).sum(axis=2))

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        geo = self.geometry(x.shape)
        total = self.windows(x, geo, 0.0).sum(axis=2)
        return [(total / self._counts(x.shape, x.dtype, geo)).astype(x.dtype, copy=False)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        x = inputs[0]
        geo = self.geometry(x.shape)
        dy = np.asarray(grad_outputs[0], dtype=x.dtype) / self._counts(x.shape, x.dtype, geo)
        dcols = np.broadcast_to(dy[:, :, None], (*dy.shape[:2], math.prod(geo.kernel), *geo.out))
        return [self.unwindow(np.ascontiguousarray(dcols), x.shape, geo)]


class GlobalAveragePool(ReferenceOperator):
    """ONNX GlobalAveragePool: the mean over all spatial axes, kept as size-1 axes."""

    op_type = "GlobalAveragePool"
    input_names = ("X",)

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_rank(shapes, 0, at_least=3)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        return [x.mean(axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype, copy=False)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        x = inputs[0]
        count = math.prod(x.shape[2:])
        dy = np.asarray(grad_outputs[0], dtype=x.dtype)
        return [np.broadcast_to(dy / count, x.shape).copy()]
