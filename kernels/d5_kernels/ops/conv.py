"""Conv 2-D in C++: a direct convolution or im2col plus the packed GEMM.

The forward picks its algorithm per problem in C++ (``conv2d_forward_algorithm`` says
which): the direct convolution (register tiles of output pixels x output channels, the
weights repacked once per call or, for a single image, block by block as they are used,
the taps on padding skipped) where the ISA has its kernels and the shape suits it;
otherwise im2col plus the GEMM per image and group (skipped for a 1x1 convolution with
unit strides and no padding). The backward multiplies by the im2col columns for dW and
scatters ``W^T dY`` back (col2im) for dX.
See kernels/README.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from d5_kernels import _native
from d5_kernels.ops._base import NativeOperator, Signature
from d5core.onnx import ConvRules, SpatialWindow, conv_window

__all__ = ["BACKWARD_ALGORITHM", "Conv", "ConvPlan", "forward_algorithm"]

#: The backward's lowering, whatever the forward's: dW from the im2col columns, dX by col2im.
BACKWARD_ALGORITHM = "im2col + packed GEMM"


@dataclass(frozen=True)
class ConvPlan:
    out: tuple[int, ...]
    #: (stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left, pad_bottom, pad_right)
    params: tuple[int, ...]
    #: X's shape (N, C, H, W) and W's (M, C/group, kH, kW)
    x: tuple[int, ...]
    w: tuple[int, ...]


def forward_algorithm(plan: ConvPlan, dtype: str, group: int) -> str:
    """The name of the lowering the native forward uses for ``plan`` in ``dtype``."""
    return _native.conv2d_forward_algorithm(
        dtype, plan.x, plan.w[0], plan.w[2:], plan.out[2:], group, plan.params
    )


class Conv(ConvRules, NativeOperator[ConvPlan]):
    """ONNX ``Conv`` over 2 spatial axes, with strides, pads (or ``auto_pad``),
    dilations and groups."""

    #: Before any shapes are known; :meth:`details` names the lowering for the last plan.
    algorithm = "direct convolution or im2col + packed GEMM (chosen per shape)"

    def configure(self) -> None:
        super().configure()
        self._last: tuple[ConvPlan, str] | None = None

    def details(self) -> dict[str, Any]:
        """As for every operator, with ``algorithm`` the forward lowering the C++ side
        chooses for the last shapes and dtype planned (and the ISA in use now), and
        ``backward_algorithm`` the backward's."""
        found = super().details()
        if self._last is not None:
            found["algorithm"] = forward_algorithm(*self._last, self.group)
        found["backward_algorithm"] = BACKWARD_ALGORITHM
        return found

    def plan(self, sig: Signature) -> ConvPlan:
        x = self.require_rank(sig, 0, (4,), what="(N, C, H, W): the native Conv is 2-D")
        w = self.require_rank(sig, 1, (4,), what="(M, C/group, kH, kW)")
        bias = sig.shapes[2] if len(sig.shapes) > 2 else None
        kernel = self.ints("kernel_shape")
        if kernel is not None and tuple(kernel) != tuple(w[2:]):
            raise self.fail(
                f"attribute kernel_shape {kernel} does not match W's spatial shape {list(w[2:])}"
            )
        win: SpatialWindow = conv_window(
            self.op_type, x, w, bias, self.group, self.auto_pad, self.ints
        )
        out = win.out_sizes()
        (ph, pe_h), (pw, pe_w) = win.pads
        params = (*win.strides, *win.dilations, ph, pw, pe_h, pe_w)
        made = ConvPlan((x[0], w[0], *out), tuple(int(p) for p in params), tuple(x), tuple(w))
        self._last = (made, sig.dtype)
        return made

    def output_specs(self, plan: ConvPlan, dtype: str) -> list[tuple[tuple[int, ...], str]]:
        return [(plan.out, dtype)]

    def run_forward(self, plan: ConvPlan, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        bias = inputs[2] if len(inputs) > 2 else None
        _native.conv2d_forward(inputs[0], inputs[1], bias, outputs[0], self.group, plan.params)

    def run_backward(
        self,
        plan: ConvPlan,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grads: Sequence[Any],
    ) -> None:
        db = grads[2] if len(grads) > 2 else None
        _native.conv2d_backward(
            inputs[0], inputs[1], grad_outputs[0], grads[0], grads[1], db, self.group, plan.params
        )
