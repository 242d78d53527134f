"""The native transformer operators (LayerNormalization, Erf, Gelu, Gather) on fixed
cases the kit's small draws do not reach: sizes past the one-thread limit (the OpenMP
paths), several column tiles of Gather's scatter-add, rows far from zero, broadcast
Scale and B, and the errors. The kit's hypothesis properties for the four operators run
in ``test_native_operators.py``, which declares them."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from d5_kernels.operators import NativeBackend

from d5core.api import TensorDescriptor, UsageError
from d5core.testing.operator_agreement import assert_agrees_with_reference, reference_backend

NATIVE = NativeBackend()
DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])


def _pair(op_type: str, attributes: dict[str, Any], inputs: list[np.ndarray]) -> tuple[Any, Any]:
    descriptors = [TensorDescriptor.of(a) for a in inputs]
    return (
        NATIVE.create(op_type, attributes, descriptors),
        reference_backend().create(op_type, attributes, descriptors),
    )


def _tolerance(dtype: str) -> dict[str, float]:
    return {"rtol": 2e-4, "atol": 2e-4} if dtype == "float32" else {"rtol": 1e-10, "atol": 1e-10}


@pytest.mark.parametrize(
    ("attributes", "shapes"),
    [
        ({"axis": 1}, [(2, 3, 4), (3, 4), (4,)]),  # two normalized axes, B broadcast
        ({"axis": -1, "epsilon": 1e-2}, [(5, 6), (1,)]),  # no B, one Scale for all
        ({"axis": 0}, [(3, 2, 2), (1, 2, 1), (3, 1, 1)]),  # everything normalized, one row
        ({"axis": -2}, [(2, 3, 4), (4,)]),  # Scale broadcast along the first normalized axis
    ],
    ids=["two-axes", "no-bias", "one-row", "scale-broadcast"],
)
@DTYPES
def test_layer_normalization_fixed_cases_match_the_reference(
    attributes: dict[str, Any], shapes: list[tuple[int, ...]], dtype: str
) -> None:
    rng = np.random.default_rng(1)
    assert_agrees_with_reference(
        NATIVE, "LayerNormalization", attributes, [rng.standard_normal(s) for s in shapes], dtype
    )


@DTYPES
def test_layer_normalization_of_many_wide_rows_matches_the_reference(dtype: str) -> None:
    """96 rows of 768 (a BERT-base hidden size): the parallel path, with per-thread
    partial sums of dScale and dB; the rows sit far from zero (mean 300), where a
    one-sweep sum of squares would lose the variance."""
    rng = np.random.default_rng(2)
    x = (300.0 + rng.standard_normal((4, 24, 768))).astype(dtype)
    scale, bias = (rng.standard_normal(768).astype(dtype) for _ in range(2))
    native, reference = _pair("LayerNormalization", {"axis": -1}, [x, scale, bias])
    got, want = native.forward([x, scale, bias]), reference.forward([x, scale, bias])
    assert [g.shape for g in got] == [(4, 24, 768), (4, 24, 1), (4, 24, 1)]
    tol = _tolerance(dtype)
    np.testing.assert_allclose(got[1], want[1], rtol=1e-6 if dtype == "float32" else 1e-12)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, **tol)
    seeds = [rng.standard_normal(g.shape).astype(dtype) for g in got]
    grads = native.backward(seeds, [x, scale, bias], got)
    expected = reference.backward(seeds, [x, scale, bias], want)
    for g, w in zip(grads, expected, strict=True):
        scale_of = float(np.abs(w).max())
        np.testing.assert_allclose(g, w, rtol=tol["rtol"], atol=tol["atol"] * scale_of)
    again = native.backward(seeds, [x, scale, bias], got)
    for g, a in zip(grads, again, strict=True):  # the dScale / dB sums are in a fixed order
        np.testing.assert_array_equal(g, a)


def test_layer_normalization_refuses_a_stash_type_other_than_float() -> None:
    x = np.ones((2, 3))
    with pytest.raises(UsageError, match=r"^LayerNormalization: stash_type=0 .*stash_type=1"):
        _pair("LayerNormalization", {"stash_type": 0}, [x, np.ones(3)])


def test_layer_normalization_refuses_a_scale_that_does_not_broadcast() -> None:
    with pytest.raises(UsageError, match=r"Scale has shape \(4,\), which does not broadcast"):
        _pair("LayerNormalization", {"axis": -1}, [np.ones((2, 3)), np.ones(4)])


@pytest.mark.parametrize(
    ("op_type", "attributes"),
    [("Erf", {}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"})],
    ids=["erf", "gelu", "gelu-tanh"],
)
@DTYPES
def test_pointwise_operators_match_the_reference(
    op_type: str, attributes: dict[str, Any], dtype: str
) -> None:
    """On a small array (gradients checked numerically too), then on one past the
    one-thread limit, with values out to the tails."""
    rng = np.random.default_rng(3)
    small = rng.standard_normal((3, 5)) * 2.0
    assert_agrees_with_reference(NATIVE, op_type, attributes, [small], dtype)
    x = (rng.standard_normal((300, 257)) * 3.0).astype(dtype)
    native, reference = _pair(op_type, attributes, [x])
    tol = _tolerance(dtype)
    np.testing.assert_allclose(native.forward([x])[0], reference.forward([x])[0], **tol)
    dy = rng.standard_normal(x.shape).astype(dtype)
    got = native.backward([dy], [x])[0]
    np.testing.assert_allclose(got, reference.backward([dy], [x], reference.forward([x]))[0], **tol)


def test_gelu_refuses_an_unknown_approximation() -> None:
    with pytest.raises(UsageError, match=r"^Gelu: approximate='fast' is not one of"):
        _pair("Gelu", {"approximate": "fast"}, [np.ones(3)])


@pytest.mark.parametrize(
    ("axis", "data_shape", "indices"),
    [
        (0, (10, 4), [[1, 9, 1], [-1, 0, 1]]),  # an embedding lookup, repeats, negatives
        (1, (2, 5, 3), [4, -5, 4]),
        (-1, (3, 4), [[2], [0]]),
        (0, (6,), 3),  # a scalar index drops the axis
        (0, (4, 3), np.zeros((0,), dtype=np.int64)),  # no index at all
    ],
    ids=["embedding", "middle-axis", "last-axis", "scalar-index", "no-index"],
)
@DTYPES
def test_gather_fixed_cases_match_the_reference(
    axis: int, data_shape: tuple[int, ...], indices: Any, dtype: str
) -> None:
    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal(data_shape), np.asarray(indices, dtype=np.int64)]
    if inputs[1].size == 0:  # nothing to differentiate: compare forward and backward only
        native, _ = _pair("Gather", {"axis": axis}, _cast(inputs, dtype))
        assert native.forward(_cast(inputs, dtype))[0].shape == (0, 3)
        grad = native.backward([np.zeros((0, 3), dtype=dtype)], _cast(inputs, dtype))
        assert grad[1] is None
        np.testing.assert_array_equal(grad[0], np.zeros(data_shape))
        return
    assert_agrees_with_reference(NATIVE, "Gather", {"axis": axis}, inputs, dtype)


def _cast(inputs: list[np.ndarray], dtype: str) -> list[np.ndarray]:
    return [a.astype(dtype) if a.dtype.kind == "f" else a for a in inputs]


@DTYPES
def test_gather_of_a_large_embedding_matches_the_reference(dtype: str) -> None:
    """A (1000, 600) table and 4 x 64 token ids with many repeats: the parallel copy,
    the parallel zeroing and the scatter-add over column tiles whose last is narrower
    (600 is no multiple of the block) adding repeated rows; int32 indices are accepted."""
    rng = np.random.default_rng(5)
    table = rng.standard_normal((1000, 600)).astype(dtype)
    ids = rng.integers(-1000, 1000, (4, 64)).astype(np.int32)
    ids[0, :8] = 7  # one row gathered eight times
    native, reference = _pair("Gather", {}, [table, ids])
    got = native.forward([table, ids])[0]
    np.testing.assert_array_equal(got, reference.forward([table, ids])[0])
    dy = rng.standard_normal(got.shape).astype(dtype)
    grads = native.backward([dy], [table, ids])
    assert grads[1] is None
    tol = _tolerance(dtype)
    np.testing.assert_allclose(grads[0], reference.backward([dy], [table, ids], [got])[0], **tol)


def test_gather_rejects_an_index_out_of_range_in_one_line() -> None:
    data, ids = np.ones((5, 2)), np.array([0, 5])
    native, _ = _pair("Gather", {}, [data, ids])
    with pytest.raises(UsageError, match=r"^Gather: .*indices hold 5, out of range \[-5, 4\]") as e:
        native.forward([data, ids])
    assert "\n" not in str(e.value)


@pytest.mark.parametrize(
    ("op_type", "attributes"),
    [("Erf", {}), ("Gelu", {}), ("Gelu", {"approximate": "tanh"})],
    ids=["erf", "gelu", "gelu-tanh"],
)
@DTYPES
def test_pointwise_operators_keep_nan_and_the_infinities_as_the_reference(
    op_type: str, attributes: dict[str, Any], dtype: str
) -> None:
    """Special values, and the tails where the float32 approximations switch to +-1."""
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 3.99, 4.0, -4.5, 8.0, -30.0, 1e-5], dtype)
    native, reference = _pair(op_type, attributes, [x])
    dy = np.ones_like(x)
    with np.errstate(invalid="ignore"):  # the reference's inf * 0
        want = reference.forward([x])[0]
        want_grad = reference.backward([dy], [x], [want])[0]
    got = native.forward([x])[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, equal_nan=True)
    got, want = native.backward([dy], [x])[0], want_grad
    finite = np.isfinite(x)  # the reference's derivative at +-inf is itself a nan or 0 * inf
    np.testing.assert_allclose(got[finite], want[finite], rtol=1e-5, atol=1e-6)
    assert np.isnan(got[0])
