"""Element-wise arithmetic with numpy (multidirectional) broadcasting: Add, Sub, Mul, Div
and the variadic Sum. Backward sums each gradient over the axes its input was
broadcast along.

Add, Sub, Mul and Div also take integer operands (of one dtype), as the shape
arithmetic of exported graphs needs; integer Div truncates toward zero, as ONNX's does,
and integer operands get no gradient."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from d5_plugin_numpy.ops.base import NUMERIC_DTYPES, ReferenceOperator, is_float, unbroadcast
from d5core.api import UsageError

__all__ = ["Add", "Div", "Mul", "Sub", "Sum"]


class _Binary(ReferenceOperator):
    input_names = ("A", "B")
    min_inputs = 2
    data_dtypes = NUMERIC_DTYPES

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_broadcastable(shapes)

    def partials(
        self, a: np.ndarray, b: np.ndarray, dy: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """The gradients with respect to ``a`` and ``b``, before unbroadcasting."""
        raise NotImplementedError

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        a, b = inputs[0], inputs[1]
        if not is_float(a):
            return [None, None]
        da, db = self.partials(a, b, np.asarray(grad_outputs[0], dtype=a.dtype))
        return [unbroadcast(da, a.shape).astype(a.dtype), unbroadcast(db, b.shape).astype(b.dtype)]


class Add(_Binary):
    """``A + B``."""

    op_type = "Add"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.add(inputs[0], inputs[1])]

    def partials(
        self, a: np.ndarray, b: np.ndarray, dy: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return dy, dy


class Sub(_Binary):
    """``A - B``."""

    op_type = "Sub"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.subtract(inputs[0], inputs[1])]

    def partials(
        self, a: np.ndarray, b: np.ndarray, dy: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return dy, -dy


class Mul(_Binary):
    """``A * B``."""

    op_type = "Mul"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.multiply(inputs[0], inputs[1])]

    def partials(
        self, a: np.ndarray, b: np.ndarray, dy: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return dy * b, dy * a


class Div(_Binary):
    """``A / B`` (floating point; division by zero gives inf or nan as in numpy)."""

    op_type = "Div"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        a, b = inputs[0], inputs[1]
        if not is_float(a):
            if np.any(b == 0):
                raise UsageError("Div by an integer zero; integer division needs nonzero B")
            quotient = np.abs(a) // np.abs(b)
            return [(np.sign(a) * np.sign(b) * quotient).astype(a.dtype)]
        return [np.divide(a, b)]

    def partials(
        self, a: np.ndarray, b: np.ndarray, dy: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        return dy / b, -dy * a / (b * b)


class Sum(ReferenceOperator):
    """ONNX Sum: the element-wise sum of one or more inputs, broadcast together."""

    op_type = "Sum"
    input_names = ("data_0",)
    variadic = True

    def check_shapes(self, shapes: Sequence[tuple[int, ...]]) -> None:
        self.require_broadcastable(shapes)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        total = inputs[0]
        for x in inputs[1:]:
            total = total + x
        return [np.array(total, dtype=inputs[0].dtype, copy=True)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        dy = np.asarray(grad_outputs[0])
        return [unbroadcast(dy, x.shape).astype(x.dtype) for x in inputs]
