"""Reshape, Flatten, Transpose, Concat, Squeeze, Unsqueeze and Identity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy_ref_support import PROPERTY, assert_gradients, make, run

from d5core.api import UsageError

I64 = np.int64
X = np.arange(24.0).reshape(2, 3, 4)


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        ([4, 2, 3], (4, 2, 3)),
        ([0, -1], (2, 12)),
        ([-1], (24,)),
        ([2, 0, 4, 1], (2, 3, 4, 1)),
        ([6, -1, 2], (6, 2, 2)),
        ([0, 0, 0], (2, 3, 4)),
    ],
)
def test_reshape_resolves_zero_and_minus_one(shape, expected) -> None:
    y = run("Reshape", {}, [X, np.array(shape, dtype=I64)])[0]
    assert y.shape == expected
    np.testing.assert_array_equal(y.reshape(-1), X.reshape(-1))


def test_reshape_allowzero_keeps_zero_literal() -> None:
    empty = np.zeros((0, 3, 4))
    y = run("Reshape", {"allowzero": 1}, [empty, np.array([3, 4, 0], dtype=I64)])[0]
    assert y.shape == (3, 4, 0)
    with pytest.raises(UsageError, match="does not hold the 24 elements"):
        run("Reshape", {"allowzero": 1}, [X, np.array([0, 24], dtype=I64)])


@pytest.mark.parametrize(
    ("shape", "message"),
    [
        ([5, -1], "cannot infer -1"),
        ([-1, -1], "more than one -1"),
        ([2, 3, 5], "does not hold"),
        ([-2, 12], "negative size"),
    ],
)
def test_reshape_errors_are_one_line(shape, message) -> None:
    with pytest.raises(UsageError, match=message) as info:
        run("Reshape", {}, [X, np.array(shape, dtype=I64)])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("axis", "expected"),
    [(0, (1, 24)), (1, (2, 12)), (2, (6, 4)), (3, (24, 1)), (-1, (6, 4)), (-3, (1, 24))],
)
def test_flatten_splits_at_axis(axis, expected) -> None:
    y = run("Flatten", {"axis": axis}, [X])[0]
    assert y.shape == expected
    np.testing.assert_array_equal(y.reshape(-1), X.reshape(-1))


def test_transpose_permutes_and_reverses_by_default() -> None:
    y = run("Transpose", {"perm": [1, 2, 0]}, [X])[0]
    assert y.shape == (3, 4, 2)
    assert y[2, 3, 1] == X[1, 2, 3]
    np.testing.assert_array_equal(run("Transpose", {}, [X])[0], X.T)
    with pytest.raises(UsageError, match="not a permutation"):
        make("Transpose", {"perm": [0, 0, 1]}, [X])


def test_concat_joins_along_negative_axis() -> None:
    a, b = np.ones((2, 1, 4)), np.zeros((2, 2, 4))
    y = run("Concat", {"axis": -2}, [a, b, a])[0]
    assert y.shape == (2, 4, 4)
    np.testing.assert_array_equal(y[:, :, 0], [[1, 0, 0, 1]] * 2)


def test_squeeze_and_unsqueeze() -> None:
    x = np.ones((1, 3, 1, 2))
    assert run("Squeeze", {}, [x])[0].shape == (3, 2)
    assert run("Squeeze", {}, [x, np.array([-2], dtype=I64)])[0].shape == (1, 3, 2)
    with pytest.raises(UsageError, match="has size 3, not 1"):
        run("Squeeze", {}, [x, np.array([1], dtype=I64)])
    y = run("Unsqueeze", {}, [np.ones((3, 4, 5)), np.array([2, 0], dtype=I64)])[0]
    assert y.shape == (1, 3, 1, 4, 5)
    assert run("Unsqueeze", {}, [np.ones((3, 4)), np.array([-1], dtype=I64)])[0].shape == (3, 4, 1)
    with pytest.raises(UsageError, match="name an axis twice"):
        run("Unsqueeze", {}, [np.ones((3, 4)), np.array([0, -4], dtype=I64)])


def test_identity_returns_a_copy() -> None:
    y = run("Identity", {}, [X])[0]
    np.testing.assert_array_equal(y, X)
    assert not np.shares_memory(y, X)


@PROPERTY
@given(hnp.array_shapes(min_dims=1, max_dims=4, max_side=3), st.data(), st.integers(0, 2**16))
def test_movement_backward_matches_central_differences(shape, data, seed) -> None:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    rank = len(shape)
    perm = data.draw(st.permutations(range(rank)))
    assert_gradients("Transpose", {"perm": perm}, [x])
    assert_gradients("Flatten", {"axis": data.draw(st.integers(-rank, rank))}, [x])
    assert_gradients("Reshape", {}, [x, np.array([-1, *shape[1:]][::-1], dtype=I64)])
    assert_gradients("Identity", {}, [x])
    axis = data.draw(st.integers(-rank, rank - 1))
    other = list(shape)
    other[axis] = data.draw(st.integers(1, 3))
    assert_gradients("Concat", {"axis": axis}, [x, rng.standard_normal(other)])
    axes = data.draw(st.lists(st.integers(0, rank), min_size=1, max_size=2, unique=True))
    expanded = run("Unsqueeze", {}, [x, np.array(axes, dtype=I64)])[0]
    assert_gradients("Unsqueeze", {}, [x, np.array(axes, dtype=I64)])
    assert_gradients("Squeeze", {}, [expanded, np.array(axes, dtype=I64)])
