"""The transformer operators: LayerNormalization, Erf, Gelu and Gather, each one call
into the compiled module (``src/transformer.cpp``) forward and backward."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from d5_kernels import _native
from d5_kernels.ops._base import NativeOperator, Signature
from d5_kernels.ops.activation import ElementwiseOperator, ElementwisePlan
from d5core.onnx import onnx_signature

__all__ = ["Erf", "Gather", "Gelu", "LayerNormalization"]


@dataclass(frozen=True)
class LayerNormPlan:
    shape: tuple[int, ...]
    #: The normalized axes' sizes, ``shape[axis:]``.
    normalized: tuple[int, ...]
    #: The shape of Mean and InvStdDev: ``shape`` with the normalized axes set to 1.
    stats: tuple[int, ...]
    rows: int
    width: int


class LayerNormalization(NativeOperator[LayerNormPlan]):
    """ONNX ``LayerNormalization`` (opset 17) on X viewed as (rows, width), ``width`` the
    product of the axes from ``axis`` on: one OpenMP iteration per row computes the
    row's mean and biased variance (accumulated in double, the row read twice while it
    is in cache) and writes the row of ``Y``. ``Scale`` and ``B`` broadcast to the
    normalized axes; one of fewer elements is expanded with numpy before the call.

    The backward reads ``Mean`` and ``InvStdDev`` from the forward and gives the exact
    vector-Jacobian product for X (with the cotangents of ``Mean`` and ``InvStdDev``),
    ``Scale`` and ``B``; the latter two are summed over the rows in per-thread partial
    sums added in a fixed order. ``stash_type`` must be 1, its default, as in the
    reference."""

    op_type = "LayerNormalization"
    slots, attribute_defaults = onnx_signature("LayerNormalization")
    algorithm = "row-wise loops, statistics in double"

    def configure(self) -> None:
        self.axis = int(self.attr("axis"))
        self.epsilon = float(self.attr("epsilon"))
        stash_type = int(self.attr("stash_type"))
        if stash_type != 1:
            raise self.fail(
                f"stash_type={stash_type} is not supported; give stash_type=1 (float), its default"
            )

    def plan(self, sig: Signature) -> LayerNormPlan:
        shape = self.require_rank(sig, 0, at_least=1)
        rank = len(shape)
        if not -rank <= self.axis < rank:
            raise self.fail(
                f"axis {self.axis} is out of range for X of rank {rank}; give one in "
                f"[{-rank}, {rank - 1}]"
            )
        axis = self.axis % rank
        normalized = shape[axis:]
        for name, given in zip(("Scale", "B"), sig.shapes[1:], strict=False):
            if given is None:
                continue
            fits = len(given) <= len(normalized) and all(
                a in (1, b) for a, b in zip(given[::-1], normalized[::-1], strict=False)
            )
            if not fits:
                raise self.fail(
                    f"{name} has shape {given}, which does not broadcast to {normalized}, "
                    f"the normalized axes of X of shape {shape}"
                )
        stats = shape[:axis] + (1,) * len(normalized)
        return LayerNormPlan(
            shape, normalized, stats, math.prod(shape[:axis]), math.prod(normalized)
        )

    def output_specs(self, plan: LayerNormPlan, dtype: str) -> list[tuple[tuple[int, ...], str]]:
        return [(plan.shape, dtype), (plan.stats, dtype), (plan.stats, dtype)]

    def needs_outputs(self) -> bool:
        return True

    @staticmethod
    def _expanded(array: Any, plan: LayerNormPlan) -> Any:
        """``array`` (Scale or B) holding one value per normalized element."""
        if array is None or array.size == plan.width:
            return array
        return np.ascontiguousarray(np.broadcast_to(array, plan.normalized))

    def run_forward(
        self, plan: LayerNormPlan, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> None:
        if plan.rows * plan.width == 0:
            return
        scale = self._expanded(inputs[1], plan)
        bias = self._expanded(inputs[2] if len(inputs) > 2 else None, plan)
        _native.layer_norm_forward(
            inputs[0], scale, bias, outputs[0], outputs[1], outputs[2],
            plan.rows, plan.width, self.epsilon,
        )  # fmt: skip

    def run_backward(
        self,
        plan: LayerNormPlan,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grads: Sequence[Any],
    ) -> None:
        bias = inputs[2] if len(inputs) > 2 else None
        dbias_into = grads[2] if bias is not None else None
        if plan.rows * plan.width == 0:
            for grad in grads:
                if grad is not None:
                    grad[...] = 0
            return
        scale = self._expanded(inputs[1], plan)
        if len(outputs) >= 3:
            mean, inv_std = outputs[1], outputs[2]
        else:  # the caller kept only Y: recompute the statistics
            stats = [np.empty(plan.stats, scale.dtype) for _ in range(2)]
            bias_full = self._expanded(bias, plan)
            y = np.empty(plan.shape, scale.dtype)
            _native.layer_norm_forward(
                inputs[0], scale, bias_full, y, stats[0], stats[1],
                plan.rows, plan.width, self.epsilon,
            )  # fmt: skip
            mean, inv_std = stats
        dscale = grads[1] if inputs[1].size == plan.width else np.empty(plan.width, scale.dtype)
        dbias = dbias_into
        if bias is not None and bias.size != plan.width:
            dbias = np.empty(plan.width, scale.dtype)
        _native.layer_norm_backward(
            inputs[0], scale, mean, inv_std, grad_outputs[0], grad_outputs[1], grad_outputs[2],
            grads[0], dscale, dbias, plan.rows, plan.width,
        )  # fmt: skip
        if dscale is not grads[1]:
            grads[1][...] = _summed_to(dscale.reshape(plan.normalized), grads[1].shape)
        if dbias is not None and dbias_into is not None and dbias is not dbias_into:
            dbias_into[...] = _summed_to(dbias.reshape(plan.normalized), dbias_into.shape)


def _summed_to(full: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``full`` summed over the axes a broadcast operand of ``shape`` stretched."""
    lead = full.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, n in enumerate(shape) if n == 1 and full.shape[lead + i] != 1
    )
    summed: np.ndarray = full.sum(axis=axes, keepdims=True)
    return summed.reshape(shape)


