"""Matrix products: ``Gemm`` and ``MatMul``."""

from __future__ import annotations

import numpy as np
import torch

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5core.api import gemm_output_shape, onnx_signature

__all__ = ["Gemm", "MatMul"]


class Gemm(TorchOperator):
    """ONNX ``Gemm``: ``Y = alpha * A' B' + beta * C`` with ``C`` broadcast to (M, N).

    With ``C`` it is one ``torch.addmm``; without, ``torch.mm`` (scaled when alpha != 1).
    """

    op_type = "Gemm"
    slots, attribute_defaults = onnx_signature("Gemm")

    def configure(self) -> None:
        self.alpha = float(self.attr("alpha"))
        self.beta = float(self.attr("beta"))
        self.trans_a = bool(int(self.attr("transA")))
        self.trans_b = bool(int(self.attr("transB")))

    def check(self, sig: Signature) -> None:
        a = self.require_rank(sig, 0, (2,), what="(M, K), or (K, M) with transA")
        b = self.require_rank(sig, 1, (2,), what="(K, N), or (N, K) with transB")
        c = sig.shapes[2] if len(sig.shapes) > 2 else None
        gemm_output_shape(a, b, c, trans_a=self.trans_a, trans_b=self.trans_b)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        alpha, beta, ta, tb = self.alpha, self.beta, self.trans_a, self.trans_b
        has_c = len(sig.arrays) > 2 and sig.arrays[2] is not None

        def operands(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            return (a.t() if ta else a), (b.t() if tb else b)

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


class MatMul(TorchOperator):
    """ONNX ``MatMul`` (numpy's ``matmul`` semantics): one ``torch.matmul``."""

    op_type = "MatMul"
    slots, attribute_defaults = onnx_signature("MatMul")

    def check(self, sig: Signature) -> None:
        a = self.require_rank(sig, 0, at_least=1)
        b = self.require_rank(sig, 1, at_least=1)
        k_b = b[0] if len(b) == 1 else b[-2]
        if a[-1] != k_b:
            raise self.fail(f"inner dimensions differ: A is {a} and B is {b}")
        try:
            np.broadcast_shapes(a[:-2], b[:-2])
        except ValueError:
            raise self.fail(f"batch dimensions of A {a} and B {b} do not broadcast") from None

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        matmul = torch.matmul

        def kernel(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor]:
            return (matmul(a, b),)

        return kernel
