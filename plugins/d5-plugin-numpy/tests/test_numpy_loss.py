"""SoftmaxCrossEntropyLoss and MeanSquaredError against element-by-element formulas."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy_ref_support import PROPERTY, assert_gradients, make, run

from d5core.api import UsageError


def loop_cross_entropy(scores, labels, weights=None, ignore_index=None, reduction="mean"):
    """ONNX's definition, one position at a time."""
    n, c = scores.shape[:2]
    flat_scores = scores.reshape(n, c, -1)
    flat_labels = labels.reshape(n, -1)
    losses = np.zeros(flat_labels.shape)
    total_weight = 0.0
    for i in range(n):
        for d in range(flat_labels.shape[1]):
            label = flat_labels[i, d]
            if ignore_index is not None and label == ignore_index:
                continue
            column = flat_scores[i, :, d]
            log_p = column[label] - math.log(sum(math.exp(v) for v in column))
            w = 1.0 if weights is None else weights[label]
            losses[i, d] = -w * log_p
            total_weight += w
    if reduction == "none":
        return losses.reshape(labels.shape)
    if reduction == "sum":
        return losses.sum()
    return losses.sum() / total_weight


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("ignore_index", [None, 2, -1])
@pytest.mark.parametrize("extra_dims", [(), (3,), (2, 2)])
def test_cross_entropy_matches_its_definition(
    reduction, weighted, ignore_index, extra_dims
) -> None:
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((4, 5, *extra_dims))
    labels = rng.integers(0, 5, (4, *extra_dims))
    if ignore_index == -1:
        labels.reshape(-1)[0] = -1
    weights = rng.uniform(0.5, 1.5, 5) if weighted else None
    inputs = [scores, labels] + ([weights] if weighted else [])
    attrs = {"reduction": reduction} | (
        {"ignore_index": ignore_index} if ignore_index is not None else {}
    )
    loss, log_prob = run("SoftmaxCrossEntropyLoss", attrs, inputs)
    expected = loop_cross_entropy(scores, labels, weights, ignore_index, reduction)
    assert loss.shape == np.shape(expected)
    np.testing.assert_allclose(loss, expected, rtol=1e-13)
    np.testing.assert_allclose(np.exp(log_prob).sum(axis=1), 1.0, rtol=1e-14)


def test_cross_entropy_onnx_example_mean() -> None:
    scores = np.array([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])
    labels = np.array([2, 0])
    loss = run("SoftmaxCrossEntropyLoss", {}, [scores, labels])[0]
    expected = (-(3 - np.log(np.exp([1, 2, 3]).sum())) + np.log(3)) / 2
    assert loss.shape == ()
    assert float(loss) == pytest.approx(expected, rel=1e-14)


def test_cross_entropy_label_out_of_range_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="label 7 is outside"):
        run("SoftmaxCrossEntropyLoss", {}, [np.zeros((2, 3)), np.array([0, 7])])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mean_squared_error(reduction) -> None:
    p, t = np.array([[1.0, 2.0], [3.0, 4.0]]), np.array([[1.5, 2.0], [1.0, 4.0]])
    sq = np.array([[0.25, 0.0], [4.0, 0.0]])
    expected = {"mean": sq.mean(), "sum": sq.sum(), "none": sq}[reduction]
    np.testing.assert_allclose(
        run("MeanSquaredError", {"reduction": reduction}, [p, t])[0], expected
    )


def test_mean_squared_error_needs_one_shape() -> None:
    with pytest.raises(UsageError, match="input 1 \\(target\\) must have the shape"):
        make("MeanSquaredError", {}, [np.zeros((2, 3)), np.zeros((3,))])


@PROPERTY
@given(
    st.sampled_from(["mean", "sum", "none"]),
    st.booleans(),
    st.booleans(),
    st.lists(st.integers(1, 3), max_size=2),
    st.integers(0, 2**16),
)
def test_cross_entropy_backward_matches_central_differences(
    reduction, weighted, ignore, extra, seed
) -> None:
    rng = np.random.default_rng(seed)
    scores = rng.standard_normal((3, 4, *extra)) * 2
    labels = rng.integers(0, 4, (3, *extra))
    labels.reshape(-1)[-1] = 0
    attrs = {"reduction": reduction} | ({"ignore_index": 1} if ignore else {})
    inputs = [scores, labels] + ([rng.uniform(0.5, 1.5, 4)] if weighted else [])
    assert_gradients("SoftmaxCrossEntropyLoss", attrs, inputs)


@PROPERTY
@given(
    st.sampled_from(["mean", "sum", "none"]),
    st.lists(st.integers(1, 4), min_size=1, max_size=3),
    st.integers(0, 2**16),
)
def test_mean_squared_error_backward_matches_central_differences(reduction, shape, seed) -> None:
    rng = np.random.default_rng(seed)
    assert_gradients(
        "MeanSquaredError",
        {"reduction": reduction},
        [rng.standard_normal(shape), rng.standard_normal(shape)],
    )
