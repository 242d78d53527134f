"""Relu and Softmax, element-wise and line-wise loops in C++."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from d5_kernels import _native
from d5_kernels.ops._base import NativeOperator, Signature
from d5core.onnx import SoftmaxRules, onnx_signature

__all__ = ["ElementwiseOperator", "ElementwisePlan", "Relu", "Softmax"]


@dataclass(frozen=True)
class ElementwisePlan:
    shape: tuple[int, ...]


class ElementwiseOperator(NativeOperator[ElementwisePlan]):
    """An operator of one input whose output has its shape and dtype, computed element by
    element; subclasses name the kernels in ``run_forward`` and ``run_backward``."""

    algorithm = "element-wise loop"

    def plan(self, sig: Signature) -> ElementwisePlan:
        shape = sig.shapes[0]
        assert shape is not None
        return ElementwisePlan(shape)

    def output_specs(self, plan: ElementwisePlan, dtype: str) -> list[tuple[tuple[int, ...], str]]:
        return [(plan.shape, dtype)]


class Relu(ElementwiseOperator):
    """``max(x, 0)``; the gradient at 0 is 0, as in the reference."""

    op_type = "Relu"
    slots, attribute_defaults = onnx_signature("Relu")

    def run_forward(
        self, plan: ElementwisePlan, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> None:
        _native.relu_forward(inputs[0], outputs[0])

    def run_backward(
        self,
        plan: ElementwisePlan,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grads: Sequence[Any],
    ) -> None:
        _native.relu_backward(inputs[0], grad_outputs[0], grads[0])


@dataclass(frozen=True)
class LinePlan:
    shape: tuple[int, ...]
    outer: int
    axis: int
    inner: int


class Softmax(SoftmaxRules, NativeOperator[LinePlan]):
    """ONNX ``Softmax`` (opset 13): normalized exponentials along the one axis ``axis``,
    computed on X viewed as (outer, axis, inner)."""

    algorithm = "line-wise loops"

    def plan(self, sig: Signature) -> LinePlan:
        shape = self._axis_shape(sig)
        axis = self.axis % len(shape)
        return LinePlan(shape, math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1 :]))

    def output_specs(self, plan: LinePlan, dtype: str) -> list[tuple[tuple[int, ...], str]]:
        return [(plan.shape, dtype)]

    def needs_outputs(self) -> bool:
        return True

    def run_forward(self, plan: LinePlan, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        if plan.axis == 0 or math.prod(plan.shape) == 0:
            return
        _native.softmax_forward(inputs[0], outputs[0], plan.outer, plan.axis, plan.inner)

    def run_backward(
        self,
        plan: LinePlan,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grads: Sequence[Any],
    ) -> None:
        if plan.axis == 0 or math.prod(plan.shape) == 0:
            return
        _native.softmax_backward(
            outputs[0], grad_outputs[0], grads[0], plan.outer, plan.axis, plan.inner
        )
