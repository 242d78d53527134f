"""Window geometry shared by convolutions and pooling: ONNX pads, auto_pad, output sizes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from d5_plugin_torch.ops._base import TorchOperator
from d5core.api import AUTO_PADS, resolve_pads

__all__ = ["Window", "auto_pad_of", "pad_argument", "window"]


@dataclass(frozen=True)
class Window:
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
    def symmetric(self) -> bool:
        """Whether every axis is padded equally at both ends (torch's ``padding``)."""
        return all(b == e for b, e in self.pads)

    @property
    def begin_pads(self) -> tuple[int, ...]:
        return tuple(b for b, _ in self.pads)

    def out_sizes(self, ceil_mode: bool = False) -> tuple[int, ...]:
        """ONNX output sizes; with ``ceil_mode`` a window starting in the end padding is
        dropped (ONNX and torch agree on this)."""
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


def pad_argument(pads: Sequence[tuple[int, int]]) -> list[int]:
    """``torch.nn.functional.pad``'s argument for (begin, end) pads of the spatial axes."""
    flat: list[int] = []
    for b, e in reversed(pads):
        flat += [b, e]
    return flat


def auto_pad_of(op: TorchOperator) -> str:
    """The operator's ``auto_pad`` attribute, checked."""
    value = str(op.attr("auto_pad"))
    if value not in AUTO_PADS:
        raise op.fail(f"auto_pad must be one of {', '.join(AUTO_PADS)}, got {value!r}")
    return value


def _per_axis(op: TorchOperator, name: str, n: int, default: int) -> tuple[int, ...]:
    values = op.ints(name)
    if values is None:
        return (default,) * n
    if len(values) != n:
        raise op.fail(f"attribute {name} needs {n} values for {n} spatial axes, got {values}")
    if any(v < 1 for v in values):
        raise op.fail(f"attribute {name} must be positive, got {values}")
    return tuple(values)


def window(
    op: TorchOperator,
    sizes: Sequence[int],
    kernel: Sequence[int],
    auto_pad: str,
    *,
    fit: bool = True,
) -> Window:
    """The window of ``op`` over spatial ``sizes`` with a ``kernel`` (from W or an
    attribute), reading ``strides``, ``dilations`` and ``pads`` and applying ``auto_pad``
    the way ONNX's Conv and pooling operators do (:func:`d5core.api.resolve_pads`). With
    ``fit`` the dilated kernel must fit in the padded input (not so for a transposed
    convolution)."""
    n = len(sizes)
    strides = _per_axis(op, "strides", n, 1)
    dilations = _per_axis(op, "dilations", n, 1)
    pads = op.ints("pads") if auto_pad == "NOTSET" else None
    begins, ends = resolve_pads(
        sizes,
        kernel,
        auto_pad=auto_pad,
        pads=pads,
        strides=strides,
        dilations=dilations,
        op_type=op.op_type,
    )
    win = Window(
        tuple(kernel), strides, dilations, tuple(zip(begins, ends, strict=True)), tuple(sizes)
    )
    for size, (b, e), k in zip(sizes, win.pads, win.effective_kernel, strict=True):
        if fit and size + b + e < k:
            raise op.fail(
                f"the kernel {list(kernel)} (dilated {list(win.effective_kernel)}) does not fit "
                f"in input X of spatial size {list(sizes)} with pads {list(win.pads)}"
            )
    return win
