"""Helpers shared by the reference backend's tests."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from d5_plugin_numpy.backend import NumpyBackend
from hypothesis import HealthCheck, settings

from d5core.api import Operator, TensorDescriptor, gradcheck

#: Property tests stay few and untimed so that the suite runs in seconds; set
#: D5_PROPERTY_EXAMPLES (say, to 500) for a thorough search before a release.
PROPERTY = settings(
    max_examples=int(os.environ.get("D5_PROPERTY_EXAMPLES", "25")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def make(op_type: str, attributes: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> Operator:
    """Create an operator through the backend, as d5 does."""
    descriptors = [TensorDescriptor.of(np.asarray(x)) for x in inputs]
    return NumpyBackend().create(op_type, attributes, descriptors)


def run(
    op_type: str, attributes: Mapping[str, Any], inputs: Sequence[np.ndarray]
) -> list[np.ndarray]:
    """Forward outputs of ``op_type`` on ``inputs``."""
    return make(op_type, attributes, inputs).forward(list(inputs))


def assert_gradients(
    op_type: str,
    attributes: Mapping[str, Any],
    inputs: Sequence[np.ndarray],
    **kwargs: Any,
) -> None:
    """Backward agrees with central differences for every differentiable input."""
    op = make(op_type, attributes, inputs)
    if not op.differentiable:  # no backward by design (ConstantOfShape)
        assert op.no_gradient
        return
    checks = gradcheck(op, inputs, **kwargs)
    failures = [f"{c.label}: {c.failed_metric}: {c.detail}" for c in checks if not c.passed]
    assert not failures, failures
    floating = [i for i, x in enumerate(inputs) if np.asarray(x).dtype.kind == "f"]
    if any(not op.declares_no_gradient(i) for i in floating):
        assert any(not c.skipped for c in checks), "no input was checked"


def distinct(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """Values at least 0.1 apart, so that no max-pooling window has a tie."""
    n = int(np.prod(shape))
    return (rng.permutation(n) * 0.1 - n * 0.05).reshape(tuple(shape)) + rng.uniform(0, 0.01)


def away_from_zero(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    """Standard-normal values pushed at least 0.05 from zero, the kink of ReLU."""
    x = rng.standard_normal(tuple(shape))
    return np.where(x >= 0, x + 0.05, x - 0.05)


def cases(seed: int = 0) -> dict[str, list[tuple[dict[str, Any], list[np.ndarray]]]]:
    """One or more small, smooth problems for every operator of the backend, in float64."""
    rng = np.random.default_rng(seed)

    def r(*shape: int) -> np.ndarray:
        return rng.standard_normal(shape)

    def pos(*shape: int) -> np.ndarray:
        return rng.uniform(0.5, 1.5, shape)

    i64 = np.int64
    return {
        "Gemm": [({"alpha": 0.5, "beta": 2.0, "transA": 1}, [r(4, 3), r(4, 5), r(5)])],
        "MatMul": [({}, [r(2, 3, 4), r(4, 5)]), ({}, [r(4), r(2, 4, 3)])],
        "Conv": [
            (
                {"strides": [2, 1], "pads": [1, 0, 0, 1], "group": 2},
                [r(2, 4, 6, 5), r(6, 2, 3, 2), r(6)],
            ),
            ({"auto_pad": "SAME_UPPER", "dilations": [2]}, [r(2, 3, 7), r(4, 3, 3)]),
        ],
        "ConvTranspose": [
            (
                {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 0]},
                [r(1, 2, 3, 3), r(2, 3, 3, 2), r(3)],
            ),
        ],
        "Relu": [({}, [away_from_zero(rng, (3, 4))])],
        "LeakyRelu": [({"alpha": 0.2}, [away_from_zero(rng, (3, 4))])],
        "Sigmoid": [({}, [r(3, 4)])],
        "Tanh": [({}, [r(3, 4)])],
        "Softmax": [({"axis": 1}, [r(2, 3, 4)])],
        "LogSoftmax": [({}, [r(2, 3, 4)])],
        "MaxPool": [
            (
                {"kernel_shape": [2, 2], "strides": [2, 1], "pads": [1, 0, 0, 1]},
                [distinct(rng, (2, 2, 5, 4))],
            )
        ],
        "AveragePool": [
            (
                {"kernel_shape": [3, 2], "pads": [1, 1, 1, 1], "count_include_pad": 1},
                [r(1, 2, 4, 5)],
            )
        ],
        "GlobalAveragePool": [({}, [r(2, 3, 4, 5)])],
        "BatchNormalization": [
            ({}, [r(3, 4, 2), pos(4), r(4), r(4), pos(4)]),
            ({"training_mode": 1}, [r(3, 4, 2, 2), pos(4), r(4), r(4), pos(4)]),
        ],
        "Dropout": [({"seed": 3}, [r(4, 5), np.array(0.25), np.array(True)])],
        "Add": [({}, [r(3, 1, 4), r(5, 1)])],
        "Sub": [({}, [r(3, 4), r(4)])],
        "Mul": [({}, [r(1, 4), r(3, 1)])],
        "Div": [({}, [r(3, 4), pos(3, 1)])],
        "Sum": [({}, [r(3, 4), r(4), r(1, 1)])],
        "Reshape": [({}, [r(2, 3, 4), np.array([0, -1, 2], dtype=i64)])],
        "Flatten": [({"axis": 2}, [r(2, 3, 4)])],
        "Transpose": [({"perm": [2, 0, 1]}, [r(2, 3, 4)])],
        "Concat": [({"axis": -2}, [r(2, 3, 4), r(2, 1, 4)])],
        "Squeeze": [({}, [r(2, 1, 4, 1), np.array([-1], dtype=i64)])],
        "Unsqueeze": [({}, [r(2, 4), np.array([0, -1], dtype=i64)])],
        "Identity": [({}, [r(3, 2)])],
        "SoftmaxCrossEntropyLoss": [
            ({"ignore_index": 1}, [r(3, 4, 2), rng.integers(0, 4, (3, 2)), pos(4)]),
        ],
        "MeanSquaredError": [({"reduction": "sum"}, [r(3, 4), r(3, 4)])],
        # recurrent layers: (T=3, N=2, I=2), hidden 2; every input, or the first three
        "LSTM": [
            (
                {"direction": "bidirectional", "clip": 3.0},
                [
                    r(3, 2, 2),
                    r(2, 8, 2) * 0.6,
                    r(2, 8, 2) * 0.6,
                    r(2, 16) * 0.5,
                    np.array([3, 1], dtype=np.int32),
                    r(2, 2, 2),
                    r(2, 2, 2),
                    r(2, 6) * 0.5,
                ],
            ),
            ({"layout": 1, "input_forget": 1}, [r(2, 3, 2), r(1, 8, 2), r(1, 8, 2)]),
        ],
        "GRU": [
            (
                {"direction": "reverse", "linear_before_reset": 1},
                [
                    r(3, 2, 2),
                    r(1, 6, 2) * 0.6,
                    r(1, 6, 2) * 0.6,
                    r(1, 12) * 0.5,
                    np.array([2, 3], dtype=np.int32),
                    r(1, 2, 2),
                ],
            ),
            ({"direction": "bidirectional"}, [r(3, 2, 2), r(2, 6, 2), r(2, 6, 2)]),
        ],
        # -- transformer operators --
        "Gather": [({"axis": 1}, [r(3, 4, 2), np.array([[0, -1], [2, 2]], dtype=i64)])],
        "GatherElements": [({"axis": 1}, [r(3, 4), np.array([[0, 3], [1, 1], [2, -1]])])],
        "Slice": [
            (
                {},
                [r(5, 6), np.array([4, 1]), np.array([-9, 5]), np.array([0, 1]), np.array([-2, 2])],
            )
        ],
        "Shape": [({"start": -2}, [r(2, 3, 4)])],
        "ConstantOfShape": [({}, [np.array([2, 3], dtype=i64)])],
        "Expand": [({}, [r(3, 1), np.array([2, 1, 4], dtype=i64)])],
        "Where": [({}, [rng.random((3, 4)) > 0.5, r(3, 4), r(4)])],
        "Equal": [({}, [rng.integers(0, 2, (3, 4)) * 1.0, np.array([0.0, 1.0, 1.0, 0.0])])],
        "Less": [({}, [r(3, 4), r(4)])],
        "Greater": [({}, [r(3, 1), r(4)])],
        "Cast": [({"to": 11}, [r(3, 4)]), ({"to": 7}, [r(3, 4) * 3])],
        "Pow": [({}, [pos(3, 4), r(4)]), ({}, [r(3, 4), np.array(3, dtype=i64)])],
        "Sqrt": [({}, [pos(3, 4)])],
        "Erf": [({}, [r(3, 4)])],
        "Exp": [({}, [r(3, 4)])],
        "Log": [({}, [pos(3, 4)])],
        "Gelu": [({}, [r(3, 4)]), ({"approximate": "tanh"}, [r(3, 4)])],
        "ReduceMean": [({"keepdims": 0}, [r(3, 4, 2), np.array([0, -1], dtype=i64)])],
        "ReduceSum": [({}, [r(3, 4, 2)]), ({"axes": [1]}, [r(3, 4)])],
        "ReduceMax": [({"keepdims": 0}, [distinct(rng, (3, 4, 2)), np.array([1], dtype=i64)])],
        "LayerNormalization": [
            ({"axis": -2}, [r(2, 3, 4), r(3, 4), r(4)]),
            ({"epsilon": 1e-2}, [r(2, 3, 4), r(4)]),
        ],
        "Split": [
            ({"axis": 1}, [r(2, 6, 3), np.array([1, 0, 3, 2], dtype=i64)]),
            ({"axis": -1, "num_outputs": 3}, [r(2, 7)]),
        ],
        "Trilu": [({}, [r(3, 4)]), ({"upper": 0}, [r(2, 4, 3), np.array(-1, dtype=i64)])],
    }
