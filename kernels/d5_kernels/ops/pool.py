"""MaxPool and AveragePool over 2 spatial axes: direct loops over each window in C++,
one (image, channel) plane per OpenMP iteration."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from d5_kernels import _native
from d5_kernels.ops._base import NativeOperator, Signature
from d5core.onnx import (
    AveragePoolRules,
    MaxPoolRules,
    PoolRules,
    SpatialWindow,
    spatial_window,
)

__all__ = ["AveragePool", "MaxPool", "PoolPlan"]


@dataclass(frozen=True)
class PoolPlan:
    out: tuple[int, ...]
    #: (kH, kW, stride_h, stride_w, dilation_h, dilation_w, pad_top, pad_left,
    #: pad_bottom, pad_right)
    params: tuple[int, ...]


class _Pool(PoolRules, NativeOperator[PoolPlan]):
    algorithm = "direct window loops"

    def configure(self) -> None:
        super().configure()
        kernel = list(self.kernel_shape)
        if len(kernel) != 2:
            raise self.fail(
                f"kernel_shape {kernel} has {len(kernel)} axes; the native backend pools "
                f"over 2 spatial axes only"
            )
        self.kernel_shape = (kernel[0], kernel[1])

    def plan(self, sig: Signature) -> PoolPlan:
        x = self.require_rank(sig, 0, (4,), what="(N, C, H, W) for a 2-D kernel_shape")
        win: SpatialWindow = spatial_window(
            self.op_type, x[2:], self.kernel_shape, self.auto_pad, self.ints
        )
        out = win.out_sizes(self.ceil_mode)
        (ph, pe_h), (pw, pe_w) = win.pads
        params = (*self.kernel_shape, *win.strides, *win.dilations, ph, pw, pe_h, pe_w)
        return PoolPlan((x[0], x[1], *out), tuple(int(p) for p in params))


class MaxPool(MaxPoolRules, _Pool):
    """ONNX ``MaxPool``: outputs ``Y`` and ``Indices`` (flat positions in X, row-major or,
    with ``storage_order=1``, column-major within each plane). The first maximum in a
    window wins and takes the gradient."""

    def output_specs(self, plan: PoolPlan, dtype: str) -> list[tuple[tuple[int, ...], str]]:
        return [(plan.out, dtype), (plan.out, "int64")]

    def run_forward(self, plan: PoolPlan, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        _native.max_pool_forward(inputs[0], outputs[0], outputs[1], plan.params, self.storage_order)

    def run_backward(
        self,
        plan: PoolPlan,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grads: Sequence[Any],
    ) -> None:
        _native.max_pool_backward(inputs[0], grad_outputs[0], grads[0], plan.params)


class AveragePool(AveragePoolRules, _Pool):
    """ONNX ``AveragePool``: each window's sum over the input it covers, divided by that
    count, or with ``count_include_pad`` by the count including explicit pads (never the
    part of a ceil-mode window beyond them)."""

    def output_specs(self, plan: PoolPlan, dtype: str) -> list[tuple[tuple[int, ...], str]]:
        return [(plan.out, dtype)]

    def run_forward(self, plan: PoolPlan, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        _native.avg_pool_forward(inputs[0], outputs[0], plan.params, self.count_include_pad)

    def run_backward(
        self,
        plan: PoolPlan,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grads: Sequence[Any],
    ) -> None:
        _native.avg_pool_backward(grad_outputs[0], grads[0], plan.params, self.count_include_pad)
