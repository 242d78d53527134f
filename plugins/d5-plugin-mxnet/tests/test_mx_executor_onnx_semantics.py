"""The MXNet executor follows ONNX where MXNet's own operators differ: integer Div
truncates in the inputs' type, integers wrap, Add/Sub/Mul/Div of opsets before 7 honour
``broadcast``/``axis``, and Dropout in training mode applies (and outputs) the
reference's mask. The shared cases are d5's executor kit,
:mod:`d5core.testing.onnx_semantics`.

MXNet 1.9.1 has no int16, uint16, uint32 or uint64 tensors: for those types the kit's
cases are replaced by the check that the executor refuses them in one line, naming the
type and the types it has."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from d5_plugin_mxnet.executor import MXNetExecutor

from d5core.api import UsageError
from d5core.testing.onnx_semantics import (
    INTEGER_TYPES,
    OnnxSemanticsTests,
    binary_model,
    truncated_division,
)

#: The integer types MXNet 1.9.1 has tensors of.
MX_INTEGERS = [np.int8, np.int32, np.int64, np.uint8]
#: The ONNX integer types it lacks.
MISSING = [t for t in INTEGER_TYPES if t not in MX_INTEGERS]


def _name(dtype: Any) -> str:
    return str(np.dtype(dtype).name)


class TestMXNetExecutorFollowsOnnx(OnnxSemanticsTests):
    executor = MXNetExecutor

    @pytest.mark.parametrize("dtype", MX_INTEGERS, ids=_name)
    def test_integer_div_matches_truncated_division_over_the_whole_range(self, dtype: Any) -> None:
        super().test_integer_div_matches_truncated_division_over_the_whole_range(dtype)

    @pytest.mark.parametrize("dtype", [np.uint8], ids=_name)
    @pytest.mark.parametrize(
        ("op", "fn"),
        [("Add", np.add), ("Sub", np.subtract), ("Mul", np.multiply)],
        ids=["Add", "Sub", "Mul"],
    )
    def test_unsigned_arithmetic_wraps_as_onnx_does(self, op: str, fn: Any, dtype: Any) -> None:
        super().test_unsigned_arithmetic_wraps_as_onnx_does(op, fn, dtype)

    @pytest.mark.parametrize("dtype", MISSING, ids=_name)
    def test_integer_types_mxnet_lacks_are_refused_in_one_line(self, dtype: Any) -> None:
        a = np.array([7, 5], dtype)
        with pytest.raises(UsageError, match=f"input 'A' is {_name(dtype)}, a type MXNet") as info:
            self.run_binary("Div", a, a)
        assert "\n" not in str(info.value) and "int32" in str(info.value)

    def test_int64_div_truncates_at_the_extremes(self) -> None:
        info = np.iinfo(np.int64)
        a = np.array([info.max, info.min + 1, -7, 7], np.int64)
        b = np.array([3, 7, 2, -2], np.int64)
        got = self.run_binary("Div", a, b)
        assert [int(q) for q in got] == [
            truncated_division(int(x), int(y)) for x, y in zip(a, b, strict=True)
        ]

    def test_float64_arithmetic_keeps_float64_precision(self) -> None:
        """float64 stays float64: no silent float32 rounding."""
        a = np.array([1.0 + 1e-12, 2.0])
        got = self.executor(binary_model("Add", np.float64, (2,), (2,))).inference(
            {"A": a, "B": np.zeros(2)}
        )["Y"]
        assert got.dtype == np.float64 and got[0] == a[0]
