"""Convolution, transposed convolution and pooling with ONNX semantics, on channels-last
tensors (``(N, *spatial, C)``, see :mod:`.layout`).

The window geometry (padding from ``auto_pad`` through :func:`d5core.api.resolve_pads`,
output sizes, ``ceil_mode``) is computed here once per traced shape, in Python; the
TensorFlow kernels then run with ``VALID`` padding on explicitly padded inputs, or, for
2-D convolutions, with ``SAME`` where TensorFlow's rule pads exactly as ONNX asks (its
``EXPLICIT`` padding has slow CPU gradient kernels). Where TensorFlow has no kernel for
a case (grouped convolutions, dilated and strided windows together, pooling of some
dtypes or ranks) the same result is built from the kernels it has: one convolution per
group, a strided convolution subsampled, a maximum or sum over the window's strided slices.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from typing import Any

import numpy as np

from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.graph.layout import kernel_perm
from d5core.api import UsageError
from d5core.onnx import resolve_pads

__all__ = [
    "Windows",
    "average_pool",
    "conv",
    "conv_transpose",
    "conv_transpose_pads",
    "max_pool",
    "windows",
]

tf = tensorflow()

#: Dtypes TensorFlow's MaxPool/AvgPool kernels take, by number of spatial axes.
_POOL_DTYPES = {
    1: frozenset({"float16", "float32", "float64"}),
    2: frozenset({"float16", "float32", "float64"}),
    3: frozenset({"float16", "float32"}),
}


@dataclass(frozen=True)
class Windows:
    """Where the windows of one convolution or pooling lie, per spatial axis."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    #: Padding before and after each axis (explicit, or from ``auto_pad``).
    begins: tuple[int, ...]
    ends: tuple[int, ...]
    #: Padding after ``ends`` that only ``ceil_mode`` needs; never counted as input.
    extra: tuple[int, ...]
    out: tuple[int, ...]

    @property
    def extents(self) -> tuple[int, ...]:
        """The span of each dilated kernel axis: ``(k - 1) * d + 1``."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations, strict=True))


def _per_axis(value: Sequence[int] | None, rank: int, name: str, op_type: str) -> tuple[int, ...]:
    if value is None or len(value) == 0:
        return (1,) * rank
    values = tuple(int(v) for v in value)
    if len(values) != rank or any(v < 1 for v in values):
        raise UsageError(
            f"{op_type} attribute {name} must hold {rank} positive values, not {list(values)}"
        )
    return values


def windows(
    op_type: str,
    spatial: Sequence[int],
    kernel: Sequence[int],
    *,
    strides: Sequence[int] | None = None,
    dilations: Sequence[int] | None = None,
    pads: Sequence[int] | None = None,
    auto_pad: str = "NOTSET",
    ceil_mode: bool = False,
) -> Windows:
    """The windows over ``spatial`` as ONNX defines them.

    ``NOTSET`` gives ``out = floor_or_ceil((in + begin + end - extent) / stride) + 1``;
    with ``ceil_mode`` a last window that would start in the end padding is dropped (as
    ONNX's reference and PyTorch do). ``VALID`` pads nothing; ``SAME_UPPER`` and
    ``SAME_LOWER`` give ``ceil(in / stride)`` windows.

    :raises UsageError: for attributes of the wrong length or sign, or a kernel that
        does not fit the padded input.
    """
    rank = len(spatial)
    kernel = tuple(int(k) for k in kernel)
    s = _per_axis(strides, rank, "strides", op_type)
    d = _per_axis(dilations, rank, "dilations", op_type)
    begins, ends = resolve_pads(
        spatial, kernel, auto_pad=auto_pad, pads=pads, strides=s, dilations=d, op_type=op_type
    )
    out, extra = [], []
    for a in range(rank):
        size, stride = int(spatial[a]), s[a]
        extent = (kernel[a] - 1) * d[a] + 1
        if auto_pad == "NOTSET":
            span = size + begins[a] + ends[a] - extent
            n = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
            if ceil_mode and n > 1 and (n - 1) * stride >= size + begins[a]:
                n -= 1
        elif auto_pad == "VALID":
            n = (size - extent) // stride + 1
        else:
            n = math.ceil(size / stride)
        if n < 1 or size + begins[a] + ends[a] < extent:
            raise UsageError(
                f"{op_type}: a kernel spanning {extent} does not fit spatial axis {a} of "
                f"size {size} with padding {begins[a]}+{ends[a]}"
            )
        out.append(n)
        extra.append(max(0, (n - 1) * stride + extent - (size + begins[a] + ends[a])))
    return Windows(kernel, s, d, tuple(begins), tuple(ends), tuple(extra), tuple(out))


def _pad(x: Any, begins: Sequence[int], ends: Sequence[int], value: Any = 0) -> Any:
    """Pad the spatial axes of a channels-last ``x``."""
    if not any(begins) and not any(ends):
        return x
    widths = [[0, 0], *([b, e] for b, e in zip(begins, ends, strict=True)), [0, 0]]
    return tf.pad(x, widths, constant_values=value)


def _crop(x: Any, out: Sequence[int]) -> Any:
    """The first ``out`` elements of each spatial axis (a no-op when they are all)."""
    shape = x.shape.as_list()
    if tuple(shape[1:-1]) == tuple(out):
        return x
    return x[(slice(None), *(slice(0, n) for n in out), slice(None))]


def _subsample(x: Any, strides: Sequence[int]) -> Any:
    if all(s == 1 for s in strides):
        return x
    return x[(slice(None), *(slice(None, None, s) for s in strides), slice(None))]


# -- convolution ------------------------------------------------------------------------


def _tf_padding(x: Any, geo: Windows) -> tuple[Any, Any]:
    """``x`` and the padding to give a 2-D TensorFlow kernel: ``"VALID"`` when nothing is
    padded, ``"SAME"`` when TensorFlow's rule pads as ONNX asks, else ``"VALID"`` on an
    explicitly padded ``x``. Not TensorFlow's ``EXPLICIT`` padding: its CPU gradient
    kernels are about twice as slow as the ``SAME``/``VALID`` ones."""
    if not any(geo.begins) and not any(geo.ends):
        return x, "VALID"
    spatial = x.shape.as_list()[1:-1]
    same = True
    for size, s, e, b, end in zip(spatial, geo.strides, geo.extents, geo.begins, geo.ends,
                                  strict=True):  # fmt: skip
        total = max((math.ceil(size / s) - 1) * s + e - size, 0)
        same = same and (b, end) == (total // 2, total - total // 2)
    if same:
        return x, "SAME"
    return _pad(x, geo.begins, geo.ends), "VALID"


def _convolve(x: Any, filters: Any, geo: Windows) -> Any:
    """One ungrouped convolution of ``x`` with ``(k..., C, M)`` filters."""
    n = len(geo.kernel)
    strides, dilations = list(geo.strides), list(geo.dilations)
    subsample = None
    if any(s > 1 for s in strides) and any(d > 1 for d in dilations):
        subsample, strides = strides, [1] * n  # TensorFlow takes one or the other
    if n == 2 and subsample is None:
        x, padding = _tf_padding(x, geo)
        y = tf.nn.conv2d(x, filters, [1, *strides, 1], padding, dilations=[1, *dilations, 1])
    else:
        y = tf.nn.convolution(
            _pad(x, geo.begins, geo.ends), filters, strides, "VALID", dilations=dilations
        )
    return y if subsample is None else _subsample(y, subsample)


def conv(
    x: Any, w: Any, b: Any | None, geo: Windows, group: int, *, tf_kernel: bool = False
) -> Any:
    """ONNX Conv of a channels-last ``x``.

    :param w: the weights in TensorFlow's layout ``(k..., C/group, M)`` when
        ``tf_kernel``, else in ONNX's ``(M, C/group, k...)`` (transposed in the graph).
    :param b: the bias ``(M,)``, added by ``BiasAdd`` to the channels-last output.

    A depthwise 2-D convolution (``group == C``) runs TensorFlow's depthwise kernel; other
    grouped ones run one convolution per group (TensorFlow's CPU kernels have no
    gradient for grouped convolutions).
    """
    n = len(geo.kernel)
    filters = w if tf_kernel else tf.transpose(w, kernel_perm(n + 2))
    channels = int(x.shape[-1])
    if group == 1:
        y = _convolve(x, filters, geo)
    elif (
        n == 2
        and group == channels
        and geo.strides[0] == geo.strides[1]
        and (all(d == 1 for d in geo.dilations) or all(s == 1 for s in geo.strides))
    ):
        kernel = filters.shape.as_list()
        depthwise = tf.reshape(filters, [*kernel[:2], channels, kernel[3] // channels])
        x, padding = _tf_padding(x, geo)
        y = tf.nn.depthwise_conv2d(
            x, depthwise, [1, *geo.strides, 1], padding, dilations=list(geo.dilations)
        )
    else:
        xs = tf.split(x, group, axis=-1)
        fs = tf.split(filters, group, axis=-1)
        y = tf.concat([_convolve(xi, fi, geo) for xi, fi in zip(xs, fs, strict=True)], -1)
    return y if b is None else tf.nn.bias_add(y, b)


def conv_transpose_pads(
    spatial: Sequence[int],
    kernel: Sequence[int],
    *,
    strides: Sequence[int],
    dilations: Sequence[int],
    output_padding: Sequence[int],
    pads: Sequence[int] | None,
    output_shape: Sequence[int] | None,
    auto_pad: str,
) -> tuple[list[int], list[int]]:
    """ConvTranspose's cropping of the full output ``(in - 1) * s + extent`` (``begins``)
    and its output size (``out``), as ONNX's reference computes them."""
    n = len(spatial)
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    full = [s * (i - 1) + op + e for i, s, op, e in
            zip(spatial, strides, output_padding, extents, strict=True)]  # fmt: skip
    if output_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # ONNX splits the total padding: the beginning gets total - total // 2 (total // 2
        # with SAME_UPPER), and the given pads are ignored; a larger output zero-fills.
        wanted = (
            [int(o) for o in list(output_shape)[-n:]]
            if output_shape
            else [i * s for i, s in zip(spatial, strides, strict=True)]
        )
        total = [max(f - o, 0) for f, o in zip(full, wanted, strict=True)]
        small = [t // 2 for t in total]
        begins = (
            small
            if auto_pad == "SAME_UPPER"
            else [t - h for t, h in zip(total, small, strict=True)]
        )
        return begins, wanted
    given = [int(p) for p in pads] if pads is not None and len(pads) else [0] * (2 * n)
    if len(given) != 2 * n:
        raise UsageError(f"ConvTranspose attribute pads must hold {2 * n} values, not {given}")
    begins = given[:n]
    return begins, [f - b - e for f, b, e in zip(full, begins, given[n:], strict=True)]


def _dilate(filters: Any, dilations: Sequence[int]) -> Any:
    """``(k..., M, C)`` filters with ``d - 1`` zeros between taps on each spatial axis."""
    for axis, d in enumerate(dilations):
        if d == 1:
            continue
        shape = filters.shape.as_list()
        k = shape[axis]
        stacked = tf.expand_dims(filters, axis + 1)
        widths = [[0, 0]] * (len(shape) + 1)
        widths[axis + 1] = [0, d - 1]
        spread = tf.reshape(tf.pad(stacked, widths), [*shape[:axis], k * d, *shape[axis + 1 :]])
        filters = spread[(slice(None),) * axis + (slice(0, (k - 1) * d + 1),)]
    return filters


def conv_transpose(
    x: Any,
    w: Any,
    b: Any | None,
    *,
    strides: Sequence[int],
    dilations: Sequence[int],
    begins: Sequence[int],
    out: Sequence[int],
    group: int,
    tf_kernel: bool = False,
) -> Any:
    """ONNX ConvTranspose of a channels-last ``x`` with weights in ONNX's layout
    ``(C, M/group, k...)``, or in TensorFlow's ``(k..., M/group, C)`` when ``tf_kernel``.

    The full output (every input pixel's kernel laid down, size ``(in - 1) * s +
    extent``) is computed with ``VALID`` padding, then cropped by ``begins`` to ``out``
    elements per axis; output positions past the full output (``output_padding``, a
    larger ``output_shape``) hold zeros, and the bias.
    """
    n = len(strides)
    spatial = x.shape.as_list()[1:-1]
    batch = tf.shape(x)[0]
    filters = w if tf_kernel else tf.transpose(w, kernel_perm(n + 2))
    kernel = filters.shape.as_list()[:n]
    extents = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    full = [s * (i - 1) + e for i, s, e in zip(spatial, strides, extents, strict=True)]

    def one(xg: Any, fg: Any) -> Any:
        shape = tf.stack([batch, *full, int(fg.shape[-2])])
        return tf.nn.conv_transpose(xg, _dilate(fg, dilations), shape, [1, *strides, 1], "VALID")

    if group == 1:
        y = one(x, filters)
    else:
        xs, fs = tf.split(x, group, axis=-1), tf.split(filters, group, axis=-1)
        y = tf.concat([one(xi, fi) for xi, fi in zip(xs, fs, strict=True)], -1)
    short = [max(0, bg + o - f) for bg, o, f in zip(begins, out, full, strict=True)]
    y = _pad(y, [0] * n, short)
    y = y[
        (slice(None), *(slice(bg, bg + o) for bg, o in zip(begins, out, strict=True)), slice(None))
    ]
    return y if b is None else tf.nn.bias_add(y, b)


# -- pooling ------------------------------------------------------------------------------


def _slices_reduce(x: Any, geo: Windows, combine: Any) -> Any:
    """Combine (``tf.maximum`` or ``tf.add``) the window's taps of a padded ``x``: any
    rank, dtype, stride and dilation."""
    return reduce(combine, _taps(x, geo))


def _fast(x: Any, geo: Windows) -> bool:
    n = len(geo.kernel)
    return all(d == 1 for d in geo.dilations) and x.dtype.name in _POOL_DTYPES.get(n, ())


def _taps(x: Any, geo: Windows) -> list[Any]:
    """The window's taps of a padded ``x`` in row-major kernel order, each a strided
    slice of the output's size."""
    taps = []
    for offset in itertools.product(*(range(k) for k in geo.kernel)):
        index = tuple(
            slice(o * d, o * d + (n - 1) * s + 1, s)
            for o, d, s, n in zip(offset, geo.dilations, geo.strides, geo.out, strict=True)
        )
        taps.append(x[(slice(None), *index, slice(None))])
    return taps


def max_pool(x: Any, geo: Windows, *, select: bool = False) -> Any:
    """ONNX MaxPool of a channels-last ``x``; padding never wins a window.

    With ``select`` the result is built as the sum of each tap where it is the window's
    first maximum (row-major kernel order), and zero elsewhere: the same values, and a
    gradient made of slices and selects, routed to the first maximum as the numpy
    reference routes it. XLA compiles that gradient, while it refuses TensorFlow's
    MaxPool gradient when op determinism is on (as d5 sets it).
    """
    if x.dtype.is_floating:
        low: Any = -np.inf
    else:
        low = x.dtype.min
    padded = _pad(x, geo.begins, [e + x_ for e, x_ in zip(geo.ends, geo.extra, strict=True)], low)
    if _fast(x, geo):
        y = _crop(tf.nn.max_pool(padded, list(geo.kernel), list(geo.strides), "VALID"), geo.out)
    else:
        y = _slices_reduce(padded, geo, tf.maximum)
    if not select:
        return y
    peak = tf.stop_gradient(y)
    taken = None
    total = None
    for tap in _taps(padded, geo):
        hit = tf.equal(tf.stop_gradient(tap), peak)
        first = hit if taken is None else tf.logical_and(hit, tf.logical_not(taken))
        taken = hit if taken is None else tf.logical_or(taken, hit)
        part = tf.where(first, tap, tf.zeros_like(tap))
        total = part if total is None else total + part
    return total


def _counts(spatial: Sequence[int], geo: Windows, include_pad: bool) -> np.ndarray:
    """How many elements each window averages, per output position: input elements, and
    explicit padding when ``include_pad``; never the padding ``ceil_mode`` adds."""
    per_axis = []
    for size, k, s, d, b, e, n in zip(
        spatial, geo.kernel, geo.strides, geo.dilations, geo.begins, geo.ends, geo.out,
        strict=True,
    ):  # fmt: skip
        taps = np.arange(n)[:, None] * s + np.arange(k)[None, :] * d  # padded coordinates
        low, high = (0, size + b + e) if include_pad else (b, b + size)
        per_axis.append(((taps >= low) & (taps < high)).sum(axis=1))
    counts = per_axis[0]
    for axis_counts in per_axis[1:]:
        counts = np.multiply.outer(counts, axis_counts)
    return np.asarray(counts, dtype=np.float64)


def average_pool(x: Any, geo: Windows, *, include_pad: bool) -> Any:
    """ONNX AveragePool of a channels-last ``x`` (see :func:`_counts` for the divisor)."""
    spatial = x.shape.as_list()[1:-1]
    padded = _pad(x, geo.begins, [e + x_ for e, x_ in zip(geo.ends, geo.extra, strict=True)])
    counts = _counts(spatial, geo, include_pad)
    size = float(math.prod(geo.kernel))
    if _fast(x, geo):
        mean = _crop(tf.nn.avg_pool(padded, list(geo.kernel), list(geo.strides), "VALID"), geo.out)
        if np.all(counts == size):
            return mean
        scale = (size / counts).reshape((1, *geo.out, 1))
        return mean * tf.constant(scale, dtype=x.dtype)
    total = _slices_reduce(padded, geo, tf.add)
    return total / tf.constant(counts.reshape((1, *geo.out, 1)), dtype=x.dtype)
