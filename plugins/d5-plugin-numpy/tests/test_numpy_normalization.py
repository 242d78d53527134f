"""BatchNormalization in both modes, and Dropout."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy_ref_support import PROPERTY, assert_gradients, make, run

from d5core.api import gradcheck


def bn_inputs(rng, shape):
    c = shape[1]
    return [
        rng.standard_normal(shape),
        rng.uniform(0.5, 1.5, c),
        rng.standard_normal(c),
        rng.standard_normal(c),
        rng.uniform(0.5, 1.5, c),
    ]


def test_inference_mode_uses_the_given_statistics() -> None:
    x, scale, bias, mean, var = bn_inputs(np.random.default_rng(0), (2, 3, 4))
    (y,) = run("BatchNormalization", {"epsilon": 1e-3}, [x, scale, bias, mean, var])
    for c in range(3):
        expected = scale[c] * (x[:, c] - mean[c]) / np.sqrt(var[c] + 1e-3) + bias[c]
        np.testing.assert_allclose(y[:, c], expected, rtol=1e-14)


def test_training_mode_normalizes_by_batch_statistics_and_updates_running_ones() -> None:
    x, _, _, mean, var = bn_inputs(np.random.default_rng(1), (4, 3, 2, 2))
    ones, zeros = np.ones(3), np.zeros(3)
    y, running_mean, running_var = run(
        "BatchNormalization",
        {"training_mode": 1, "momentum": 0.8, "epsilon": 0.0},
        [x, ones, zeros, mean, var],
    )
    np.testing.assert_allclose(y.mean(axis=(0, 2, 3)), 0, atol=1e-14)
    np.testing.assert_allclose(y.var(axis=(0, 2, 3)), 1, rtol=1e-12)
    batch_mean = np.array([x[:, c].mean() for c in range(3)])
    batch_var = np.array([((x[:, c] - batch_mean[c]) ** 2).mean() for c in range(3)])
    np.testing.assert_allclose(running_mean, 0.8 * mean + 0.2 * batch_mean, rtol=1e-14)
    np.testing.assert_allclose(running_var, 0.8 * var + 0.2 * batch_var, rtol=1e-14)


@PROPERTY
@given(
    st.integers(0, 1), st.lists(st.integers(1, 3), min_size=0, max_size=2), st.integers(0, 2**16)
)
def test_batch_norm_backward_matches_central_differences(training, spatial, seed) -> None:
    rng = np.random.default_rng(seed)
    inputs = bn_inputs(rng, (3, 2, *spatial))
    assert_gradients("BatchNormalization", {"training_mode": training, "momentum": 0.7}, inputs)


def test_batch_norm_training_backward_without_running_cotangents() -> None:
    rng = np.random.default_rng(3)
    inputs = bn_inputs(rng, (4, 3, 2))
    op = make("BatchNormalization", {"training_mode": 1}, inputs)
    outputs = op.forward(inputs)
    g = rng.standard_normal(outputs[0].shape)
    grads = op.backward([g], inputs, outputs)
    # Only Y's cotangent: nothing reaches the running statistics' inputs.
    assert np.all(grads[3] == 0) and np.all(grads[4] == 0)
    # Through batch statistics, dX sums to zero per channel.
    np.testing.assert_allclose(grads[0].sum(axis=(0, 2)), 0, atol=1e-12)
    checks = gradcheck(op, inputs, grad_outputs=[g, np.zeros(3), np.zeros(3)])
    assert all(c.passed for c in checks), [c.detail for c in checks]


def test_dropout_inference_is_identity_with_a_full_mask() -> None:
    x = np.random.default_rng(0).standard_normal((3, 4))
    for inputs in ([x], [x, np.array(0.5)], [x, np.array(0.5), np.array(False)]):
        y, mask = run("Dropout", {}, inputs)
        np.testing.assert_array_equal(y, x)
        assert mask.dtype == np.bool_ and mask.all()


def test_dropout_training_is_seeded_and_scaled() -> None:
    x = np.random.default_rng(0).uniform(1, 2, (200, 50))
    inputs = [x, np.array(0.3), np.array(True)]
    y, mask = run("Dropout", {"seed": 7}, inputs)
    y2, mask2 = run("Dropout", {"seed": 7}, inputs)
    _, other = run("Dropout", {"seed": 8}, inputs)
    np.testing.assert_array_equal(mask, mask2)
    np.testing.assert_array_equal(y, y2)
    assert (mask != other).any()
    assert mask.mean() == pytest.approx(0.7, abs=0.02)
    np.testing.assert_allclose(y, np.where(mask, x / 0.7, 0.0))
    np.testing.assert_array_equal(mask, np.random.default_rng(7).random(x.shape) >= 0.3)


def test_dropout_ratio_and_training_mode_as_attributes() -> None:
    x = np.ones((10, 10))
    y, mask = run("Dropout", {"ratio": 0.5, "training_mode": 1, "seed": 1}, [x])
    assert not mask.all()
    np.testing.assert_allclose(y[mask], 2.0)


@PROPERTY
@given(
    st.floats(0.0, 0.9),
    st.booleans(),
    st.integers(0, 100),
    st.lists(st.integers(1, 4), min_size=1, max_size=3),
)
def test_dropout_backward_matches_central_differences(ratio, training, seed, shape) -> None:
    x = np.random.default_rng(seed).standard_normal(shape)
    assert_gradients("Dropout", {"seed": seed}, [x, np.array(ratio), np.array(training)])
