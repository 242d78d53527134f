"""Gemm and MatMul on the packed GEMM.

Transposes are strided views the packing routines read directly (nothing is copied);
Gemm's C is broadcast by a zero-stride view the kernel copies into Y before it
accumulates. MatMul's batch runs one GEMM per matrix (broadcast operands by zero batch
strides); a batch of A times a single B folds into one tall GEMM. Gradients of
broadcast operands (Gemm's C, MatMul's broadcast batch axes) are summed by numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from d5_kernels import _native
from d5_kernels.ops._base import NativeOperator, Signature
from d5core.onnx import GemmRules, gemm_output_shape, onnx_signature

__all__ = ["Gemm", "MatMul"]


def _sum_to(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``grad`` summed over the axes broadcasting added or stretched to reach it."""
    lead = grad.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        lead + i for i, d in enumerate(shape) if d == 1 and grad.shape[lead + i] != 1
    )
    return grad.sum(axis=axes, keepdims=True).reshape(shape) if axes else grad.reshape(shape)


@dataclass(frozen=True)
class GemmPlan:
    m: int
    n: int
    c_shape: tuple[int, ...] | None


class Gemm(GemmRules, NativeOperator[GemmPlan]):
    """ONNX ``Gemm``: ``Y = alpha * A' B' + beta * C`` with the packed GEMM."""

    algorithm = "packed GEMM"

    def plan(self, sig: Signature) -> GemmPlan:
        a = self.require_rank(sig, 0, (2,))
        b = self.require_rank(sig, 1, (2,))
        c = sig.shapes[2] if len(sig.shapes) > 2 else None
        m, n = gemm_output_shape(a, b, c, trans_a=self.trans_a, trans_b=self.trans_b)
        return GemmPlan(m, n, c)

    def output_specs(self, plan: GemmPlan, dtype: str) -> list[tuple[tuple[int, ...], str]]:
        return [((plan.m, plan.n), dtype)]

    def _operands(self, inputs: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        a, b = inputs[0], inputs[1]
        return (a.T if self.trans_a else a), (b.T if self.trans_b else b)

    def run_forward(self, plan: GemmPlan, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        a, b = self._operands(inputs)
        c = inputs[2] if len(inputs) > 2 else None
        if c is not None:
            c = np.broadcast_to(c, (plan.m, plan.n))
        _native.gemm(a, b, outputs[0], self.alpha, self.beta, c)

    def run_backward(
        self,
        plan: GemmPlan,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grads: Sequence[Any],
    ) -> None:
        a, b = self._operands(inputs)
        dy = grad_outputs[0]
        # dA' = alpha dY B'^T and dB' = alpha A'^T dY, written transposed when A or B is.
        if self.trans_a:
            _native.gemm(b, dy.T, grads[0], self.alpha, 0.0)
        else:
            _native.gemm(dy, b.T, grads[0], self.alpha, 0.0)
        if self.trans_b:
            _native.gemm(dy.T, a, grads[1], self.alpha, 0.0)
        else:
            _native.gemm(a.T, dy, grads[1], self.alpha, 0.0)
        if len(inputs) > 2 and plan.c_shape is not None:
            grads[2][...] = _sum_to(dy * self.beta, plan.c_shape)


@dataclass(frozen=True)
class MatMulPlan:
    a: tuple[int, ...]
    b: tuple[int, ...]
    batch: tuple[int, ...]
    m: int
    k: int
    n: int
    out: tuple[int, ...]


class MatMul(NativeOperator[MatMulPlan]):
    """ONNX ``MatMul`` (numpy's ``matmul``: batch broadcasting, 1-D operands promoted)."""

    op_type = "MatMul"
    slots, attribute_defaults = onnx_signature("MatMul")
    algorithm = "packed GEMM per batch matrix"

    def plan(self, sig: Signature) -> MatMulPlan:
        a = self.require_rank(sig, 0, at_least=1)
        b = self.require_rank(sig, 1, at_least=1)
        a2 = (1, *a) if len(a) == 1 else a
        b2 = (*b, 1) if len(b) == 1 else b
        if a2[-1] != b2[-2]:
            raise self.fail(
                f"inner dimensions differ: A {a} has {a2[-1]} columns, B {b} has {b2[-2]} rows"
            )
        try:
            batch = tuple(int(d) for d in np.broadcast_shapes(a2[:-2], b2[:-2]))
        except ValueError:
            raise self.fail(
                f"the batch axes of A {a} and B {b} do not broadcast together"
            ) from None
        out = (*batch, *(() if len(a) == 1 else (a2[-2],)), *(() if len(b) == 1 else (b2[-1],)))
        return MatMulPlan(a2, b2, batch, a2[-2], a2[-1], b2[-1], out)

    def output_specs(self, plan: MatMulPlan, dtype: str) -> list[tuple[tuple[int, ...], str]]:
        return [(plan.out, dtype)]

    @staticmethod
    def _product(plan: MatMulPlan, a: np.ndarray, b: np.ndarray, y: np.ndarray) -> None:
        """``y`` (batch..., rows, cols) = ``a`` @ ``b``, operands broadcast over the batch."""
        rows, cols = y.shape[-2], y.shape[-1]
        if not plan.batch:
            _native.gemm(a, b, y, 1.0, 0.0)
            return
        if b.ndim == 2 and a.ndim == y.ndim and a.flags.c_contiguous:
            # A stack of matrices times one matrix: one tall GEMM.
            _native.gemm(a.reshape(-1, a.shape[-1]), b, y.reshape(-1, cols), 1.0, 0.0)
            return
        size = int(np.prod(plan.batch, dtype=np.int64))
        a3 = np.broadcast_to(a, (*plan.batch, *a.shape[-2:])).reshape(size, rows, a.shape[-1])
        b3 = np.broadcast_to(b, (*plan.batch, *b.shape[-2:])).reshape(size, b.shape[-2], cols)
        _native.gemm_batched(a3, b3, y.reshape(size, rows, cols), 1.0)

    def run_forward(self, plan: MatMulPlan, inputs: Sequence[Any], outputs: Sequence[Any]) -> None:
        a, b = inputs[0].reshape(plan.a), inputs[1].reshape(plan.b)
        self._product(plan, a, b, outputs[0].reshape((*plan.batch, plan.m, plan.n)))

    def run_backward(
        self,
        plan: MatMulPlan,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
        grads: Sequence[Any],
    ) -> None:
        a, b = inputs[0].reshape(plan.a), inputs[1].reshape(plan.b)
        dy = grad_outputs[0].reshape((*plan.batch, plan.m, plan.n))
        full = (*plan.batch, plan.m, plan.k)
        da = grads[0].reshape(plan.a) if a.shape == full else np.empty(full, dy.dtype)
        self._product(plan, dy, np.swapaxes(b, -1, -2), da)
        if da.shape != plan.a:
            grads[0][...] = _sum_to(da, plan.a).reshape(grads[0].shape)
        if b.ndim == 2 and plan.batch and a.ndim == dy.ndim:
            # dB = sum over the batch of A^T dY: one GEMM over the stacked rows.
            flat_a = a.reshape(-1, plan.k)
            flat_dy = dy.reshape(-1, plan.n)
            _native.gemm(flat_a.T, flat_dy, grads[1].reshape(plan.b), 1.0, 0.0)
            return
        full = (*plan.batch, plan.k, plan.n)
        db = grads[1].reshape(plan.b) if b.shape == full else np.empty(full, dy.dtype)
        self._product(plan, np.swapaxes(a, -1, -2), dy, db)
        if db.shape != plan.b:
            grads[1][...] = _sum_to(db, plan.b).reshape(grads[1].shape)
