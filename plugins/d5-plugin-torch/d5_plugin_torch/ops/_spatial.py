"""What convolutions and pooling share in torch: the window type and ``F.pad``'s pads
(the window itself is ONNX's, from :mod:`d5core.onnx`)."""

from __future__ import annotations

from collections.abc import Sequence

from d5core.onnx import SpatialWindow

__all__ = ["Window", "pad_argument"]


#: How a window slides over the spatial axes of one input (:class:`d5core.api.SpatialWindow`).
Window = SpatialWindow


def pad_argument(pads: Sequence[tuple[int, int]]) -> list[int]:
    """``torch.nn.functional.pad``'s argument for (begin, end) pads of the spatial axes."""
    flat: list[int] = []
    for b, e in reversed(pads):
        flat += [b, e]
    return flat
