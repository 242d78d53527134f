"""Level 0 for operator plugins' tests: backends by name, benchmark problems and suites,
the in-process op benchmark, the measurement engine's synchronization, and
:class:`OperatorErrorTests`, the bad-input checks every ONNX operator backend must pass.

A backend plugin subclasses the mixin in a test module, under a name pytest collects::

    from d5core.testing.operators import OperatorErrorTests
    from my_plugin.operators import MyBackend

    class TestMyBackendRefusesBadInput(OperatorErrorTests):
        backend = MyBackend()
        float16_refusal = "input X has dtype float16; the my backend supports float32"
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, cast

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.levels.operators import Operator, OperatorBackend, TensorDescriptor
from d5core.lv0.runner import OperatorTiming, backend_by_name
from d5core.lv0.workloads.problems import gemm_problem, suite
from d5core.measure.engine import MeasureOptions, synchronizer_of

__all__ = [
    "MeasureOptions",
    "OperatorErrorTests",
    "backend_by_name",
    "bench_ops",
    "create_operator",
    "gemm_problem",
    "one_line_error",
    "suite",
    "synchronizer_of",
]


def one_line_error(excinfo: pytest.ExceptionInfo[UsageError]) -> str:
    """The message of a caught :class:`~d5core.api.UsageError`, checked to be one
    non-empty line without surrounding blanks."""
    message = str(excinfo.value)
    assert "\n" not in message and message.strip() == message and message
    return message


def create_operator(
    backend: OperatorBackend,
    op_type: str,
    attributes: Mapping[str, Any],
    shapes: Sequence[Any],
) -> Operator:
    """Create ``op_type`` on ``backend`` from ``(shape, dtype)`` pairs or bare shapes
    (float32)."""
    descriptors = [
        TensorDescriptor(*s) if isinstance(s[-1], str) else TensorDescriptor(tuple(s))
        for s in shapes
    ]
    return backend.create(op_type, attributes, descriptors)


_IMPOSSIBLE_SHAPES = [
    ("Conv", {}, [(2, 3), (4, 3, 3)], "input X must have rank 3, 4 or 5"),
    ("Conv", {}, [(1, 3, 5), (4, 3, 3, 3)], "input W must have rank 3"),
    ("Conv", {}, [(1, 4, 5), (2, 3, 3)], "input X has 4 channels, but W expects 3"),
    ("Conv", {}, [(1, 3, 5), (2, 3, 3), (3,)], "input B must have shape (2,)"),
    ("Gemm", {}, [(2, 3, 1), (3, 4)], "input A must have rank 2"),
    ("Gemm", {"transB": 1}, [(2, 3), (3, 4)], "inner dimensions differ"),
    ("Gemm", {}, [(2, 3), (3, 4), (3, 4)], "input C of shape (3, 4) does not broadcast"),
    ("MatMul", {}, [(2, 3), (4, 2)], "inner dimensions differ"),
    ("MaxPool", {"kernel_shape": [2, 2]}, [(1, 3, 5)], "input X must have rank 4"),
    ("MaxPool", {"kernel_shape": [4]}, [(1, 1, 3)], "does not fit"),
    ("BatchNormalization", {}, [(2, 3), (3,), (3,), (4,), (3,)], "input input_mean"),
    ("Add", {}, [(2, 3), (4,)], "input shapes do not broadcast"),
    ("Concat", {"axis": 0}, [(2, 3), (2, 4)], "input 1 of shape (2, 4) does not match"),
    ("SoftmaxCrossEntropyLoss", {}, [(4, 3), ((3,), "int64")], "input labels"),
    ("MeanSquaredError", {}, [(2, 3), (3, 2)], "input target of shape (3, 2)"),
    ("GlobalAveragePool", {}, [(2, 3)], "input X must have rank 3 or more"),
    ("Relu", {}, [], "takes 1 input (X), got 0"),
    ("Reshape", {}, [(2, 3), ((2, 1), "int64")], "input shape must have rank 1"),
]

_IMPOSSIBLE_VALUES = [
    ("Reshape", [np.zeros((2, 3)), np.array([4, -1])], "cannot be reshaped to [4, -1]"),
    ("Reshape", [np.zeros((2, 3)), np.array([-1, -1])], "one -1"),
    ("Squeeze", [np.zeros((2, 1)), np.array([0])], "not all of size 1"),
    ("Unsqueeze", [np.zeros((2, 1)), np.array([3])], "out of range for rank 3"),
    ("SoftmaxCrossEntropyLoss", [np.zeros((2, 3)), np.array([0, 3])], "found 3"),
    ("Dropout", [np.zeros(3), np.array(1.0)], "ratio must lie in [0, 1)"),
]

_BAD_ATTRIBUTES = [
    ("Conv", {"stride": [1, 1]}, "unknown attribute 'stride'; it takes: auto_pad"),
    ("Conv", {"auto_pad": "SAME"}, "auto_pad must be one of NOTSET"),
    ("Conv", {"group": 0}, "group must be positive"),
    ("MaxPool", {}, "kernel_shape is required"),
    ("MaxPool", {"kernel_shape": [2], "storage_order": 2}, "storage_order must be 0 or 1"),
    ("SoftmaxCrossEntropyLoss", {"reduction": "avg"}, "reduction must be one of mean"),
    ("Concat", {}, "attribute axis is required"),
    ("Dropout", {"ratio": 1.5}, "ratio must lie in [0, 1)"),
]


class OperatorErrorTests:
    """Bad input to an ONNX operator backend is a one-line :class:`~d5core.api.UsageError`
    naming what is wrong: an unknown operator, impossible shapes, attributes or values,
    unsupported element types, a gradient of the wrong shape."""

    #: The backend under test (an instance).
    backend: ClassVar[OperatorBackend]
    #: What the backend says of a float16 input X (a part of its message).
    float16_refusal: ClassVar[str]

    def create(
        self, op_type: str, attributes: Mapping[str, Any], shapes: Sequence[Any]
    ) -> Operator:
        """:func:`create_operator` on this backend."""
        return create_operator(self.backend, op_type, attributes, shapes)

    def test_unknown_operator_names_it_and_lists_the_supported(self) -> None:
        with pytest.raises(UsageError) as excinfo:
            self.create("Einsum", {}, [(2, 3)])
        message = one_line_error(excinfo)
        assert f"the {self.backend.name} backend has no operator 'Einsum'" in message
        assert "Conv" in message and "MeanSquaredError" in message

    @pytest.mark.parametrize(("op_type", "attributes", "shapes", "expected"), _IMPOSSIBLE_SHAPES)
    def test_impossible_shapes_name_the_input_and_the_expectation(
        self, op_type: str, attributes: dict[str, Any], shapes: list[Any], expected: str
    ) -> None:
        with pytest.raises(UsageError) as excinfo:
            self.create(op_type, attributes, shapes)
        message = one_line_error(excinfo)
        assert message.startswith(f"{op_type}: ") and expected in message

    @pytest.mark.parametrize(("op_type", "inputs", "expected"), _IMPOSSIBLE_VALUES)
    def test_impossible_values_of_shape_and_label_inputs_are_usage_errors(
        self, op_type: str, inputs: list[np.ndarray], expected: str
    ) -> None:
        op = self.backend.create(op_type, {}, [TensorDescriptor.of(x) for x in inputs])
        for call in (lambda: op.forward(inputs), lambda: op.prepare_forward(inputs)):
            with pytest.raises(UsageError) as excinfo:
                call()
            assert expected in one_line_error(excinfo)

    @pytest.mark.parametrize(
        ("shapes", "expected"),
        [
            ([((2, 3), "float16")], None),
            ([((2, 3), "int32")], "input X has dtype int32"),
            (
                [((2, 3), "float64"), ((3,), "float32")],
                "input B has dtype float32 but A has float64",
            ),
        ],
    )
    def test_unsupported_dtypes_are_usage_errors(
        self, shapes: list[Any], expected: str | None
    ) -> None:
        op_type = "Relu" if len(shapes) == 1 else "Add"
        with pytest.raises(UsageError) as excinfo:
            self.create(op_type, {}, shapes)
        assert (expected or self.float16_refusal) in one_line_error(excinfo)

    def test_integer_inputs_must_hold_integers(self) -> None:
        with pytest.raises(UsageError) as excinfo:
            self.create("Reshape", {}, [(2, 3), ((2,), "float32")])
        assert "input shape must hold integers" in one_line_error(excinfo)
        with pytest.raises(UsageError) as excinfo:
            self.create("SoftmaxCrossEntropyLoss", {}, [(2, 3), ((2,), "float32")])
        assert "input labels must hold integers" in one_line_error(excinfo)

    def test_arrays_are_checked_like_descriptors(self) -> None:
        op = self.create("Relu", {}, [(2, 3)])
        with pytest.raises(UsageError) as excinfo:
            op.forward([np.zeros((2, 3), dtype=np.float16)])
        assert "dtype float16" in one_line_error(excinfo)
        op = self.create("Gemm", {}, [(2, 3), (3, 4)])
        with pytest.raises(UsageError) as excinfo:
            op.prepare_forward([np.zeros((2, 3)), np.zeros((4, 4))])
        assert "inner dimensions differ" in one_line_error(excinfo)

    @pytest.mark.parametrize(("op_type", "attributes", "expected"), _BAD_ATTRIBUTES)
    def test_bad_attributes_are_one_line_usage_errors(
        self, op_type: str, attributes: dict[str, Any], expected: str
    ) -> None:
        with pytest.raises(UsageError) as excinfo:
            self.create(op_type, attributes, [(1, 2, 4)])
        assert expected in one_line_error(excinfo)

    def test_attributes_as_onnx_stores_them_are_accepted(self) -> None:
        op = self.create("Conv", {"auto_pad": b"SAME_UPPER"}, [(1, 2, 5), (3, 2, 2)])
        (y,) = op.forward([np.ones((1, 2, 5), np.float32), np.ones((3, 2, 2), np.float32)])
        assert y.shape == (1, 3, 5)

    def test_a_gradient_of_the_wrong_shape_is_a_usage_error(self) -> None:
        op = self.create("Relu", {}, [(2, 3)])
        with pytest.raises(UsageError) as excinfo:
            grads, inputs = [np.ones((3, 2), np.float32)], [np.ones((2, 3), np.float32)]
            cast(Any, op).backward(grads, inputs)  # outputs left out: the backend recomputes
        assert "gradient of output 0 has shape (3, 2)" in one_line_error(excinfo)


def bench_ops(
    problems: Sequence[Any],
    backends: Sequence[str],
    *,
    directions: Sequence[str] = ("forward",),
    dtype: str = "float32",
    options: MeasureOptions | None = None,
    seed: int = 0,
    processes: int = 1,
) -> list[OperatorTiming]:
    """``d5 bench op``'s own runner on ``problems`` (all of one operator) and
    ``backends``, in ``processes`` fresh worker processes, stored in a throwaway store
    and without the noise floor: the timings, in job order (problem, direction,
    backend)."""
    import tempfile
    from pathlib import Path

    from d5core.lv0.bench_run import bench_operators

    with tempfile.TemporaryDirectory(prefix="d5-bench-ops-") as folder:
        bench = bench_operators(
            problems[0].op, problems, backends, directions=directions, dtype=dtype,
            options=options, seed=seed, processes=processes,
            db=Path(folder) / "bench.sqlite", with_noise_floor=False,
        )  # fmt: skip
    return bench.timings
