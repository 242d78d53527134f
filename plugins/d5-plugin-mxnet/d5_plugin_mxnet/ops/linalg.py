"""Matrix products: ``Gemm`` and ``MatMul``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from d5_plugin_mxnet.ops._base import MXNetOperator, Plan, Signature, mx
from d5core.onnx import GemmRules, MatMulRules

__all__ = ["Gemm", "MatMul"]


class Gemm(GemmRules, MXNetOperator):
    """ONNX ``Gemm``: ``Y = alpha * A' B' + beta * C`` with ``C`` broadcast to (M, N).

    ``mx.nd.dot`` with its ``transpose_a``/``transpose_b`` flags; scaled when alpha != 1;
    then ``C`` added by ``mx.nd.broadcast_add`` (scaled when beta != 1).
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        alpha, beta, ta, tb = self.alpha, self.beta, self.trans_a, self.trans_b
        has_c = len(sig.arrays) > 2 and sig.arrays[2] is not None
        dot, add = mx.nd.dot, mx.nd.broadcast_add
        if not has_c and alpha == 1.0:

            def plain(a: Any, b: Any, c: None = None) -> tuple[Any]:
                return (dot(a, b, transpose_a=ta, transpose_b=tb),)

            return Plan(plain)
        if not has_c:

            def scaled(a: Any, b: Any, c: None = None) -> tuple[Any]:
                return (dot(a, b, transpose_a=ta, transpose_b=tb) * alpha,)

            return Plan(scaled)

        def gemm(a: Any, b: Any, c: Any) -> tuple[Any]:
            y = dot(a, b, transpose_a=ta, transpose_b=tb)
            if alpha != 1.0:
                y = y * alpha
            return (add(y, c if beta == 1.0 else c * beta),)

        return Plan(gemm)


class MatMul(MatMulRules, MXNetOperator):
    """ONNX ``MatMul`` (numpy's ``matmul`` semantics).

    Two matrices are one ``mx.nd.dot``. Otherwise vectors become a row (A) or a column
    (B), both operands are broadcast to the common batch shape (``mx.nd.broadcast_to``,
    whose gradient sums back), folded into one batch axis for ``mx.nd.batch_dot``, and
    the result is reshaped to numpy's; all shapes are fixed when the kernel is built.
    """

    def _shapes(self, sig: Signature) -> tuple[tuple[int, ...], tuple[int, ...]]:
        a = self.require_rank(sig, 0, at_least=1)
        b = self.require_rank(sig, 1, at_least=1)
        k_b = b[0] if len(b) == 1 else b[-2]
        if a[-1] != k_b:
            raise self.fail(f"inner dimensions differ: A is {a} and B is {b}")
        return a, b

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        a, b = self._shapes(sig)
        out = np.matmul(np.empty(a, np.int8), np.empty(b, np.int8)).shape
        shapes: dict[int, tuple[int, ...]] = {} if out else {0: ()}
        if len(a) == 2 and len(b) == 2:
            dot = mx.nd.dot
            return Plan(lambda x, y: (dot(x, y),), shapes)
        a2 = (1, a[0]) if len(a) == 1 else a
        b2 = (b[0], 1) if len(b) == 1 else b
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
        count = math.prod(batch)
        a_full, b_full = (*batch, *a2[-2:]), (*batch, *b2[-2:])
        a_lifted = (1,) * (len(a_full) - len(a2)) + a2
        b_lifted = (1,) * (len(b_full) - len(b2)) + b2
        a3, b3 = (count, *a2[-2:]), (count, *b2[-2:])
        reshape, broadcast_to, batch_dot = mx.nd.reshape, mx.nd.broadcast_to, mx.nd.batch_dot
        final = out or (1,)

        def operand(x: Any, lifted: tuple[int, ...], full: tuple[int, ...], flat: Any) -> Any:
            x = reshape(x, shape=lifted)
            if lifted != full:
                x = broadcast_to(x, shape=full)
            return reshape(x, shape=flat)

        def kernel(x: Any, y: Any) -> tuple[Any]:
            xs = operand(x, a_lifted, a_full, a3)
            ys = operand(y, b_lifted, b_full, b3)
            return (reshape(batch_dot(xs, ys), shape=final),)

        return Plan(kernel, shapes)
