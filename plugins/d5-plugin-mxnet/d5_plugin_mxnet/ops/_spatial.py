"""Window geometry shared by convolutions and pooling (ONNX pads, auto_pad, output
sizes), and the explicit padding MXNet's symmetric ``pad`` arguments cannot express."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from d5_plugin_mxnet.ops._base import mx
from d5core.onnx import SpatialWindow

__all__ = ["Window", "channel_shape", "pad_spatial"]

#: How a window slides over the spatial axes of one input (:class:`d5core.api.SpatialWindow`).
Window = SpatialWindow


def channel_shape(rank: int, channels: int) -> tuple[int, ...]:
    """The shape that broadcasts a per-channel vector over data of ``rank`` axes."""
    return (1, channels) + (1,) * (rank - 2)


def pad_spatial(
    x: Any, shape: Sequence[int], pads: Sequence[tuple[int, int]], value: float = 0.0
) -> Any:
    """``x`` (of ``shape``, N and C then spatial axes) padded by (begin, end) ``pads`` on
    the spatial axes, with ``value``; a negative pad crops. The padding is applied before
    the crops, so that a crop at one end of an axis and padding at the other never leave
    an empty array in between (MXNet 1.9 cannot hold one). MXNet's ``pad`` takes 4-D and
    5-D data only: 3-D data (one spatial axis) goes through a height of one."""
    grow = [(max(b, 0), max(e, 0)) for b, e in pads]
    if any(b or e for b, e in grow):
        x = _pad(x, shape, grow, value)
        shape = (*shape[:2], *(n + b + e for n, (b, e) in zip(shape[2:], grow, strict=True)))
    if any(b < 0 or e < 0 for b, e in pads):
        begin = (None, None, *(max(-b, 0) for b, _ in pads))
        end = (None, None, *(n - max(-e, 0) for n, (_, e) in zip(shape[2:], pads, strict=True)))
        x = mx.nd.slice(x, begin=begin, end=end)
    return x


def _pad(x: Any, shape: Sequence[int], pads: Sequence[tuple[int, int]], value: float) -> Any:
    """``x`` of ``shape`` padded by the non-negative (begin, end) ``pads``."""
    flat = [0, 0, 0, 0]
    for b, e in pads:
        flat += [b, e]
    if len(pads) == 1:
        four = mx.nd.reshape(x, shape=(shape[0], shape[1], 1, shape[2]))
        padded = mx.nd.pad(four, mode="constant", pad_width=(*flat[:4], 0, 0, *flat[4:]),
                           constant_value=value)  # fmt: skip
        return mx.nd.reshape(padded, shape=(shape[0], shape[1], shape[2] + sum(pads[0])))
    return mx.nd.pad(x, mode="constant", pad_width=tuple(flat), constant_value=value)
