"""Matrix products: ``Gemm`` and ``MatMul``."""

from __future__ import annotations

from typing import Any

from d5_plugin_jax.ops._base import JaxOperator, Kernel, Signature, jnp
from d5core.onnx import GemmRules, MatMulRules

__all__ = ["Gemm", "MatMul"]


class Gemm(GemmRules, JaxOperator):
    """ONNX ``Gemm``: ``Y = alpha * A' B' + beta * C`` with ``C`` broadcast to (M, N);
    the scalings are left out where they are 1 (XLA fuses the rest into one dot)."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        alpha, beta, ta, tb = self.alpha, self.beta, self.trans_a, self.trans_b
        matmul = jnp.matmul

        def product(a: Any, b: Any) -> Any:
            y = matmul(a.T if ta else a, b.T if tb else b)
            return y if alpha == 1.0 else y * alpha

        def kernel(a: Any, b: Any, c: Any = None) -> tuple[Any]:
            y = product(a, b)
            if c is not None:
                y = y + (c if beta == 1.0 else c * beta)
            return (y,)

        return kernel


class MatMul(MatMulRules, JaxOperator):
    """ONNX ``MatMul`` (numpy's ``matmul`` semantics): ``jnp.matmul``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        matmul = jnp.matmul
        return lambda a, b: (matmul(a, b),)
