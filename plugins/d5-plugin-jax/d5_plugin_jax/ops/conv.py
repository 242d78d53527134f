"""Convolutions: ``Conv`` and ``ConvTranspose`` over 1, 2 or 3 spatial axes, each one
``lax.conv_general_dilated`` in ONNX's channels-first layout (XLA picks its own layout
inside the compiled program)."""

from __future__ import annotations

from typing import Any

from d5_plugin_jax.ops._base import JaxOperator, Kernel, Signature, jax
from d5core.onnx import ConvRules, ConvTransposeRules

__all__ = ["Conv", "ConvTranspose", "dimension_numbers"]

lax = jax.lax

_SPATIAL = "DHW"


def dimension_numbers(spatial: int) -> tuple[str, str, str]:
    """``lax.conv_general_dilated``'s layouts for ONNX's: ``NC...``, ``OI...``, ``NC...``."""
    axes = _SPATIAL[-spatial:]
    return f"NC{axes}", f"OI{axes}", f"NC{axes}"


def _bias_shape(spatial: int) -> tuple[int, ...]:
    return (1, -1) + (1,) * spatial


class Conv(ConvRules, JaxOperator):
    """ONNX ``Conv``: pads (asymmetric ones too), strides, dilations and groups are
    arguments of ``lax.conv_general_dilated``; the bias is added after."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        win = self._window(sig)
        spatial = len(win.sizes)
        numbers = dimension_numbers(spatial)
        strides, dilations, group = win.strides, win.dilations, self.group
        padding = [tuple(p) for p in win.pads]
        channel = _bias_shape(spatial)

        def kernel(x: Any, w: Any, b: Any = None) -> tuple[Any]:
            y = lax.conv_general_dilated(
                x,
                w,
                window_strides=strides,
                padding=padding,
                rhs_dilation=dilations,
                dimension_numbers=numbers,
                feature_group_count=group,
            )
            return (y if b is None else y + b.reshape(channel),)

        return kernel


class ConvTranspose(ConvTransposeRules, JaxOperator):
    """ONNX ``ConvTranspose`` as the convolution it transposes: the input dilated by the
    strides (``lhs_dilation``), the kernel flipped with its two channel axes swapped per
    group, padded to the full result (with ``output_padding`` at the end), then ONNX's
    pads cropped off by ``lax.pad`` (a negative end pad adds zeros), then the bias."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        win, output_padding, _, _ = self._geometry(sig)
        w_shape = sig.shapes[1]
        assert w_shape is not None
        spatial = len(win.sizes)
        numbers = dimension_numbers(spatial)
        group = self.group
        c_in, c_out_g = w_shape[0], w_shape[1]
        kernel_sizes = w_shape[2:]
        full_pads = [
            (d * (k - 1), d * (k - 1) + op)
            for d, k, op in zip(win.dilations, kernel_sizes, output_padding, strict=True)
        ]
        crop = [(0, 0, 0), (0, 0, 0)] + [(-b, -e, 0) for b, e in win.pads]
        cropped = any(b or e for b, e in win.pads)
        flip = tuple(range(2, 2 + spatial))
        strides, dilations = win.strides, win.dilations
        channel = _bias_shape(spatial)

        def transposed_weights(w: Any) -> Any:
            # (C_in, C_out/g, k...) -> (g, C_in/g, C_out/g, k...) -> (C_out, C_in/g, k...)
            grouped = w.reshape(group, c_in // group, c_out_g, *kernel_sizes)
            swapped = grouped.swapaxes(1, 2).reshape(group * c_out_g, c_in // group, *kernel_sizes)
            return lax.rev(swapped, flip)

        def kernel(x: Any, w: Any, b: Any = None) -> tuple[Any]:
            y = lax.conv_general_dilated(
                x,
                transposed_weights(w),
                window_strides=(1,) * spatial,
                padding=full_pads,
                lhs_dilation=strides,
                rhs_dilation=dilations,
                dimension_numbers=numbers,
                feature_group_count=group,
            )
            if cropped:
                y = lax.pad(y, lax.convert_element_type(0, y.dtype), crop)
            return (y if b is None else y + b.reshape(channel),)

        return kernel