class Erf(ElementwiseOperator):
    """The error function element-wise; the gradient is ``2 / sqrt(pi) exp(-x**2)``."""

    op_type = "Erf"
    slots, attribute_defaults = onnx_signature("Erf")

    def run_forward(
        self, plan: ElementwisePlan, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> None:
        _native.erf_forward(inputs[0], outputs[0])

    def run_backward(
        self,
        plan: ElementwisePlan,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grads: Sequence[Any],
    ) -> None:
        _native.erf_backward(inputs[0], grad_outputs[0], grads[0])


class Gelu(ElementwiseOperator):
    """ONNX ``Gelu`` (opset 20) element-wise: ``0.5 x (1 + erf(x / sqrt 2))`` or, with
    ``approximate="tanh"``, ``0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x**3)))``; the
    backward differentiates the chosen formula."""

    op_type = "Gelu"
    slots, attribute_defaults = onnx_signature("Gelu")

    def configure(self) -> None:
        approximate = str(self.attr("approximate"))
        if approximate not in ("none", "tanh"):
            raise self.fail(f"approximate={approximate!r} is not one of 'none', 'tanh'")
        self.tanh_form = approximate == "tanh"

    def run_forward(
        self, plan: ElementwisePlan, inputs: Sequence[Any], outputs: Sequence[Any]
    ) -> None:
        _native.gelu_forward(inputs[0], outputs[0], self.tanh_form)

    def run_backward(
        self,
        plan: ElementwisePlan,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grads: Sequence[Any],
    ) -> None:
        _native.gelu_backward(inputs[0], grad_outputs[0], grads[0], self.tanh_form)


@dataclass(frozen=True)
class GatherPlan:
    output: tuple[int, ...]
    outer: int
    axis: int
    inner: int


class Gather(NativeOperator[GatherPlan]):
    """ONNX ``Gather``: the slices of ``data`` along ``axis`` that ``indices`` (any
    integer type and rank, negative ones counting from the end) pick, on data viewed as
    (outer, axis, inner); axis 0 is an embedding lookup, one row copied per index. The
    backward zeroes the gradient of ``data`` and adds each row of the output gradient
    where its index points (repeated indices add up), in parallel over tiles of
    columns, so no two threads write the same element. An index out of range is a
    one-line error."""

    op_type = "Gather"
    slots, attribute_defaults = onnx_signature("Gather")
    algorithm = "row copies; backward scatter-add by column tiles"

    def configure(self) -> None:
        self.axis = int(self.attr("axis"))

    def plan(self, sig: Signature) -> GatherPlan:
        data = self.require_rank(sig, 0, at_least=1)
        indices = sig.shapes[1]
        assert indices is not None
        rank = len(data)
        if not -rank <= self.axis < rank:
            raise self.fail(
                f"axis {self.axis} is out of range for data of rank {rank}; give one in "
                f"[{-rank}, {rank - 1}]"
            )
        axis = self.axis % rank
        output = data[:axis] + indices + data[axis + 1 :]
        return GatherPlan(output, math.prod(data[:axis]), data[axis], math.prod(data[axis + 1 :]))

    def output_specs(self, plan: GatherPlan, dtype: str) -> list[tuple[tuple[int, ...], str]]:
        return [(plan.output, dtype)]

    @staticmethod
    def _indices(indices: Any) -> np.ndarray:
        return np.ascontiguousarray(indices, dtype=np.int64)

    def run_forward(self, plan: GatherPlan, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        _native.gather_forward(
            inputs[0], self._indices(inputs[1]), outputs[0], plan.outer, plan.axis, plan.inner
        )

    def run_backward(
        self,
        plan: GatherPlan,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grads: Sequence[Any],
    ) -> None:
        _native.gather_backward(
            self._indices(inputs[1]), grad_outputs[0], grads[0], plan.outer, plan.axis, plan.inner
        )
