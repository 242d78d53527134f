"""The native Conv forward chooses its lowering per problem (issue 29): the direct
convolution (tile kernels of output pixels x output channels, the taps on padding
skipped) where the ISA has its kernels (AVX-512, AVX2) and the shape suits it,
im2col + packed GEMM otherwise, and the GEMM straight on the input planes for a 1x1
convolution with unit strides and no padding. Each lowering is pinned against a float64
numpy convolution on shapes that select it, on every ISA the CPU has, in both dtypes
and with one and two threads; ``details()["algorithm"]`` must name the lowering the C++
side chose."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from d5_kernels import runtime
from d5_kernels.operators import NativeBackend
from d5_kernels.ops.conv import Conv

from d5core.api import TensorDescriptor

NATIVE = NativeBackend()
DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])
THREADS = pytest.mark.parametrize("threads", [1, 2])

DIRECT_NAMES = {
    "avx512": "direct (AVX-512, padded taps skipped)",
    "avx2": "direct (AVX2, padded taps skipped)",
    "generic": "im2col + packed GEMM",  # no tile kernels: the direct path is not taken
}
IM2COL = "im2col + packed GEMM"
PLANES = "packed GEMM on the input planes"

# (X shape, W shape, attributes): shapes the direct convolution takes on AVX-512 and AVX2.
DIRECT_CASES = {
    "odd sizes, one image": ((1, 16, 9, 13), (32, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "stride 2, uneven pads, 40 channels": (
        (3, 24, 11, 10),
        (40, 24, 3, 3),
        {"strides": [2, 2], "pads": [1, 0, 2, 1]},
    ),
    "two groups": ((2, 32, 8, 9), (48, 16, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}),
    "dilation, strides (1, 2), 17 channels": (
        (2, 20, 12, 12),
        (17, 20, 3, 5),
        {"dilations": [2, 1], "strides": [1, 2], "pads": [2, 2, 2, 2]},
    ),
    "83 input channels (weight transposes with a remainder)": (
        (1, 83, 5, 6),
        (64, 83, 3, 3),
        {"pads": [1, 1, 1, 1]},
    ),
    "strides (3, 1)": ((2, 16, 11, 9), (16, 16, 3, 3), {"strides": [3, 1], "pads": [0, 1, 1, 1]}),
    "rows wider than a tile": ((2, 16, 5, 61), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "5x5 kernel wider than the padded image": (
        (2, 8, 3, 4),
        (16, 8, 5, 5),
        {"pads": [2, 2, 2, 2]},
    ),
    "no padding, batch of four": ((4, 32, 7, 7), (64, 32, 3, 3), {}),
    "five images in uneven blocks of whole images": (
        (5, 32, 20, 20),
        (32, 32, 3, 3),
        {"pads": [1, 1, 1, 1]},
    ),
    "512 channels at 7x7, one image": ((1, 512, 7, 7), (512, 512, 3, 3), {"pads": [1, 1, 1, 1]}),
}

# Shapes the direct convolution leaves to im2col (or to the plain GEMM) on every ISA.
OTHER_CASES = {
    "stride 3": ((2, 16, 10, 10), (16, 16, 3, 3), {"strides": [3, 3]}, IM2COL),
    "depthwise": ((2, 8, 6, 6), (8, 1, 3, 3), {"group": 8, "pads": [1, 1, 1, 1]}, IM2COL),
    "one input channel": ((2, 1, 9, 9), (16, 1, 3, 3), {"pads": [1, 1, 1, 1]}, IM2COL),
    "1x1": ((2, 16, 5, 5), (32, 16, 1, 1), {}, PLANES),
}


def reference(x: np.ndarray, w: np.ndarray, b: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """Conv in float64 by explicit taps over a zero-padded copy of X."""
    group = int(attrs.get("group", 1))
    sh, sw = attrs.get("strides", [1, 1])
    dh, dw = attrs.get("dilations", [1, 1])
    top, left, bottom, right = attrs.get("pads", [0, 0, 0, 0])
    x64, w64 = x.astype(np.float64), w.astype(np.float64)
    padded = np.pad(x64, ((0, 0), (0, 0), (top, bottom), (left, right)))
    n, _, h, wd = padded.shape
    m, cg, kh, kw = w.shape
    oh = (h - dh * (kh - 1) - 1) // sh + 1
    ow = (wd - dw * (kw - 1) - 1) // sw + 1
    mg = m // group
    y = np.zeros((n, m, oh, ow))
    for g in range(group):
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
                cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
                patch = padded[:, g * cg : (g + 1) * cg, rows, cols]
                taps = w64[g * mg : (g + 1) * mg, :, i, j]
                y[:, g * mg : (g + 1) * mg] += np.einsum("nchw,kc->nkhw", patch, taps)
    return y + b.astype(np.float64)[None, :, None, None]


@pytest.fixture
def threads_restored() -> Iterator[None]:
    before = runtime.num_threads()
    yield
    runtime.set_num_threads(before)


def _run(
    isa: str, threads: int, dtype: str, case: tuple[Any, ...], seed: int = 0
) -> tuple[np.ndarray, np.ndarray, str]:
    """The native output, the reference and the algorithm details() names."""
    x_shape, w_shape, attrs = case[:3]
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    b = rng.standard_normal(w_shape[0]).astype(dtype)
    runtime.set_num_threads(threads)
    with runtime.using_isa(isa):
        op = NATIVE.create("Conv", attrs, [TensorDescriptor.of(a) for a in (x, w, b)])
        (y,) = op.forward([x, w, b])
        algorithm = op.details()["algorithm"]
    return y, reference(x, w, b, attrs), algorithm


def _assert_close(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    assert got.shape == want.shape
    scale = float(np.abs(want).max())
    tolerance = (2e-5 if dtype == "float32" else 1e-12) * scale
    np.testing.assert_allclose(got, want, rtol=0, atol=tolerance)


@DTYPES
@THREADS
@pytest.mark.parametrize("name", list(DIRECT_CASES))
def test_direct_convolution_matches_float64_numpy(
    isa: str, dtype: str, threads: int, name: str, threads_restored: None
) -> None:
    y, want, algorithm = _run(isa, threads, dtype, DIRECT_CASES[name])
    assert algorithm == DIRECT_NAMES[isa]
    _assert_close(y, want, dtype)


def test_an_empty_batch_gives_an_empty_output(isa: str) -> None:
    x = np.ones((0, 16, 8, 8), dtype="float32")
    w = np.ones((32, 16, 3, 3), dtype="float32")
    with runtime.using_isa(isa):
        op = NATIVE.create("Conv", {"pads": [1, 1, 1, 1]}, [TensorDescriptor.of(a) for a in (x, w)])
        (y,) = op.forward([x, w])
    assert y.shape == (0, 32, 8, 8)


@DTYPES
@pytest.mark.parametrize("name", list(OTHER_CASES))
def test_shapes_the_direct_kernels_do_not_suit_use_the_gemm(
    isa: str, dtype: str, name: str, threads_restored: None
) -> None:
    case = OTHER_CASES[name]
    y, want, algorithm = _run(isa, 1, dtype, case)
    assert algorithm == case[3]
    _assert_close(y, want, dtype)


def test_details_name_the_algorithm_for_the_dtype_and_isa_in_use(isa: str) -> None:
    x = np.zeros((1, 16, 8, 8), dtype="float64")
    w = np.zeros((16, 16, 3, 3), dtype="float64")
    with runtime.using_isa(isa):
        op = NATIVE.create("Conv", {"pads": [1, 1, 1, 1]}, [TensorDescriptor.of(a) for a in (x, w)])
        # 16 float64 channels fill two AVX-512 vectors (8 lanes) and four AVX2 ones.
        assert op.details()["algorithm"] == DIRECT_NAMES[isa]
        assert op.details()["backward_algorithm"] == "im2col + packed GEMM"
    # An operator not yet given shapes says that the choice depends on them.
    assert "chosen per shape" in Conv({}).details()["algorithm"]


@DTYPES
def test_a_nan_in_x_reaches_exactly_the_outputs_whose_window_holds_it(isa: str, dtype: str) -> None:
    x = np.ones((2, 16, 9, 9), dtype=dtype)
    w = np.ones((32, 16, 3, 3), dtype=dtype)
    x[1, 5, 0, 4] = np.nan  # on the top edge: the rows above it are padding
    with runtime.using_isa(isa):
        op = NATIVE.create("Conv", {"pads": [1, 1, 1, 1]}, [TensorDescriptor.of(a) for a in (x, w)])
        (y,) = op.forward([x, w])
    nan = np.isnan(y)
    expected = np.zeros_like(nan)
    expected[1, :, 0:2, 3:6] = True  # outputs (oh, ow) with |oh - 0| <= 1 and |ow - 4| <= 1
    assert np.array_equal(nan, expected)


@DTYPES
@pytest.mark.parametrize("value", [np.nan, np.inf])
def test_a_non_finite_weight_spreads_only_where_its_tap_meets_the_input(
    isa: str, dtype: str, value: float
) -> None:
    """The tap (0, 0) lies on padding for the first output row and column: the direct
    convolution skips it there (no 0 * inf), and uses it everywhere else."""
    x = np.ones((1, 16, 6, 6), dtype=dtype)
    w = np.ones((16, 16, 3, 3), dtype=dtype)
    w[3, 2, 0, 0] = value
    with runtime.using_isa(isa):
        op = NATIVE.create("Conv", {"pads": [1, 1, 1, 1]}, [TensorDescriptor.of(a) for a in (x, w)])
        (y,) = op.forward([x, w])
        direct = op.details()["algorithm"].startswith("direct")
    others = np.delete(y, 3, axis=1)
    assert np.isfinite(others).all()
    inner = y[0, 3, 1:, 1:]
    assert np.array_equal(inner, np.full_like(inner, value), equal_nan=True)
    edge = np.concatenate([y[0, 3, 0, :], y[0, 3, 1:, 0]])
    if direct:  # padded taps skipped: the edge never sees the weight
        assert np.isfinite(edge).all()
    else:  # im2col multiplies the padding's zeros, as numpy's reference does
        assert np.isnan(edge).all()
