"""Gemm and MatMul against einsum and ONNX's definition."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from numpy_ref_support import PROPERTY, assert_gradients, run


@pytest.mark.parametrize("trans_a", [0, 1])
@pytest.mark.parametrize("trans_b", [0, 1])
@pytest.mark.parametrize("c_shape", [None, (), (5,), (3, 1), (1, 5), (3, 5)])
def test_gemm_matches_its_definition(trans_a, trans_b, c_shape) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 3) if trans_a else (3, 4))
    b = rng.standard_normal((5, 4) if trans_b else (4, 5))
    inputs = [a, b]
    attrs = {"alpha": 0.25, "beta": -1.5, "transA": trans_a, "transB": trans_b}
    expected = 0.25 * np.einsum("ik,kj->ij", a.T if trans_a else a, b.T if trans_b else b)
    if c_shape is not None:
        c = rng.standard_normal(c_shape)
        inputs.append(c)
        expected = expected + -1.5 * np.broadcast_to(c, (3, 5))
    np.testing.assert_allclose(run("Gemm", attrs, inputs)[0], expected, atol=1e-13)


def test_gemm_defaults_are_plain_product_plus_c() -> None:
    a, b, c = np.ones((2, 3)), np.full((3, 4), 2.0), np.arange(4.0)
    np.testing.assert_array_equal(
        run("Gemm", {}, [a, b, c])[0], 6 + np.arange(4.0)[None].repeat(2, 0)
    )


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [
        ((3, 4), (4, 5)),
        ((2, 3, 4), (4, 5)),
        ((2, 1, 3, 4), (5, 4, 2)),
        ((4,), (4,)),
        ((4,), (2, 4, 3)),
        ((2, 3, 4), (4,)),
    ],
)
def test_matmul_matches_einsum_with_broadcasting(a_shape, b_shape) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    a2 = a[None] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    expected = np.einsum("...ik,...kj->...ij", a2, b2)
    if a.ndim == 1:
        expected = expected[..., 0, :]
    if b.ndim == 1:
        expected = expected[..., 0]
    got = run("MatMul", {}, [a, b])[0]
    assert got.shape == np.matmul(a, b).shape
    np.testing.assert_allclose(got, expected, atol=1e-13)


@PROPERTY
@given(
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(0, 1),
    st.integers(0, 1),
    st.sampled_from([None, "scalar", "row", "column", "full"]),
    st.floats(-2, 2),
    st.floats(-2, 2),
    st.integers(0, 2**16),
)
def test_gemm_backward_matches_central_differences(
    m, k, n, ta, tb, c_kind, alpha, beta, seed
) -> None:
    rng = np.random.default_rng(seed)
    inputs = [
        rng.standard_normal((k, m) if ta else (m, k)),
        rng.standard_normal((n, k) if tb else (k, n)),
    ]
    c_shapes = {"scalar": (), "row": (n,), "column": (m, 1), "full": (m, n)}
    if c_kind is not None:
        inputs.append(rng.standard_normal(c_shapes[c_kind]))
    assert_gradients("Gemm", {"alpha": alpha, "beta": beta, "transA": ta, "transB": tb}, inputs)


@PROPERTY
@given(
    hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3),
    st.integers(1, 3),
    st.integers(1, 3),
    st.integers(1, 3),
    st.sampled_from(["", "a", "b"]),
    st.integers(0, 2**16),
)
def test_matmul_backward_matches_central_differences(batch, m, k, n, vector, seed) -> None:
    rng = np.random.default_rng(seed)
    a_shape = (k,) if vector == "a" else (*batch.input_shapes[0], m, k)
    b_shape = (k,) if vector == "b" else (*batch.input_shapes[1], k, n)
    assert_gradients("MatMul", {}, [rng.standard_normal(a_shape), rng.standard_normal(b_shape)])
