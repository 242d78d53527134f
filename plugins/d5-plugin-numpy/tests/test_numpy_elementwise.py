"""Add, Sub, Mul, Div and Sum, with broadcasting."""

from __future__ import annotations

import operator

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy_ref_support import PROPERTY, assert_gradients, make, run

BINARY = {"Add": operator.add, "Sub": operator.sub, "Mul": operator.mul, "Div": operator.truediv}


@pytest.mark.parametrize("op_type", sorted(BINARY))
def test_binary_operators_broadcast_like_numpy(op_type) -> None:
    a = np.arange(1.0, 7.0).reshape(2, 1, 3)
    b = np.array([[2.0], [4.0]])
    y = run(op_type, {}, [a, b])[0]
    assert y.shape == (2, 2, 3)
    for i, j, k in np.ndindex(*y.shape):
        assert y[i, j, k] == BINARY[op_type](a[i, 0, k], b[j, 0])


def test_sum_adds_any_number_of_broadcast_inputs() -> None:
    xs = [np.ones((2, 3)), np.arange(3.0), np.full((2, 1), 10.0)]
    np.testing.assert_array_equal(run("Sum", {}, xs)[0], 11 + np.arange(3.0)[None].repeat(2, 0))
    np.testing.assert_array_equal(run("Sum", {}, xs[:1])[0], xs[0])


def test_broadcast_gradient_is_summed_over_broadcast_axes() -> None:
    a, b = np.ones((2, 3)), np.ones((3,))
    op = make("Add", {}, [a, b])
    _, db = op.backward([np.arange(6.0).reshape(2, 3)], [a, b], op.forward([a, b]))
    np.testing.assert_array_equal(db, [3, 5, 7])


@PROPERTY
@given(
    st.sampled_from(sorted(BINARY)),
    hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3),
    st.integers(0, 2**16),
)
def test_binary_backward_matches_central_differences(op_type, shapes, seed) -> None:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shapes.input_shapes[0])
    b = rng.uniform(0.5, 2.0, shapes.input_shapes[1]) * rng.choice([-1, 1], shapes.input_shapes[1])
    assert_gradients(op_type, {}, [a, b])


@PROPERTY
@given(
    st.integers(1, 4).flatmap(
        lambda n: hnp.mutually_broadcastable_shapes(num_shapes=n, max_dims=3, max_side=3)
    ),
    st.integers(0, 2**16),
)
def test_sum_backward_matches_central_differences(shapes, seed) -> None:
    rng = np.random.default_rng(seed)
    assert_gradients("Sum", {}, [rng.standard_normal(s) for s in shapes.input_shapes])
