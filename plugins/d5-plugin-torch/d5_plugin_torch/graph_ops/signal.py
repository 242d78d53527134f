"""Signal processing: DFT with torch.fft (real and complex signals, forward, inverse and
one-sided), signals held as ONNX does, with a last axis of 1 (real) or 2 (real,
imaginary); the Hann, Hamming and Blackman windows."""

from __future__ import annotations

import math
from typing import Any

import onnx
import torch

from d5_plugin_torch.graph_ops.base import (
    Tensor,
    Translation,
    TranslatorBase,
    int_list,
    onnx_dtype,
)

__all__ = ["SignalOps"]


def _complex(x: Tensor) -> Tensor:
    """A signal ``(..., 1)`` or ``(..., 2)`` as a complex (or real) tensor ``(...)``."""
    if x.shape[-1] == 1:
        return x.squeeze(-1)
    return torch.complex(x[..., 0].to(torch.float64), x[..., 1].to(torch.float64))


def _pairs(y: Tensor, dtype: torch.dtype) -> Tensor:
    """A complex result as ``(..., 2)``; a real one as ``(..., 1)``."""
    if y.is_complex():
        return torch.stack([y.real, y.imag], -1).to(dtype)
    return y.unsqueeze(-1).to(dtype)


#: Each window's cosine terms: w[n] = sum of c_k cos(2 pi k n / N) (ONNX's coefficients;
#: Hamming's are 25/46 and 21/46, not 0.54 and 0.46).
_WINDOWS = {
    "HannWindow": (0.5, -0.5),
    "HammingWindow": (25 / 46, -21 / 46),
    "BlackmanWindow": (0.42, -0.5, 0.08),
}


class SignalOps(TranslatorBase):
    """Translators of signal-processing operators."""

    def op_DFT(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        inverse, onesided = bool(int(a.get("inverse", 0))), bool(int(a.get("onesided", 0)))
        length_of = self.value(node, 1)
        if self.opset < 20:
            attribute_axis = int(a.get("axis", 1))
            axis_of = self.value(node, len(node.input) + 1)  # no such input
        else:
            attribute_axis = -2
            axis_of = self.value(node, 2)

        def dft(x: Tensor, *args: Tensor | None) -> tuple[Tensor]:
            padded = [*args, None, None]
            axis = (int_list(axis_of(padded[1])) or [attribute_axis])[0] % x.dim()
            given = int_list(length_of(padded[0]))
            if given:
                n = given[0]
            else:
                n = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
            signal = _complex(x)
            if x.shape[-1] == 1:
                signal = signal.to(torch.float64)
            if inverse:
                y = (
                    torch.fft.irfft(signal, n, axis)
                    if onesided
                    else torch.fft.ifft(signal, n, axis)
                )
            else:
                y = torch.fft.fft(signal, n, axis)
                if onesided:
                    y = y.narrow(axis, 0, n // 2 + 1)
            return (_pairs(y, x.dtype),)

        return dft, list(node.input[:3])

    def _window(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        terms = _WINDOWS[node.op_type]
        periodic = bool(int(a.get("periodic", 1)))
        dtype = onnx_dtype(int(a.get("output_datatype", onnx.TensorProto.FLOAT)))
        size_of = self.value(node, 0)

        def window(size_t: Tensor) -> tuple[Tensor]:
            size = (int_list(size_of(size_t)) or [0])[0]
            period = size if periodic else size - 1
            n = torch.arange(size, dtype=torch.float64, device=self.ex.torch_device)
            w = sum(c * torch.cos(2 * math.pi * k * n / period) for k, c in enumerate(terms))
            return (torch.as_tensor(w).to(dtype),)

        return window, [node.input[0]]

    op_HannWindow = _window
    op_HammingWindow = _window
    op_BlackmanWindow = _window
