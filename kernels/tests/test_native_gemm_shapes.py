"""The GEMM's shape-dependent paths on every micro-kernel this CPU runs: the skinny path
(few columns: A read in place, B packed in vector-wide panels, long K slices, and rows
copied when their stride is a multiple of 2 KiB), small M (a few row tiles over a wide B,
packed row by row), transposed and reversed operands, edge tiles in both directions,
beta != 0, beta == 0 never reading Y, NaN propagation, and one- versus two-thread
agreement. Each result is compared with float64 numpy."""

from __future__ import annotations

import numpy as np
import pytest
from d5_kernels import _native, runtime

DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])
TOLERANCE = {"float32": 3e-5, "float64": 1e-12}


def _operand(rng: np.random.Generator, rows: int, cols: int, dtype: str, layout: str) -> np.ndarray:
    """A rows x cols operand stored row-major ("n"), as a transpose ("t") or with its
    rows reversed (a negative row stride, "r")."""
    if layout == "t":
        return rng.standard_normal((cols, rows)).astype(dtype).T
    values = rng.standard_normal((rows, cols)).astype(dtype)
    return values[::-1] if layout == "r" else values


def _gemm(a: np.ndarray, b: np.ndarray, alpha: float, beta: float, y: np.ndarray) -> np.ndarray:
    _native.gemm(a, b, y, alpha, beta, y if beta != 0.0 else None)
    return y


def _error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / max(1.0, np.abs(want).max()))


def _check(isa: str, dtype: str, mnk: tuple[int, int, int], layouts: str, beta: float) -> None:
    m, n, k = mnk
    rng = np.random.default_rng(m * 7919 + n * 31 + k)
    a = _operand(rng, m, k, dtype, layouts[0])
    b = _operand(rng, k, n, dtype, layouts[1])
    c = rng.standard_normal((m, n)).astype(dtype)
    want = 0.75 * (a.astype(np.float64) @ b.astype(np.float64))
    if beta != 0.0:
        want += beta * c.astype(np.float64)
    y = c.copy() if beta != 0.0 else np.full((m, n), np.nan, dtype=dtype)
    with runtime.using_isa(isa):
        got = _gemm(a, b, 0.75, beta, y)
    assert _error(got, want) < TOLERANCE[dtype]


@DTYPES
@pytest.mark.parametrize("n", [1, 7, 8, 15, 16, 17, 31, 32, 33, 48, 100, 128])
@pytest.mark.parametrize("layouts", ["nn", "tn", "nt", "rn"])
def test_skinny_products_match_numpy_for_every_column_count(
    isa: str, dtype: str, n: int, layouts: str
) -> None:
    """29 rows leave a one-row edge tile after two full ones; 70 columns of K give a
    K tail shorter than a cache line in every row stream."""
    _check(isa, dtype, (29, n, 70), layouts, 0.0)


@DTYPES
@pytest.mark.parametrize("mnk", [(45, 16, 9000), (31, 128, 1100), (17, 40, 2600)])
@pytest.mark.parametrize("beta", [0.0, -1.5])
def test_skinny_products_accumulate_over_k_slices(
    isa: str, dtype: str, mnk: tuple[int, int, int], beta: float
) -> None:
    """K longer than one of the skinny path's K slices, so the later slices accumulate
    into Y (and beta applies to the first only)."""
    _check(isa, dtype, mnk, "nn", beta)


@DTYPES
@pytest.mark.parametrize("n", [40, 128])
@pytest.mark.parametrize("beta", [0.0, 2.0])
def test_rows_a_multiple_of_2_kib_apart_give_the_same_product(
    isa: str, dtype: str, n: int, beta: float
) -> None:
    """K * itemsize = 4 KiB: the skinny path copies each strip of A before it meets the
    B panels; the product must not change."""
    k = 4096 // np.dtype(dtype).itemsize
    _check(isa, dtype, (33, n, k), "nn", beta)


@DTYPES
@pytest.mark.parametrize("mnk", [(35, 1000, 300), (3, 77, 513), (15, 33, 1)])
@pytest.mark.parametrize("layouts", ["nn", "tn", "nt", "tt"])
def test_few_rows_times_a_wide_b_match_numpy(
    isa: str, dtype: str, mnk: tuple[int, int, int], layouts: str
) -> None:
    _check(isa, dtype, mnk, layouts, -0.5)


@DTYPES
@pytest.mark.parametrize("n", [16, 100, 700])
def test_beta_zero_never_reads_y(isa: str, dtype: str, n: int) -> None:
    """Y starts as NaN: with beta = 0 none of it may reach the result."""
    rng = np.random.default_rng(n)
    a = rng.standard_normal((30, 50)).astype(dtype)
    b = rng.standard_normal((50, n)).astype(dtype)
    y = np.full((30, n), np.nan, dtype=dtype)
    with runtime.using_isa(isa):
        _native.gemm(a, b, y, 1.0, 0.0, None)
    assert not np.isnan(y).any()
    assert _error(y, a.astype(np.float64) @ b.astype(np.float64)) < TOLERANCE[dtype]


@DTYPES
@pytest.mark.parametrize("n", [16, 40, 300])
@pytest.mark.parametrize("layouts", ["nn", "tn"])
def test_nan_in_a_or_b_spreads_to_its_row_or_column_only(
    isa: str, dtype: str, n: int, layouts: str
) -> None:
    rng = np.random.default_rng(n + 1)
    a = np.ascontiguousarray(_operand(rng, 31, 20, dtype, "n"))
    b = rng.standard_normal((20, n)).astype(dtype)
    a[13, 7] = np.nan
    b[19, n - 1] = np.nan
    if layouts[0] == "t":
        a = np.asfortranarray(a)
    y = np.empty((31, n), dtype=dtype)
    with runtime.using_isa(isa):
        _native.gemm(a, b, y, 1.0, 0.0, None)
    expected = np.zeros((31, n), dtype=bool)
    expected[13, :] = True
    expected[:, n - 1] = True
    np.testing.assert_array_equal(np.isnan(y), expected)


@DTYPES
@pytest.mark.parametrize("mnk", [(301, 16, 500), (290, 128, 1100), (100, 40, 512), (35, 900, 300)])
def test_one_and_two_threads_agree_on_every_path(
    isa: str, dtype: str, mnk: tuple[int, int, int]
) -> None:
    m, n, k = mnk
    rng = np.random.default_rng(k)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    results = []
    before = runtime.num_threads()
    try:
        with runtime.using_isa(isa):
            for threads in (1, 2):
                runtime.set_num_threads(threads)
                results.append(_gemm(a, b, 1.0, 0.0, np.empty((m, n), dtype=dtype)))
    finally:
        runtime.set_num_threads(before)
    np.testing.assert_array_equal(results[0], results[1])
    assert _error(results[0], a.astype(np.float64) @ b.astype(np.float64)) < TOLERANCE[dtype]
