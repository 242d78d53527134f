"""Window geometry shared by convolutions and pooling, and TensorFlow's layout for it.

ONNX lays images out as ``(N, C, spatial...)``; TensorFlow's CPU convolution and
pooling kernels want channels last, ``(N, spatial..., C)``, and take 2 or 3 spatial
axes. Data is moved to that layout when a callable is prepared (:func:`channels_last`),
and a 1-D problem is given a leading spatial axis of size 1 (:meth:`Window.lifted`), the
way ``tf.nn.conv1d`` runs one, but outside the timed graph.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from d5_plugin_tensorflow.ops._base import Layout, tf
from d5core.onnx import SpatialWindow

__all__ = [
    "Window",
    "channels_first_name",
    "channels_last",
    "data_format",
    "explicit_pads",
    "filter_layout",
    "padding_argument",
    "same_or_valid",
    "window_stack",
]


class Window(SpatialWindow):
    """A :class:`d5core.api.SpatialWindow` that can run a 1-D problem as 2-D."""

    def lifted(self) -> Window:
        """A 1-D window as a 2-D one over a leading axis of size 1; others unchanged."""
        if len(self.sizes) != 1:
            return self
        return Window(
            (1, *self.kernel),
            (1, *self.strides),
            (1, *self.dilations),
            ((0, 0), *self.pads),
            (1, *self.sizes),
        )


def data_format(spatial_rank: int) -> str:
    """TensorFlow's name of the channels-last layout the kernels see: a 1-D problem runs
    as 2-D with a height of 1."""
    return "NDHWC" if spatial_rank == 3 else "NHWC"


def channels_first_name(rank: int) -> str:
    """The name of ONNX's own ``(N, C, spatial...)`` layout for a tensor of ``rank``."""
    return {2: "NC", 3: "NCW", 4: "NCHW", 5: "NCDHW"}.get(rank, "NC" + "*" * (rank - 2))


def channels_last(shape: Sequence[int]) -> Layout:
    """``(N, C, spatial...)`` as ``(N, spatial..., C)``; 1-D as ``(N, 1, W, C)``."""
    shape = tuple(shape)
    perm = (0, *range(2, len(shape)), 1)
    kernel_shape = None
    if len(shape) == 3:
        kernel_shape = (shape[0], 1, shape[2], shape[1])
    return Layout(shape, perm, kernel_shape)


def filter_layout(shape: Sequence[int]) -> Layout:
    """A convolution's weights ``(A, B, kernel...)`` as TensorFlow's ``(kernel..., B, A)``
    (ONNX ``Conv``'s ``(M, C/g, k...)`` becomes HWIO; ``ConvTranspose``'s
    ``(C, M/g, k...)`` becomes ``conv_transpose``'s ``(k..., M/g, C)``); 1-D kernels get
    a leading axis of size 1."""
    shape = tuple(shape)
    perm = (*range(2, len(shape)), 1, 0)
    kernel_shape = None
    if len(shape) == 3:
        kernel_shape = (1, shape[2], shape[1], shape[0])
    return Layout(shape, perm, kernel_shape)


def explicit_pads(win: Window, out: Sequence[int]) -> list[tuple[int, int]]:
    """Pads after which unpadded, floor-mode windows yield exactly ``out`` windows per
    axis; an end pad is cut to 0 where the last window stops short of the input's end
    (the unread tail is never looked at) and may exceed ONNX's (ceil mode)."""
    return [
        (b, max(0, (o - 1) * s + k - size - b))
        for (b, _), o, s, k, size in zip(
            win.pads, out, win.strides, win.effective_kernel, win.sizes, strict=True
        )
    ]


def same_or_valid(win: Window, out: Sequence[int]) -> str | None:
    """``"VALID"`` or ``"SAME"`` when TensorFlow's padding of that name gives exactly
    the windows of ``win`` with ``out`` outputs per axis (and pads with what the
    operator pads with, or averages over the input alone); ``None`` otherwise.

    TensorFlow's ``SAME`` makes ``ceil(size / stride)`` windows and splits the padding
    they need, the odd element at the end.
    """
    valid = tuple(
        (size - k) // s + 1
        for size, k, s in zip(win.sizes, win.effective_kernel, win.strides, strict=True)
    )
    if not any(win.begin_pads) and tuple(out) == valid:
        return "VALID"
    for size, (b, _), k, s, o in zip(
        win.sizes, win.pads, win.effective_kernel, win.strides, out, strict=True
    ):
        count = -(-size // s)
        total = max((count - 1) * s + k - size, 0)
        if o != count or b != total // 2:
            return None
    return "SAME"


def padding_argument(pads: Sequence[tuple[int, int]]) -> list[list[int]]:
    """``tf.pad``'s (or an explicit ``padding``'s) argument for (begin, end) pads of the
    spatial axes of a channels-last tensor."""
    return [[0, 0], *([b, e] for b, e in pads), [0, 0]]


def window_stack(x: Any, win: Window, out: Sequence[int], fill: float) -> Any:
    """Every window of a channels-last ``x``, as ``(N, out..., C, K)``: ``K`` strided
    slices of the input padded with ``fill``, one per kernel position in row-major
    order. Pooling reduces over the last axis; it is how pools that TensorFlow's
    kernels lack (dilated and strided, 3-D in float64, with indices in 3-D or under XLA)
    are written in TensorFlow ops."""
    pads = explicit_pads(win, out)
    if any(b or e for b, e in pads):
        x = tf.pad(x, padding_argument(pads), constant_values=fill)
    rank = len(win.sizes)
    slices = []
    for offsets in itertools.product(*(range(k) for k in win.kernel)):
        begin = [0, *(j * d for j, d in zip(offsets, win.dilations, strict=True)), 0]
        end = [
            0,
            *(b + (o - 1) * s + 1 for b, o, s in zip(begin[1:-1], out, win.strides, strict=True)),
            0,
        ]
        slices.append(
            tf.strided_slice(
                x, begin, end, [1, *win.strides, 1], begin_mask=1, end_mask=1 | 1 << (rank + 1)
            )
        )
    return tf.stack(slices, axis=-1)
