"""Dropout in training mode: the mask must be consistent with the output, the gradient
and the seed, and be the reference's (and so the torch backend's) mask. Inference, ratio
0 and the default problem are validated against the reference in test_tf_operators.py."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from d5_plugin_numpy.backend import NumpyBackend
from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.operators import TensorFlowBackend, TensorFlowXLABackend, TFOperator
from hypothesis import given, settings
from hypothesis import strategies as st

from d5core.api import TensorDescriptor, gradcheck

tf = tensorflow()
DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])
BACKENDS = pytest.mark.parametrize(
    "backend", [TensorFlowBackend(), TensorFlowXLABackend()], ids=lambda b: b.name
)
TOLERANCE = {"float32": 1e-6, "float64": 1e-14}


def dropout(
    inputs: list[np.ndarray], backend: TensorFlowBackend | None = None, **attributes: Any
) -> TFOperator:
    descriptors = [TensorDescriptor.of(x) for x in inputs]
    return (backend or TensorFlowBackend()).create("Dropout", attributes, descriptors)


def training_inputs(x: np.ndarray, ratio: float) -> list[np.ndarray]:
    return [x, np.array(ratio, dtype=x.dtype), np.array(True)]


@DTYPES
@settings(
    max_examples=int(os.environ.get("D5_PROPERTY_EXAMPLES", "8")), deadline=None, derandomize=True
)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    ratio=st.floats(0.05, 0.95),
    seed=st.integers(0, 2**31),
)
def test_output_is_input_times_the_reference_mask_over_keep(
    shape: list[int], ratio: float, seed: int, dtype: str
) -> None:
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    inputs = training_inputs(x, ratio)
    output, mask = dropout(inputs, seed=seed).forward(inputs)
    assert mask.dtype == np.bool_ and mask.shape == x.shape
    assert output.dtype == x.dtype
    keep = 1.0 - float(np.asarray(ratio, dtype=dtype))
    np.testing.assert_allclose(output, x * mask / keep, rtol=TOLERANCE[dtype], atol=0)
    descriptors = [TensorDescriptor.of(a) for a in inputs]
    expected = NumpyBackend().create("Dropout", {"seed": seed}, descriptors).forward(inputs)
    np.testing.assert_array_equal(mask, expected[1])


def test_about_ratio_of_the_elements_are_dropped() -> None:
    x = np.ones(200_000, dtype=np.float32)
    for ratio in (0.1, 0.5, 0.8):
        inputs = training_inputs(x, ratio)
        _, mask = dropout(inputs, seed=3).forward(inputs)
        assert abs((1.0 - mask.mean()) - ratio) < 0.01


def test_the_mask_depends_on_the_seed_alone() -> None:
    x = np.random.default_rng(0).standard_normal((8, 16)).astype(np.float32)
    inputs = training_inputs(x, 0.5)
    first = dropout(inputs, seed=11).forward(inputs)[1]
    again = dropout(inputs, seed=11).forward(inputs)[1]
    same_op = dropout(inputs, seed=11)
    assert np.array_equal(first, again)
    assert np.array_equal(same_op.forward(inputs)[1], same_op.forward(inputs)[1])
    assert not np.array_equal(first, dropout(inputs, seed=12).forward(inputs)[1])
    unseeded = dropout(inputs)
    assert np.array_equal(unseeded.forward(inputs)[1], dropout(inputs, seed=0).forward(inputs)[1])


@BACKENDS
@DTYPES
def test_backward_routes_the_gradient_through_the_same_mask(
    backend: TensorFlowBackend, dtype: str
) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 7)).astype(dtype)
    dy = rng.standard_normal((6, 7)).astype(dtype)
    inputs = training_inputs(x, 0.4)
    op = dropout(inputs, backend, seed=5)
    _, mask = op.forward(inputs)
    dx, dratio, dtraining = op.backward([dy, None], inputs)
    assert dratio is None and dtraining is None
    np.testing.assert_allclose(dx, dy * mask / np.asarray(0.6, dtype), rtol=TOLERANCE[dtype])


def test_backward_passes_central_differences() -> None:
    x = np.random.default_rng(2).standard_normal((4, 5))
    inputs = training_inputs(x, 0.3)
    checks = gradcheck(dropout(inputs, seed=9), inputs)
    assert [c.passed for c in checks] == [True, True, True]
    assert not checks[0].skipped and checks[1].skipped and checks[2].skipped


@BACKENDS
def test_each_timed_call_applies_the_same_mask_consistent_with_its_output(
    backend: TensorFlowBackend,
) -> None:
    x = np.random.default_rng(3).standard_normal((32, 32)).astype(np.float32)
    inputs = training_inputs(x, 0.5)
    run = dropout(inputs, backend, seed=4).prepare_forward(inputs)
    masks = []
    for _ in range(2):
        output, mask = run()
        np.testing.assert_array_equal(output.numpy(), x * mask.numpy() * np.float32(2.0))
        masks.append(mask.numpy())
    assert np.array_equal(masks[0], masks[1]) and not masks[0].all()


@DTYPES
def test_ratio_and_training_mode_may_be_attributes(dtype: str) -> None:
    x = np.random.default_rng(4).standard_normal((5, 5)).astype(dtype)
    as_inputs = training_inputs(x, 0.25)
    from_inputs = dropout(as_inputs, seed=2).forward(as_inputs)
    from_attributes = dropout([x], seed=2, ratio=0.25, training_mode=1).forward([x])
    for a, b in zip(from_inputs, from_attributes, strict=True):
        np.testing.assert_array_equal(a, b)


@BACKENDS
def test_inference_passes_the_input_through_with_a_full_mask(backend: TensorFlowBackend) -> None:
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    for inputs in ([x], [x, np.array(0.5, np.float32)], [x, np.array(0.5), np.array(False)]):
        output, mask = dropout(inputs, backend, seed=1).forward(inputs)
        np.testing.assert_array_equal(output, x)
        assert mask.all() and mask.dtype == np.bool_


def test_the_torch_backend_drops_the_same_elements() -> None:
    torch_operators = pytest.importorskip("d5_plugin_torch.operators")
    x = np.random.default_rng(6).standard_normal((7, 9)).astype(np.float32)
    inputs = training_inputs(x, 0.35)
    descriptors = [TensorDescriptor.of(a) for a in inputs]
    torch_op = torch_operators.TorchBackend().create("Dropout", {"seed": 8}, descriptors)
    mine = dropout(inputs, seed=8).forward(inputs)
    theirs = torch_op.forward(inputs)
    np.testing.assert_array_equal(mine[1], theirs[1])
    np.testing.assert_allclose(mine[0], theirs[0], rtol=1e-6)
