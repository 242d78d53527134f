"""Convolutions: ``Conv`` and ``ConvTranspose`` over 1, 2 or 3 spatial axes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch
import torch.nn.functional as F

from d5_plugin_torch.ops._base import Kernel, Signature, Slot, TorchOperator
from d5_plugin_torch.ops._spatial import Window, auto_pad_of, pad_argument, window

__all__ = ["Conv", "ConvTranspose"]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_T = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}

_ATTRIBUTES: dict[str, Any] = {
    "auto_pad": "NOTSET",
    "dilations": None,
    "group": 1,
    "kernel_shape": None,
    "pads": None,
    "strides": None,
}


class _Convolution(TorchOperator):
    slots = (Slot("X"), Slot("W"), Slot("B", optional=True))

    def configure(self) -> None:
        self.auto_pad = auto_pad_of(self)
        self.group = int(self.attr("group"))
        if self.group < 1:
            raise self.fail(f"attribute group must be positive, got {self.group}")

    def _shapes(self, sig: Signature) -> tuple[tuple[int, ...], tuple[int, ...]]:
        x = self.require_rank(sig, 0, (3, 4, 5), what="(N, C, then 1 to 3 spatial axes)")
        w = self.require_rank(sig, 1, (len(x),), what="(like X: two axes, then the kernel)")
        kernel_shape = self.ints("kernel_shape")
        if kernel_shape is not None and tuple(kernel_shape) != w[2:]:
            raise self.fail(f"attribute kernel_shape {kernel_shape} differs from W's {list(w[2:])}")
        return x, w

    def _check_bias(self, sig: Signature, channels: int) -> None:
        if len(sig.shapes) > 2 and sig.shapes[2] is not None and sig.shapes[2] != (channels,):
            raise self.fail(
                f"input B must have shape ({channels},) (one per output channel), "
                f"got {sig.shapes[2]}"
            )


class Conv(_Convolution):
    """ONNX ``Conv``: asymmetric pads are applied with ``F.pad`` before the convolution."""

    op_type = "Conv"
    attribute_defaults: ClassVar[Mapping[str, Any]] = _ATTRIBUTES

    def _window(self, sig: Signature) -> Window:
        x, w = self._shapes(sig)
        if x[1] != w[1] * self.group:
            raise self.fail(
                f"input X has {x[1]} channels, but W expects {w[1]} per group "
                f"x {self.group} groups = {w[1] * self.group}"
            )
        if w[0] % self.group:
            raise self.fail(f"W's {w[0]} output channels do not divide into {self.group} groups")
        self._check_bias(sig, w[0])
        return window(self, x[2:], w[2:], self.auto_pad)

    def check(self, sig: Signature) -> None:
        self._window(sig)

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


class ConvTranspose(_Convolution):
    """ONNX ``ConvTranspose``: asymmetric pads crop the unpadded result.

    ``output_shape`` (or ``auto_pad`` SAME_*) sets the pads, split as ONNX prescribes; an
    output larger than the full result is reached by zeros at the end (then the bias), as
    in ONNX's own example. Like ONNX, torch requires each ``output_padding`` to be smaller
    than the stride or the dilation of its axis.
    """

    op_type = "ConvTranspose"
    attribute_defaults: ClassVar[Mapping[str, Any]] = {
        **_ATTRIBUTES,
        "output_padding": None,
        "output_shape": None,
    }

    def _geometry(
        self, sig: Signature
    ) -> tuple[Window, tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """The window, output padding, full (uncropped) sizes and output sizes."""
        x, w = self._shapes(sig)
        if w[0] != x[1]:
            raise self.fail(f"input X has {x[1]} channels, but W has {w[0]} input channels")
        if x[1] % self.group:
            raise self.fail(f"X's {x[1]} channels do not divide into {self.group} groups")
        self._check_bias(sig, w[1] * self.group)
        n = len(x) - 2
        sizes, kernel = x[2:], w[2:]
        output_padding = tuple(self.ints("output_padding") or [0] * n)
        if len(output_padding) != n or any(p < 0 for p in output_padding):
            raise self.fail(
                f"attribute output_padding needs {n} non-negative values, "
                f"got {list(output_padding)}"
            )
        base = window(self, sizes, kernel, "VALID", fit=False)
        full = tuple(
            s * (i - 1) + p + k
            for s, i, p, k in zip(
                base.strides, sizes, output_padding, base.effective_kernel, strict=True
            )
        )
        output_shape = self.ints("output_shape")
        if output_shape is not None or self.auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            if output_shape is None:
                target = tuple(i * s for i, s in zip(sizes, base.strides, strict=True))
            elif len(output_shape) in (n, n + 2):
                target = tuple(output_shape[-n:])
            else:
                raise self.fail(f"attribute output_shape needs {n} values, got {output_shape}")
            if any(t < 1 for t in target):
                raise self.fail(f"output_shape {list(target)} must be positive")
            pads = []
            for f, t in zip(full, target, strict=True):
                # A negative end pad extends the output with zeros.
                total = max(f - t, 0)
                begin = total // 2 if self.auto_pad == "SAME_UPPER" else total - total // 2
                pads.append((begin, f - t - begin))
            win = Window(base.kernel, base.strides, base.dilations, tuple(pads), base.sizes)
        elif self.auto_pad == "VALID":
            win = base
        else:
            win = window(self, sizes, kernel, "NOTSET", fit=False)
        out = tuple(f - b - e for f, (b, e) in zip(full, win.pads, strict=True))
        if any(o < 1 for o in out):
            raise self.fail(f"pads {list(win.pads)} leave no output of the sizes {list(full)}")
        for p, s, d in zip(output_padding, win.strides, win.dilations, strict=True):
            if p >= s and p >= d:
                raise self.fail(
                    f"output_padding {list(output_padding)} must be smaller than the stride "
                    f"or the dilation of each axis"
                )
        return win, output_padding, full, out

    def check(self, sig: Signature) -> None:
        self._geometry(sig)

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
