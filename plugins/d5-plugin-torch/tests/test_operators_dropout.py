"""Dropout in training mode: the mask must be consistent with the output, the gradient
and the seed. It is the reference's mask (see test_operators_dropout_reference.py for
the comparison with the numpy reference); inference and ratio 0 are validated against
the reference in test_operators.py."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
import torch
from d5_plugin_torch.operators import TorchBackend, TorchOperator
from hypothesis import given, settings
from hypothesis import strategies as st

from d5core.api import TensorDescriptor, gradcheck

DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])
TOLERANCE = {"float32": 1e-6, "float64": 1e-14}


def dropout(inputs: list[np.ndarray], **attributes: Any) -> TorchOperator:
    return TorchBackend().create("Dropout", attributes, [TensorDescriptor.of(x) for x in inputs])


def training_inputs(x: np.ndarray, ratio: float) -> list[np.ndarray]:
    return [x, np.array(ratio, dtype=x.dtype), np.array(True)]


@DTYPES
@settings(
    max_examples=int(os.environ.get("D5_PROPERTY_EXAMPLES", "20")), deadline=None, derandomize=True
)
@given(
    shape=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    ratio=st.floats(0.05, 0.95),
    seed=st.integers(0, 2**31),
)
def test_output_is_input_times_mask_over_keep(
    shape: list[int], ratio: float, seed: int, dtype: str
) -> None:
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    inputs = training_inputs(x, ratio)
    output, mask = dropout(inputs, seed=seed).forward(inputs)
    assert mask.dtype == np.bool_ and mask.shape == x.shape
    assert output.dtype == x.dtype
    keep = 1.0 - float(np.asarray(ratio, dtype=dtype))
    np.testing.assert_allclose(output, x * mask / keep, rtol=TOLERANCE[dtype], atol=0)


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


@DTYPES
def test_backward_routes_the_gradient_through_the_same_mask(dtype: str) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 7)).astype(dtype)
    dy = rng.standard_normal((6, 7)).astype(dtype)
    inputs = training_inputs(x, 0.4)
    op = dropout(inputs, seed=5)
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


def test_each_timed_call_applies_the_same_mask_consistent_with_its_output() -> None:
    x = np.random.default_rng(3).standard_normal((32, 32)).astype(np.float32)
    inputs = training_inputs(x, 0.5)
    run = dropout(inputs, seed=4).prepare_forward(inputs)
    masks = []
    for _ in range(2):
        output, mask = run()
        assert torch.equal(output, torch.from_numpy(x) * mask * 2.0)
        masks.append(mask.clone())
    assert torch.equal(masks[0], masks[1]) and not masks[0].all()


@DTYPES
def test_ratio_and_training_mode_may_be_attributes(dtype: str) -> None:
    x = np.random.default_rng(4).standard_normal((5, 5)).astype(dtype)
    as_inputs = training_inputs(x, 0.25)
    from_inputs = dropout(as_inputs, seed=2).forward(as_inputs)
    from_attributes = dropout([x], seed=2, ratio=0.25, training_mode=1).forward([x])
    for a, b in zip(from_inputs, from_attributes, strict=True):
        np.testing.assert_array_equal(a, b)


def test_inference_passes_the_input_through_with_a_full_mask() -> None:
    x = np.random.default_rng(5).standard_normal((3, 4)).astype(np.float32)
    for inputs in ([x], [x, np.array(0.5, np.float32)], [x, np.array(0.5), np.array(False)]):
        output, mask = dropout(inputs, seed=1).forward(inputs)
        np.testing.assert_array_equal(output, x)
        assert mask.all() and mask.dtype == np.bool_
