"""Matrix products: ``Gemm`` and ``MatMul``."""

from __future__ import annotations

from typing import Any

import numpy as np

from d5_plugin_tensorflow.ops._base import Layout, Plan, Signature, TFOperator, tf
from d5core.onnx import GemmRules, MatMulRules

__all__ = ["Gemm", "MatMul"]


class Gemm(GemmRules, TFOperator):
    """ONNX ``Gemm``: ``Y = alpha * A' B' + beta * C`` with ``C`` broadcast to (M, N).

    ``tf.linalg.matmul`` transposes its operands itself (``transpose_a``,
    ``transpose_b``); the scaling and the addition are skipped where they are identities.
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        alpha, beta, ta, tb = self.alpha, self.beta, self.trans_a, self.trans_b
        matmul = tf.linalg.matmul

        def kernel(a: Any, b: Any, c: Any = None) -> tuple[Any]:
            y = matmul(a, b, transpose_a=ta, transpose_b=tb)
            if alpha != 1.0:
                y = y * alpha
            if c is not None:
                y = y + (c if beta == 1.0 else c * beta)
            return (y,)

        return Plan(kernel)


class MatMul(MatMulRules, TFOperator):
    """ONNX ``MatMul`` (numpy's ``matmul`` semantics): one ``tf.linalg.matmul``, which
    broadcasts batch axes. A 1-D operand is given as a matrix of one row (``A``) or one
    column (``B``) and the axis removed from the result, outside the timed call, as
    numpy does."""

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        a, b = sig.shapes[0], sig.shapes[1]
        assert a is not None and b is not None
        matmul = tf.linalg.matmul
        a2 = (1, *a) if len(a) == 1 else a
        b2 = (*b, 1) if len(b) == 1 else b
        batch = np.broadcast_shapes(a2[:-2], b2[:-2])
        full = (*batch, a2[-2], b2[-1])
        rows = (a2[-2],) if len(a) > 1 else ()
        cols = (b2[-1],) if len(b) > 1 else ()
        out = (*batch, *rows, *cols)
        layouts = (
            Layout.reshaped(a, a2) if len(a) == 1 else None,
            Layout.reshaped(b, b2) if len(b) == 1 else None,
        )
        output = Layout.reshaped(out, full) if out != full else None
        return Plan(lambda x, y: (matmul(x, y),), layouts, (output,))
