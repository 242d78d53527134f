"""Window geometry shared by convolutions and pooling: ONNX pads, auto_pad, output sizes."""

from __future__ import annotations

from collections.abc import Sequence

from d5_plugin_torch.ops._base import TorchOperator
from d5core.api import SpatialWindow, check_auto_pad, spatial_window

__all__ = ["Window", "auto_pad_of", "pad_argument", "window"]


#: How a window slides over the spatial axes of one input (:class:`d5core.api.SpatialWindow`).
Window = SpatialWindow


def pad_argument(pads: Sequence[tuple[int, int]]) -> list[int]:
    """``torch.nn.functional.pad``'s argument for (begin, end) pads of the spatial axes."""
    flat: list[int] = []
    for b, e in reversed(pads):
        flat += [b, e]
    return flat


def auto_pad_of(op: TorchOperator) -> str:
    """The operator's ``auto_pad`` attribute, checked."""
    return check_auto_pad(op.op_type, op.attr("auto_pad"))


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
    return spatial_window(op.op_type, sizes, kernel, auto_pad, op.ints, fit=fit, cls=Window)
