"""Matrix products: ``Gemm`` and ``MatMul``."""

from __future__ import annotations

import torch

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5core.onnx import GemmRules, MatMulRules

__all__ = ["Gemm", "MatMul"]


class Gemm(GemmRules, TorchOperator):
    """ONNX ``Gemm``: ``Y = alpha * A' B' + beta * C`` with ``C`` broadcast to (M, N).

    With ``C`` it is one ``torch.addmm``; without, ``torch.mm`` (scaled when alpha != 1).
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        alpha, beta, ta, tb = self.alpha, self.beta, self.trans_a, self.trans_b
        has_c = len(sig.arrays) > 2 and sig.arrays[2] is not None

        def operands(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return (a.t() if ta else a), (b.t() if tb else b)

        if has_c and (alpha == 0.0 or beta == 0.0):
            # addmm skips a product or a C scaled by 0, dropping its NaN and infinity;
            # ONNX's (and numpy's) alpha * A B + beta * C keeps them (0 * NaN is NaN).

            def spelled_out(
                a: torch.Tensor, b: torch.Tensor, c: torch.Tensor
            ) -> tuple[torch.Tensor]:
                return (torch.mm(*operands(a, b)) * alpha + c * beta,)

            return spelled_out
        if has_c:

            def addmm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor]:
                a2, b2 = operands(a, b)
                return (torch.addmm(c, a2, b2, beta=beta, alpha=alpha),)

            return addmm
        if alpha == 1.0:

            def mm(a: torch.Tensor, b: torch.Tensor, c: None = None) -> tuple[torch.Tensor]:
                return (torch.mm(*operands(a, b)),)

            return mm

        def scaled(a: torch.Tensor, b: torch.Tensor, c: None = None) -> tuple[torch.Tensor]:
            return (torch.mm(*operands(a, b)) * alpha,)

        return scaled


class MatMul(MatMulRules, TorchOperator):
    """ONNX ``MatMul`` (numpy's ``matmul`` semantics): one ``torch.matmul``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        matmul = torch.matmul

        def kernel(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:
            return (matmul(a, b),)

        return kernel
