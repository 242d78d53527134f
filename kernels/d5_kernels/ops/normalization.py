"""BatchNormalization (ONNX opset 15) in inference and training mode, one channel per
OpenMP iteration; statistics accumulate in double."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from d5_kernels import _native
from d5_kernels.ops._base import NativeOperator, Signature
from d5core.onnx import BatchNormalizationRules, check_per_channel

__all__ = ["BatchNormalization"]


@dataclass(frozen=True)
class NormPlan:
    shape: tuple[int, ...]
    channels: int


class BatchNormalization(BatchNormalizationRules, NativeOperator[NormPlan]):
    """Normalize ``X (N, C, ...)`` per channel, then scale and shift, as the reference
    defines it: inference uses ``input_mean`` and ``input_var``; training uses the
    batch's mean and biased variance and also outputs ``running_mean`` and
    ``running_var`` (``momentum * input + (1 - momentum) * batch``). The backward is the
    exact vector-Jacobian product in both modes, running statistics included."""

    algorithm = "per-channel loops"

    def plan(self, sig: Signature) -> NormPlan:
        x = self.require_rank(sig, 0, at_least=2)
        names = ("scale", "B", "input_mean", "input_var")
        check_per_channel(self.op_type, x, list(zip(names, sig.shapes[1:], strict=True)))
        return NormPlan(x, x[1])

    def output_specs(self, plan: NormPlan, dtype: str) -> list[tuple[tuple[int, ...], str]]:
        specs = [(plan.shape, dtype)]
        if self.training:
            specs += [((plan.channels,), dtype), ((plan.channels,), dtype)]
        return specs

    def run_forward(self, plan: NormPlan, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        x, scale, bias, mean, var = inputs
        running_mean = outputs[1] if self.training else None
        running_var = outputs[2] if self.training else None
        _native.batch_norm_forward(
            x, scale, bias, mean, var, outputs[0], running_mean, running_var,
            self.epsilon, self.momentum, self.training,
        )  # fmt: skip

    def run_backward(
        self,
        plan: NormPlan,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grads: Sequence[Any],
    ) -> None:
        x, scale, _, mean, var = inputs
        d_rm = grad_outputs[1] if self.training else None
        d_rv = grad_outputs[2] if self.training else None
        _native.batch_norm_backward(
            x, scale, mean, var, grad_outputs[0], d_rm, d_rv,
            grads[0], grads[1], grads[2], grads[3], grads[4],
            self.epsilon, self.momentum, self.training,
        )  # fmt: skip
