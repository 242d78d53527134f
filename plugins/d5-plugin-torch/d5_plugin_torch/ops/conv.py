"""Convolutions: ``Conv`` and ``ConvTranspose`` over 1, 2 or 3 spatial axes."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5_plugin_torch.ops._spatial import pad_argument
from d5core.onnx import ConvRules, ConvTransposeRules

__all__ = ["Conv", "ConvTranspose"]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}


class Conv(ConvRules, TorchOperator):
    """ONNX ``Conv``: asymmetric pads are applied with ``F.pad`` before the convolution."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        win = self._window(sig)
        conv = _CONV[len(win.sizes)]
        strides, dilations, group = win.strides, win.dilations, self.group
        if win.symmetric:
            padding = win.begin_pads

            def kernel(
                x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None
            ) -> tuple[torch.Tensor]:
                return (conv(x, w, b, strides, padding, dilations, group),)

            return kernel
        pad = pad_argument(win.pads)

        def padded(
            x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None
        ) -> tuple[torch.Tensor]:
            return (conv(F.pad(x, pad), w, b, strides, 0, dilations, group),)

        return padded


class ConvTranspose(ConvTransposeRules, TorchOperator):
    """ONNX ``ConvTranspose``: asymmetric pads crop the unpadded result.

    ``output_shape`` (or ``auto_pad`` SAME_*) sets the pads, split as ONNX prescribes; an
    output larger than the full result is reached by zeros at the end (then the bias), as
    in ONNX's own example. Like ONNX, torch requires each ``output_padding`` to be smaller
    than the stride or the dilation of its axis.
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        win, output_padding, full, _ = self._geometry(sig)
        conv_t = _CONV_T[len(win.sizes)]
        strides, dilations, group = win.strides, win.dilations, self.group
        if win.symmetric:
            padding = win.begin_pads

            def kernel(
                x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None
            ) -> tuple[torch.Tensor]:
                return (conv_t(x, w, b, strides, padding, output_padding, group, dilations),)

            return kernel
        if all(e >= 0 for _, e in win.pads):
            crop: tuple[Any, ...] = (
                ...,
                *(slice(b, f - e) for f, (b, e) in zip(full, win.pads, strict=True)),
            )

            def cropped(
                x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None
            ) -> tuple[torch.Tensor]:
                return (conv_t(x, w, b, strides, 0, output_padding, group, dilations)[crop],)

            return cropped
        # Negative F.pad widths crop; positive ones add the zeros; the bias comes after.
        pad = pad_argument([(-b, -e) for b, e in win.pads])
        channel = (1, -1) + (1,) * len(win.sizes)

        def extended(
            x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None
        ) -> tuple[torch.Tensor]:
            y = F.pad(conv_t(x, w, None, strides, 0, output_padding, group, dilations), pad)
            return (y if b is None else y + b.reshape(channel),)

        return extended
