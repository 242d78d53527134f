"""Convolutions: ``Conv`` and ``ConvTranspose`` over 1, 2 or 3 spatial axes, by
``mx.nd.Convolution`` and ``mx.nd.Deconvolution``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from d5_plugin_mxnet.ops._base import MXNetOperator, Plan, Signature, mx
from d5_plugin_mxnet.ops._spatial import channel_shape, pad_spatial
from d5core.onnx import ConvRules, ConvTransposeRules

__all__ = ["Conv", "ConvTranspose"]


class Conv(ConvRules, MXNetOperator):
    """ONNX ``Conv``: one ``mx.nd.Convolution``; asymmetric pads are applied with
    ``mx.nd.pad`` before it (:func:`~d5_plugin_mxnet.ops._spatial.pad_spatial`)."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        win = self._window(sig)
        x_shape, w_shape = sig.shapes[0], sig.shapes[1]
        assert x_shape is not None and w_shape is not None
        conv = mx.nd.Convolution
        options: dict[str, Any] = {
            "kernel": tuple(w_shape[2:]),
            "stride": win.strides,
            "num_filter": w_shape[0],
        }
        # Attributes at MXNet's defaults are left out, as a hand-written call leaves
        # them: each one is turned into text and parsed again on every call (2-4 µs).
        if any(d != 1 for d in win.dilations):
            options["dilate"] = win.dilations
        if self.group != 1:
            options["num_group"] = self.group
        if win.symmetric:
            options["pad"] = win.begin_pads
            notes: tuple[str, ...] = ()
        else:
            options["pad"] = (0,) * len(win.sizes)
            notes = ("asymmetric pads applied by mx.nd.pad before the convolution",)
        pads = () if win.symmetric else win.pads

        def kernel(x: Any, w: Any, b: Any = None) -> tuple[Any]:
            if pads:
                x = pad_spatial(x, x_shape, pads)
            if b is None:
                return (conv(x, w, no_bias=True, **options),)
            return (conv(x, w, b, **options),)

        return Plan(kernel, notes=notes)


def _spread(
    t: Any, shape: tuple[int, ...], axis: int, factor: int, dtype: str
) -> tuple[Callable[[Any], Any], tuple[int, ...]]:
    """A function that puts ``factor - 1`` zeros between neighbours along ``axis`` of an
    array of ``shape`` (expand, concatenate zeros, fold, trim), and the shape it gives."""
    n = shape[axis]
    zeros = mx.nd.zeros((*shape[: axis + 1], factor - 1, *shape[axis + 1 :]), dtype=dtype)
    folded = (*shape[:axis], n * factor, *shape[axis + 1 :])
    size = (n - 1) * factor + 1
    nd = mx.nd

    def spread(x: Any) -> Any:
        both = nd.concat(nd.expand_dims(x, axis=axis + 1), zeros, dim=axis + 1)
        return nd.slice_axis(nd.reshape(both, shape=folded), axis=axis, begin=0, end=size)

    del t
    return spread, (*shape[:axis], size, *shape[axis + 1 :])


class ConvTranspose(ConvTransposeRules, MXNetOperator):
    """ONNX ``ConvTranspose``: one ``mx.nd.Deconvolution``.

    Undilated, with symmetric pads and output padding below the stride, it is one
    ``mx.nd.Deconvolution`` with its own ``pad`` and ``adj``. Other cases are a
    convolution, as the transposed convolution is defined: the input spread by the
    strides (zeros between its elements) and padded by the dilated kernel's extent less
    one, convolved (``mx.nd.Convolution``, with the dilations) with the flipped kernel
    whose input and output channels are swapped within each group. That also covers
    what MXNet's Deconvolution gets wrong or lacks: dilations (wrong results in 1.9.1),
    3-D in float64 (only its oneDNN float32 kernel exists). The full result is then
    cropped by the pads (a negative pad, from an ``output_shape`` larger than the full
    result, extends it with zeros, as does output padding), and the bias added.
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        win, output_padding, full, _ = self._geometry(sig)
        x_shape, w_shape = sig.shapes[0], sig.shapes[1]
        assert x_shape is not None and w_shape is not None
        deconv = mx.nd.Deconvolution
        channels = w_shape[1] * self.group
        options = {
            "kernel": tuple(w_shape[2:]),
            "stride": win.strides,
            "dilate": win.dilations,
            "num_filter": channels,
            "num_group": self.group,
        }
        native = (
            win.symmetric
            and all(d == 1 for d in win.dilations)
            and all(p < s for p, s in zip(output_padding, win.strides, strict=True))
            and not (len(win.sizes) == 3 and sig.dtype == "float64")
        )
        if native:
            options.update(pad=win.begin_pads, adj=output_padding)

            def kernel(x: Any, w: Any, b: Any = None) -> tuple[Any]:
                return (deconv(x, w, b, no_bias=b is None, **options),)

            return Plan(kernel)
        rank, group = len(win.sizes), self.group
        spreads = []
        spread_shape = tuple(x_shape)
        for axis, s in enumerate(win.strides, start=2):
            if s > 1:
                step, spread_shape = _spread(None, spread_shape, axis, s, sig.dtype)
                spreads.append(step)
        extents = [(k - 1) * d for k, d in zip(win.kernel, win.dilations, strict=True)]
        per_group = (group, x_shape[1] // group, w_shape[1], *w_shape[2:])
        swapped = (channels, x_shape[1] // group, *w_shape[2:])
        flip_axes = tuple(range(2, 2 + rank))
        conv_options = {
            "kernel": tuple(w_shape[2:]),
            "stride": (1,) * rank,
            "dilate": win.dilations,
            "pad": (0,) * rank,
            "num_filter": channels,
            "num_group": group,
            "no_bias": True,
        }
        unpadded = (
            x_shape[0],
            channels,
            *(f - p for f, p in zip(full, output_padding, strict=True)),
        )
        crops = [(-b, p - e) for (b, e), p in zip(win.pads, output_padding, strict=True)]
        bias_shape = channel_shape(len(x_shape), channels)
        nd = mx.nd

        def composed(x: Any, w: Any, b: Any = None) -> tuple[Any]:
            for step in spreads:
                x = step(x)
            x = pad_spatial(x, spread_shape, [(e, e) for e in extents])
            grouped = nd.transpose(
                nd.reshape(w, shape=per_group), axes=(0, 2, 1, *range(3, 3 + rank))
            )
            kernel_w = nd.flip(nd.reshape(grouped, shape=swapped), axis=flip_axes)
            y = nd.Convolution(x, kernel_w, **conv_options)
            y = pad_spatial(y, unpadded, crops)
            return (y if b is None else nd.broadcast_add(y, nd.reshape(b, shape=bias_shape)),)

        note = (
            "a convolution of the stride-spread input with the flipped kernel (mx.nd.Convolution)"
        )
        return Plan(composed, notes=(note,))
