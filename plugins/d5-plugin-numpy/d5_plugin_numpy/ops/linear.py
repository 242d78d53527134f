"""Matrix products: Gemm and MatMul."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np

from d5_plugin_numpy.ops.base import ReferenceOperator, unbroadcast
from d5core.api import UsageError

__all__ = ["Gemm", "MatMul"]


class Gemm(ReferenceOperator):
    """ONNX Gemm: ``Y = alpha * A' B' + beta * C``, where ``A'`` is ``A`` transposed if
    ``transA`` (likewise ``B'``) and the optional ``C`` broadcasts to ``(M, N)``."""

    op_type = "Gemm"
    input_names = ("A", "B", "C")
    min_inputs = 2
    defaults = MappingProxyType({"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0})

    def configure(self, attributes: Mapping[str, Any]) -> None:
        self.alpha = float(attributes["alpha"])
        self.beta = float(attributes["beta"])
        self.trans_a = bool(int(attributes["transA"]))
        self.trans_b = bool(int(attributes["transB"]))

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_rank(shapes, 0, 2)
        self.require_rank(shapes, 1, 2)
        m, k = shapes[0][::-1] if self.trans_a else shapes[0]
        kb, n = shapes[1][::-1] if self.trans_b else shapes[1]
        if k != kb:
            raise UsageError(
                f"{self.input_name(1)} has shape {shapes[1]}, whose "
                f"{'second' if self.trans_b else 'first'} axis must be {k} to match A of "
                f"shape {shapes[0]} (transA={int(self.trans_a)}, transB={int(self.trans_b)})"
            )
        if len(shapes) > 2:
            c = shapes[2]
            fits = all(ci in (1, ti) for ci, ti in zip(c[::-1], (n, m), strict=False))
            if len(c) > 2 or not fits:
                raise UsageError(
                    f"{self.input_name(2)} has shape {c}, which does not broadcast to ({m}, {n})"
                )

    def _operands(self, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        a, b = inputs[0], inputs[1]
        return (a.T if self.trans_a else a), (b.T if self.trans_b else b)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        a, b = self._operands(inputs)
        y = self.alpha * (a @ b)
        if len(inputs) > 2:
            y = y + self.beta * inputs[2]
        return [y.astype(inputs[0].dtype, copy=False)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        a, b = self._operands(inputs)
        dy = np.asarray(grad_outputs[0], dtype=inputs[0].dtype)
        da = self.alpha * (dy @ b.T)
        db = self.alpha * (a.T @ dy)
        grads = [da.T if self.trans_a else da, db.T if self.trans_b else db]
        if len(inputs) > 2:
            grads.append(unbroadcast(self.beta * dy, inputs[2].shape))
        return [np.array(g, dtype=inputs[0].dtype, order="C") for g in grads]


class MatMul(ReferenceOperator):
    """ONNX MatMul: ``numpy.matmul``, with its batch broadcasting and 1-D promotion."""

    op_type = "MatMul"
    input_names = ("A", "B")
    min_inputs = 2

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        a, b = shapes[0], shapes[1]
        for i, s in enumerate((a, b)):
            if not s:
                raise UsageError(f"{self.input_name(i)} must have rank 1 or more, not 0")
        k_a = a[-1]
        k_b = b[0] if len(b) == 1 else b[-2]
        if k_a != k_b:
            raise UsageError(
                f"{self.input_name(1)} has shape {b}; its "
                f"{'only' if len(b) == 1 else 'second-to-last'} axis must be {k_a} to "
                f"match A of shape {a}"
            )
        self.require_broadcastable([a[:-2], b[:-2]])

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(np.matmul(inputs[0], inputs[1]))]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        a, b = inputs[0], inputs[1]
        dy = np.asarray(grad_outputs[0], dtype=a.dtype)
        # Promote 1-D operands to matrices as matmul does, and the gradient with them.
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        if b.ndim == 1:
            dy = dy[..., None]
        if a.ndim == 1:
            dy = dy[..., None, :]
        da = unbroadcast(np.matmul(dy, b2.swapaxes(-1, -2)), a2.shape).reshape(a.shape)
        db = unbroadcast(np.matmul(a2.swapaxes(-1, -2), dy), b2.shape).reshape(b.shape)
        return [da.astype(a.dtype), db.astype(b.dtype)]
