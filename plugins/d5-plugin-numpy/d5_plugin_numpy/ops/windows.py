"""Sliding windows over the spatial axes: the geometry of Conv and pooling, and
im2col (``gather``) with its adjoint col2im (``scatter``).

Arrays are laid out ``(N, C, *spatial)``. ``gather`` returns every window as
``(N, C, *kernel, *out)``; it loops over the kernel's offsets (9 for a 3x3 kernel), each
one strided slice of the padded input, so no Python loop runs over pixels.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from d5core.api import UsageError
from d5core.onnx import resolve_pads

__all__ = ["Geometry", "crop", "gather", "pad", "scatter", "window_geometry"]


@dataclass(frozen=True)
class Geometry:
    """Where the windows of one Conv or pooling lie, per spatial axis."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    #: Padding before and after each axis, explicit or computed from ``auto_pad``.
    pads_begin: tuple[int, ...]
    pads_end: tuple[int, ...]
    #: Padding after ``pads_end`` that only ``ceil_mode`` needs; never counted as input.
    extra_end: tuple[int, ...]
    out: tuple[int, ...]

    @property
    def extents(self) -> tuple[int, ...]:
        """The span of a dilated kernel: ``(k - 1) * d + 1``."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations, strict=True))


def spatial_attribute(
    value: Sequence[int] | None, rank: int, default: int, name: str, op_type: str
) -> tuple[int, ...]:
    """A per-axis attribute (strides, dilations), checked for length and sign."""
    if value is None:
        return (default,) * rank
    values = tuple(int(v) for v in value)
    if len(values) != rank:
        raise UsageError(
            f"{op_type} attribute {name} has {len(values)} values for {rank} spatial axes"
        )
    if any(v < 1 for v in values):
        raise UsageError(f"{op_type} attribute {name} must be positive, not {list(values)}")
    return values


def window_geometry(
    op_type: str,
    spatial: Sequence[int],
    kernel: Sequence[int],
    *,
    strides: Sequence[int] | None,
    dilations: Sequence[int] | None,
    pads: Sequence[int] | None,
    auto_pad: str,
    ceil_mode: bool = False,
) -> Geometry:
    """Output size and padding of windows over ``spatial``, with ONNX semantics.

    The padding is d5's reading of ``auto_pad`` (:func:`d5core.api.resolve_pads`).
    ``NOTSET`` uses ``pads`` (all begins, then all ends) and
    ``out = floor_or_ceil((in + begin + end - extent) / stride) + 1``; with ``ceil_mode``
    a last window that would start in the end padding is dropped (as ONNX's reference and
    PyTorch do). ``VALID`` pads nothing. ``SAME_UPPER``/``SAME_LOWER`` give
    ``out = ceil(in / stride)`` and split the padding this needs, the odd element going at
    the end (upper) or the beginning (lower).
    """
    rank = len(spatial)
    kernel = tuple(int(k) for k in kernel)
    s = spatial_attribute(strides, rank, 1, "strides", op_type)
    d = spatial_attribute(dilations, rank, 1, "dilations", op_type)
    extents = [(k - 1) * di + 1 for k, di in zip(kernel, d, strict=True)]
    begin, end = resolve_pads(
        spatial, kernel, auto_pad=auto_pad, pads=pads, strides=s, dilations=d, op_type=op_type
    )
    extra, out = [], []
    for a in range(rank):
        size, stride, ext = spatial[a], s[a], extents[a]
        if auto_pad == "NOTSET":
            span = size + begin[a] + end[a] - ext
            n = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
            if ceil_mode and n > 1 and (n - 1) * stride >= size + begin[a]:
                n -= 1
        elif auto_pad == "VALID":
            n = (size - ext) // stride + 1
        else:
            n = math.ceil(size / stride)
        if n < 1 or size + begin[a] + end[a] < ext:
            raise UsageError(
                f"{op_type}: a kernel spanning {ext} does not fit spatial axis {a} of size "
                f"{size} with padding {begin[a]}+{end[a]}"
            )
        out.append(n)
        extra.append(max(0, (n - 1) * stride + ext - (size + begin[a] + end[a])))
    return Geometry(kernel, s, d, begin, end, tuple(extra), tuple(out))


def pad(x: np.ndarray, begin: Sequence[int], end: Sequence[int], value: float = 0.0) -> np.ndarray:
    """Pad the spatial axes of ``x`` (all but the first two)."""
    widths = [(0, 0), (0, 0), *zip(begin, end, strict=True)]
    return np.pad(x, widths, mode="constant", constant_values=value)


def crop(x: np.ndarray, begin: Sequence[int], size: Sequence[int]) -> np.ndarray:
    """The inverse of :func:`pad`: ``size`` elements from ``begin`` on each spatial axis."""
    window = (slice(b, b + n) for b, n in zip(begin, size, strict=True))
    return x[(slice(None), slice(None), *window)]


def _window_slices(
    offset: Sequence[int],
    geo_strides: Sequence[int],
    dilations: Sequence[int],
    out: Sequence[int],
) -> tuple[slice, ...]:
    """The strided slice holding kernel element ``offset`` of every window."""
    return tuple(
        slice(k * d, k * d + (n - 1) * s + 1, s)
        for k, s, d, n in zip(offset, geo_strides, dilations, out, strict=True)
    )


def gather(
    xp: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out: Sequence[int],
) -> np.ndarray:
    """im2col: the windows of the padded ``xp``, as ``(N, C, *kernel, *out)``."""
    cols = np.empty(xp.shape[:2] + tuple(kernel) + tuple(out), dtype=xp.dtype)
    for offset in itertools.product(*(range(k) for k in kernel)):
        window: tuple[Any, ...] = (
            slice(None),
            slice(None),
            *_window_slices(offset, strides, dilations, out),
        )
        element: tuple[Any, ...] = (slice(None), slice(None), *offset)
        cols[element] = xp[window]
    return cols


def scatter(
    cols: np.ndarray,
    padded: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    out: Sequence[int],
) -> np.ndarray:
    """col2im, the adjoint of :func:`gather`: add every window's values back into an
    array of spatial size ``padded``."""
    xp = np.zeros(cols.shape[:2] + tuple(padded), dtype=cols.dtype)
    for offset in itertools.product(*(range(k) for k in kernel)):
        window: tuple[Any, ...] = (
            slice(None),
            slice(None),
            *_window_slices(offset, strides, dilations, out),
        )
        element: tuple[Any, ...] = (slice(None), slice(None), *offset)
        xp[window] += cols[element]
    return xp
