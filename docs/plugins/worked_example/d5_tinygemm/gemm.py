"""Level 0: the ``tinygemm`` operator backend and its one operator, ONNX ``Gemm``.

``Y = alpha * A' @ B' + beta * C``, where ``A'`` is ``A`` transposed when ``transA`` is 1
(likewise ``B'``), and the optional ``C`` broadcasts to ``Y``'s shape ``(M, N)``. ONNX's
definition is the contract: d5 validates this operator against its numpy reference with
the same attributes and inputs.

In a traced run (``--trace framework``), each call of ``forward`` and ``backward`` is a
region of :data:`d5_tinygemm.trace.REGIONS`; untraced, marking it costs one flag check.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np

from d5_tinygemm.trace import REGIONS
from d5core.api import Operator, OperatorBackend, TensorDescriptor, UsageError

__all__ = ["DEFAULTS", "TinyGemm", "TinyGemmBackend"]

#: Gemm's attributes with their ONNX defaults.
DEFAULTS: Mapping[str, float | int] = {"alpha": 1.0, "beta": 1.0, "transA": 0, "transB": 0}


def _sum_to(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` (of shape ``(M, N)``) down to the ``shape`` it was broadcast from."""
    while grad.ndim > len(shape):
        grad = grad.sum(axis=0)
    axes = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    return grad.sum(axis=axes, keepdims=True).reshape(shape) if axes else grad


def _sizes(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """The sizes of the product ``a @ b`` (``M x K`` by ``K x N``), for a traced call."""
    return {"m": a.shape[0], "k": a.shape[1], "n": b.shape[1], "dtype": a.dtype}


class TinyGemm(Operator):
    """ONNX Gemm with fixed attributes, on numpy arrays of one float dtype."""

    op_type = "Gemm"

    def __init__(self, attributes: Mapping[str, Any], dtype: str) -> None:
        super().__init__(attributes)
        settings = {**DEFAULTS, **attributes}
        self.alpha, self.beta = float(settings["alpha"]), float(settings["beta"])
        self.trans_a, self.trans_b = bool(settings["transA"]), bool(settings["transB"])
        self.dtype = np.dtype(dtype)

    def output_shape(self, shapes: Sequence[tuple[int, ...]]) -> tuple[int, int]:
        """The shape ``(M, N)`` of ``Y`` for inputs of ``shapes``.

        :raises UsageError: one line, when A and B are not matrices that multiply, or C
            does not broadcast to ``(M, N)``.
        """
        if len(shapes[0]) != 2 or len(shapes[1]) != 2:
            raise UsageError(
                f"Gemm multiplies matrices; A and B have shapes {shapes[0]} and {shapes[1]}"
            )
        m, k = shapes[0][::-1] if self.trans_a else shapes[0]
        k_b, n = shapes[1][::-1] if self.trans_b else shapes[1]
        if k != k_b:
            raise UsageError(
                f"Gemm cannot multiply A of shape {shapes[0]} by B of shape {shapes[1]} "
                f"(transA={int(self.trans_a)}, transB={int(self.trans_b)}): {k} != {k_b}"
            )
        if len(shapes) == 3:
            c = shapes[2]
            if len(c) > 2 or any(
                ci not in (1, yi) for ci, yi in zip(c[::-1], (n, m), strict=False)
            ):
                raise UsageError(f"Gemm's C has shape {c}, which does not broadcast to ({m}, {n})")
        return m, n

    def _operands(self, inputs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        a, b = inputs[0], inputs[1]
        return (a.T if self.trans_a else a), (b.T if self.trans_b else b)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        begin = time.perf_counter_ns() if REGIONS.on else 0  # 0: not traced
        a, b = self._operands(inputs)
        y = self.alpha * (a @ b)
        if len(inputs) == 3:
            y = y + self.beta * inputs[2]
        y = y.astype(inputs[0].dtype, copy=False)
        if begin:
            REGIONS.add("Gemm", begin, _sizes(a, b))
        return [y]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        begin = time.perf_counter_ns() if REGIONS.on else 0
        a, b = self._operands(inputs)
        dy = np.asarray(grad_outputs[0], dtype=inputs[0].dtype)
        da, db = self.alpha * (dy @ b.T), self.alpha * (a.T @ dy)
        grads: list[np.ndarray | None] = [
            da.T if self.trans_a else da,
            db.T if self.trans_b else db,
        ]
        if len(inputs) == 3:
            grads.append(_sum_to(self.beta * dy, inputs[2].shape))
        if begin:
            REGIONS.add("Gemm backward", begin, _sizes(a, b))
        return grads

    def prepare_forward(self, inputs: Sequence[np.ndarray]) -> Callable[[], Any]:
        """Convert the inputs to this "framework's" tensors (contiguous arrays of the
        operator's dtype) here, so that the callable d5 times holds the product alone."""
        arrays = [np.ascontiguousarray(x, dtype=self.dtype) for x in inputs]
        return lambda: self.forward(arrays)


class TinyGemmBackend(OperatorBackend):
    """The ``tinygemm`` backend: ``d5 validate op Gemm --backend tinygemm``."""

    name = "tinygemm"
    dtypes = ("float32", "float64")

    def supported(self) -> Collection[str]:
        return ["Gemm"]

    def create(
        self,
        op_type: str,
        attributes: Mapping[str, Any],
        inputs: Sequence[TensorDescriptor],
    ) -> TinyGemm:
        """Build Gemm for ``inputs`` (A, B and optionally C).

        :raises UsageError: one line, for another operator, an unknown attribute, a
            number of inputs other than 2 or 3, a dtype other than float32 and float64,
            or shapes that do not multiply (or a C that does not broadcast).
        """
        if op_type != "Gemm":
            raise UsageError(f"the tinygemm backend has only Gemm, not {op_type!r}")
        unknown = sorted(set(attributes) - set(DEFAULTS))
        if unknown:
            raise UsageError(
                f"Gemm has no attribute {unknown[0]!r}; it takes: {', '.join(DEFAULTS)}"
            )
        if len(inputs) not in (2, 3):
            raise UsageError(f"Gemm takes inputs A, B and optionally C, not {len(inputs)} inputs")
        dtype = inputs[0].dtype
        if dtype not in self.dtypes or any(x.dtype != dtype for x in inputs):
            raise UsageError(
                f"Gemm runs on float32 or float64 inputs of one dtype, not "
                f"{', '.join(x.dtype for x in inputs)}"
            )
        op = TinyGemm(attributes, dtype)
        op.output_shape([x.shape for x in inputs])
        return op
