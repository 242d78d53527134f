"""The window geometry of ONNX convolutions and pooling, checked, for operator backends.

``Conv``, ``ConvTranspose`` and the pooling operators slide a kernel over the spatial axes
of their input, with per-axis ``strides``, ``dilations`` and ``pads`` (or an
``auto_pad``). What those attributes mean does not depend on the framework that runs the
operator, so every backend reads them here (through :mod:`d5core.api`) into a
:class:`SpatialWindow`, and only turns it into its framework's arguments itself.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import numpy as np

from d5core.errors import UsageError
from d5core.onnx.nodes import AUTO_PADS, resolve_pads

__all__ = [
    "SpatialWindow",
    "TransposedWindow",
    "average_pool_divisors",
    "check_auto_pad",
    "conv_transpose_window",
    "conv_window",
    "spatial_window",
]

_W = TypeVar("_W", bound="SpatialWindow")


@dataclass(frozen=True)
class SpatialWindow:
    """How a window slides over the spatial axes of one input (one entry per axis)."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    dilations: tuple[int, ...]
    #: (begin, end) padding of each axis.
    pads: tuple[tuple[int, int], ...]
    #: The spatial input sizes.
    sizes: tuple[int, ...]

    @property
    def effective_kernel(self) -> tuple[int, ...]:
        """The extent of each dilated kernel axis."""
        return tuple((k - 1) * d + 1 for k, d in zip(self.kernel, self.dilations, strict=True))

    @property
    def begin_pads(self) -> tuple[int, ...]:
        """The padding before each axis."""
        return tuple(b for b, _ in self.pads)

    @property
    def symmetric(self) -> bool:
        """Whether every axis is padded equally at both ends."""
        return all(b == e for b, e in self.pads)

    @property
    def padded(self) -> bool:
        """Whether any axis is padded."""
        return any(b or e for b, e in self.pads)

    @property
    def dilated(self) -> bool:
        """Whether any axis has a dilation other than 1."""
        return any(d != 1 for d in self.dilations)

    @property
    def strided(self) -> bool:
        """Whether any axis has a stride other than 1."""
        return any(s != 1 for s in self.strides)

    def out_sizes(self, ceil_mode: bool = False) -> tuple[int, ...]:
        """The ONNX output sizes; with ``ceil_mode`` the last partial window counts,
        unless it would start in the end padding."""
        outs = []
        for size, (b, e), k, s in zip(
            self.sizes, self.pads, self.effective_kernel, self.strides, strict=True
        ):
            span = size + b + e - k
            out = (-(-span // s) if ceil_mode else span // s) + 1
            if ceil_mode and (out - 1) * s >= size + b:
                out -= 1
            outs.append(out)
        return tuple(outs)

    def with_pads(self: _W, pads: Sequence[tuple[int, int]]) -> _W:
        """The same window (of the same class) with other ``pads``."""
        return dataclasses.replace(self, pads=tuple((int(b), int(e)) for b, e in pads))


def check_auto_pad(op_type: str, value: Any) -> str:
    """The ``auto_pad`` attribute ``value`` as a string, which must be one of
    :data:`~d5core.api.AUTO_PADS`."""
    text = str(value)
    if text not in AUTO_PADS:
        raise UsageError(f"{op_type}: auto_pad must be one of {', '.join(AUTO_PADS)}, got {text!r}")
    return text


def _per_axis(op_type: str, name: str, values: Sequence[int] | None, n: int) -> tuple[int, ...]:
    if values is None:
        return (1,) * n
    values = list(values)
    if len(values) != n:
        raise UsageError(
            f"{op_type}: attribute {name} needs {n} values for {n} spatial axes, got {values}"
        )
    if any(v < 1 for v in values):
        raise UsageError(f"{op_type}: attribute {name} must be positive, got {values}")
    return tuple(values)


def spatial_window(
    op_type: str,
    sizes: Sequence[int],
    kernel: Sequence[int],
    auto_pad: str,
    read_ints: Callable[[str], Sequence[int] | None],
    *,
    fit: bool = True,
    cls: type[_W] = SpatialWindow,  # type: ignore[assignment]
) -> _W:
    """The window of an ``op_type`` operator over spatial ``sizes`` with a ``kernel``.

    ``read_ints(name)`` gives the integer-list attribute ``strides``, ``dilations`` or
    ``pads`` as the operator has it (``None``: absent, so 1 and no padding); they are read
    in that order, ``pads`` only when ``auto_pad`` is ``NOTSET`` (otherwise it applies as
    :func:`d5core.api.resolve_pads` does). With ``fit`` the dilated kernel must fit in
    the padded input (not so for a transposed convolution). ``cls`` is the class built,
    :class:`SpatialWindow` or a backend's subclass of it.
    """
    n = len(sizes)
    stride_values = _per_axis(op_type, "strides", read_ints("strides"), n)
    dilation_values = _per_axis(op_type, "dilations", read_ints("dilations"), n)
    pads = read_ints("pads") if auto_pad == "NOTSET" else None
    begins, ends = resolve_pads(
        sizes,
        kernel,
        auto_pad=auto_pad,
        pads=pads,
        strides=stride_values,
        dilations=dilation_values,
        op_type=op_type,
    )
    win = cls(
        tuple(kernel),
        stride_values,
        dilation_values,
        tuple(zip(begins, ends, strict=True)),
        tuple(sizes),
    )
    for size, (b, e), k in zip(sizes, win.pads, win.effective_kernel, strict=True):
        if fit and size + b + e < k:
            raise UsageError(
                f"{op_type}: the kernel {list(kernel)} (dilated {list(win.effective_kernel)}) "
                f"does not fit in input X of spatial size {list(sizes)} with pads {list(win.pads)}"
            )
    return win


@dataclass(frozen=True)
class TransposedWindow(Generic[_W]):
    """The geometry of an ONNX ``ConvTranspose``."""

    #: The window of the convolution it transposes; its pads are cropped off ``full``
    #: (a negative end pad extends the output with zeros).
    window: _W
    output_padding: tuple[int, ...]
    #: The full (uncropped) spatial output sizes.
    full: tuple[int, ...]
    #: The spatial output sizes.
    out: tuple[int, ...]


def _check_bias(op_type: str, bias: Sequence[int] | None, channels: int) -> None:
    if bias is not None and tuple(bias) != (channels,):
        raise UsageError(
            f"{op_type}: input B must have shape ({channels},) (one per output channel), "
            f"got {tuple(bias)}"
        )


def conv_window(
    op_type: str,
    x: Sequence[int],
    w: Sequence[int],
    bias: Sequence[int] | None,
    group: int,
    auto_pad: str,
    read_ints: Callable[[str], Sequence[int] | None],
    *,
    cls: type[_W] = SpatialWindow,  # type: ignore[assignment]
) -> _W:
    """The window of an ONNX ``Conv`` of input X of shape ``x`` ``(N, C, spatial...)``,
    weights W of shape ``w`` ``(M, C/group, kernel...)`` and bias B of shape ``bias``
    (``None``: absent), after checking that channels, groups and bias agree;
    ``read_ints`` as for :func:`spatial_window`."""
    if x[1] != w[1] * group:
        raise UsageError(
            f"{op_type}: input X has {x[1]} channels, but W expects {w[1]} per group "
            f"x {group} groups = {w[1] * group}"
        )
    if w[0] % group:
        raise UsageError(f"{op_type}: W's {w[0]} output channels do not divide into {group} groups")
    _check_bias(op_type, bias, w[0])
    return spatial_window(op_type, x[2:], w[2:], auto_pad, read_ints, cls=cls)


def conv_transpose_window(
    op_type: str,
    x: Sequence[int],
    w: Sequence[int],
    bias: Sequence[int] | None,
    group: int,
    auto_pad: str,
    read_ints: Callable[[str], Sequence[int] | None],
    *,
    cls: type[_W] = SpatialWindow,  # type: ignore[assignment]
) -> TransposedWindow[_W]:
    """The geometry of an ONNX ``ConvTranspose`` of input X of shape ``x``, weights W of
    shape ``w`` ``(C, M/group, kernel...)`` and bias B of shape ``bias`` (``None``:
    absent). ``read_ints`` gives ``output_padding``, ``strides``, ``dilations``,
    ``output_shape`` and ``pads``. ``output_shape`` (or ``auto_pad`` SAME_*) sets the
    pads, split as ONNX prescribes; each ``output_padding`` must be smaller than the
    stride or the dilation of its axis."""
    if w[0] != x[1]:
        raise UsageError(f"{op_type}: input X has {x[1]} channels, but W has {w[0]} input channels")
    if x[1] % group:
        raise UsageError(f"{op_type}: X's {x[1]} channels do not divide into {group} groups")
    _check_bias(op_type, bias, w[1] * group)
    n = len(x) - 2
    sizes, kernel = tuple(x[2:]), tuple(w[2:])
    output_padding = tuple(read_ints("output_padding") or [0] * n)
    if len(output_padding) != n or any(p < 0 for p in output_padding):
        raise UsageError(
            f"{op_type}: attribute output_padding needs {n} non-negative values, "
            f"got {list(output_padding)}"
        )
    base = spatial_window(op_type, sizes, kernel, "VALID", read_ints, fit=False, cls=cls)
    full = tuple(
        s * (i - 1) + p + k
        for s, i, p, k in zip(
            base.strides, sizes, output_padding, base.effective_kernel, strict=True
        )
    )
    output_shape = read_ints("output_shape")
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        if output_shape is None:
            target = tuple(i * s for i, s in zip(sizes, base.strides, strict=True))
        elif len(output_shape) in (n, n + 2):
            target = tuple(output_shape[-n:])
        else:
            raise UsageError(
                f"{op_type}: attribute output_shape needs {n} values, got {output_shape}"
            )
        if any(t < 1 for t in target):
            raise UsageError(f"{op_type}: output_shape {list(target)} must be positive")
        pads = []
        for f, t in zip(full, target, strict=True):
            total = max(f - t, 0)
            begin = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
            pads.append((begin, f - t - begin))
        win = base.with_pads(pads)
    elif auto_pad == "VALID":
        win = base
    else:
        win = spatial_window(op_type, sizes, kernel, "NOTSET", read_ints, fit=False, cls=cls)
    out = tuple(f - b - e for f, (b, e) in zip(full, win.pads, strict=True))
    if any(o < 1 for o in out):
        raise UsageError(
            f"{op_type}: pads {list(win.pads)} leave no output of the sizes {list(full)}"
        )
    for p, s, d in zip(output_padding, win.strides, win.dilations, strict=True):
        if p >= s and p >= d:
            raise UsageError(
                f"{op_type}: output_padding {list(output_padding)} must be smaller than the "
                f"stride or the dilation of each axis"
            )
    return TransposedWindow(win, output_padding, full, out)


def average_pool_divisors(
    win: SpatialWindow, out: Sequence[int], *, count_include_pad: bool
) -> np.ndarray:
    """What ONNX ``AveragePool`` divides each output's window sum by (shape ``out``): the
    number of input elements the window covers, plus the explicit pads it covers with
    ``count_include_pad`` (never the part of a ceil-mode window beyond the pads)."""
    out = tuple(out)
    counts = np.ones(out, dtype=np.float64)
    for axis, (size, (b, e), k, s, d, o) in enumerate(
        zip(win.sizes, win.pads, win.kernel, win.strides, win.dilations, out, strict=True)
    ):
        taps = (np.arange(o) * s - b)[:, None] + np.arange(k)[None, :] * d
        low, high = (-b, size + e) if count_include_pad else (0, size)
        count = ((taps >= low) & (taps < high)).sum(axis=1)
        shape = [1] * len(out)
        shape[axis] = o
        counts = counts * count.reshape(shape)
    return counts
