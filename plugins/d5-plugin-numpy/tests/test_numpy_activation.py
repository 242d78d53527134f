"""Activations against closed forms and scipy."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.special
from d5_plugin_numpy.backend import NumpyBackend
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy_ref_support import PROPERTY, assert_gradients, away_from_zero, run

from d5core.api import TensorDescriptor, UsageError

X = np.array([[-3.0, -0.5, 0.0, 0.5, 3.0]])


def test_relu_and_leaky_relu_are_piecewise_linear() -> None:
    np.testing.assert_array_equal(run("Relu", {}, [X])[0], [[0, 0, 0, 0.5, 3]])
    np.testing.assert_allclose(
        run("LeakyRelu", {"alpha": 0.1}, [X])[0], [[-0.3, -0.05, 0, 0.5, 3]], rtol=1e-15
    )
    np.testing.assert_allclose(
        run("LeakyRelu", {}, [X])[0], [[-0.03, -0.005, 0, 0.5, 3]], rtol=1e-15
    )


def test_sigmoid_matches_scipy_and_does_not_overflow() -> None:
    x = np.array([-1000.0, -30.0, -1.0, 0.0, 2.0, 40.0, 1000.0])
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        y = run("Sigmoid", {}, [x])[0]
    np.testing.assert_allclose(y, scipy.special.expit(x), rtol=1e-15)


def test_tanh_matches_its_exponential_form() -> None:
    x = np.linspace(-3, 3, 13)
    np.testing.assert_allclose(
        run("Tanh", {}, [x])[0], (np.exp(2 * x) - 1) / (np.exp(2 * x) + 1), atol=1e-15
    )


@pytest.mark.parametrize("axis", [0, 1, -1, 2])
def test_softmax_is_a_distribution_along_one_axis(axis) -> None:
    x = np.random.default_rng(0).standard_normal((2, 3, 4)) * 10
    y = run("Softmax", {"axis": axis}, [x])[0]
    np.testing.assert_allclose(y.sum(axis=axis), 1.0, rtol=1e-14)
    assert (y > 0).all()
    np.testing.assert_allclose(y, scipy.special.softmax(x, axis=axis), rtol=1e-13)
    np.testing.assert_allclose(
        run("LogSoftmax", {"axis": axis}, [x])[0],
        scipy.special.log_softmax(x, axis=axis),
        atol=1e-13,
    )


def test_softmax_default_axis_is_the_last_and_large_inputs_are_stable() -> None:
    x = np.array([[1000.0, 1000.0, -1000.0]])
    np.testing.assert_allclose(run("Softmax", {}, [x])[0], [[0.5, 0.5, 0.0]])
    np.testing.assert_allclose(
        run("LogSoftmax", {}, [x])[0], [[-np.log(2), -np.log(2), -2000 - np.log(2)]]
    )


def test_softmax_axis_out_of_range_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="axis 3 is out of range"):
        NumpyBackend().create("Softmax", {"axis": 3}, [TensorDescriptor((2, 3, 4))])


shapes = hnp.array_shapes(min_dims=1, max_dims=3, max_side=4)


@PROPERTY
@given(
    st.sampled_from(["Relu", "LeakyRelu", "Sigmoid", "Tanh"]),
    shapes,
    st.floats(0.01, 0.9),
    st.integers(0, 2**16),
)
def test_pointwise_backward_matches_central_differences(op_type, shape, alpha, seed) -> None:
    attrs = {"alpha": alpha} if op_type == "LeakyRelu" else {}
    assert_gradients(op_type, attrs, [away_from_zero(np.random.default_rng(seed), shape)])


@PROPERTY
@given(st.sampled_from(["Softmax", "LogSoftmax"]), shapes, st.data(), st.integers(0, 2**16))
def test_softmax_backward_matches_central_differences(op_type, shape, data, seed) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = np.random.default_rng(seed).standard_normal(shape) * 3
    assert_gradients(op_type, {"axis": axis}, [x])
