"""MaxPool, AveragePool and GlobalAveragePool against explicit loops and ONNX's examples."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from numpy_ref_support import PROPERTY, assert_gradients, distinct, make, run

from d5core.api import UsageError

ONE_TO_25 = np.arange(1.0, 26.0).reshape(1, 1, 5, 5)
ONE_TO_16 = np.arange(1.0, 17.0).reshape(1, 1, 4, 4)


def out_size(size, k, s, d, pb, pe, ceil):
    ext = (k - 1) * d + 1
    n = (math.ceil if ceil else math.floor)((size + pb + pe - ext) / s) + 1
    if ceil and (n - 1) * s >= size + pb:
        n -= 1
    return n


def loop_pool2d(
    x,
    kind,
    kernel,
    strides=(1, 1),
    pads=(0, 0, 0, 0),
    dilations=(1, 1),
    ceil=False,
    count_include_pad=False,
):
    """Pooling by its definition, one window at a time, in unpadded coordinates."""
    n, c, h, w = x.shape
    oh = out_size(h, kernel[0], strides[0], dilations[0], pads[0], pads[2], ceil)
    ow = out_size(w, kernel[1], strides[1], dilations[1], pads[1], pads[3], ceil)
    y = np.zeros((n, c, oh, ow))
    for i, ch, p, q in itertools.product(range(n), range(c), range(oh), range(ow)):
        values, in_padding = [], 0
        for a, b in itertools.product(range(kernel[0]), range(kernel[1])):
            r = p * strides[0] + a * dilations[0] - pads[0]
            col = q * strides[1] + b * dilations[1] - pads[1]
            if 0 <= r < h and 0 <= col < w:
                values.append(x[i, ch, r, col])
            elif -pads[0] <= r < h + pads[2] and -pads[1] <= col < w + pads[3]:
                in_padding += 1
        if kind == "max":
            y[i, ch, p, q] = max(values)
        else:
            y[i, ch, p, q] = sum(values) / (len(values) + (in_padding if count_include_pad else 0))
    return y


POOL_CASES = [
    ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False),
    ((3, 2), (2, 1), (1, 0, 1, 1), (1, 1), False),
    ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),
    ((2, 3), (3, 2), (0, 1, 1, 0), (2, 1), True),
]


@pytest.mark.parametrize(("kernel", "strides", "pads", "dilations", "ceil"), POOL_CASES)
def test_max_pool_matches_loops(kernel, strides, pads, dilations, ceil) -> None:
    x = distinct(np.random.default_rng(0), (2, 2, 7, 8))
    attrs = {
        "kernel_shape": kernel,
        "strides": strides,
        "pads": pads,
        "dilations": dilations,
        "ceil_mode": int(ceil),
    }
    y, indices = run("MaxPool", attrs, [x])
    np.testing.assert_array_equal(y, loop_pool2d(x, "max", kernel, strides, pads, dilations, ceil))
    np.testing.assert_array_equal(x.reshape(-1)[indices], y)


@pytest.mark.parametrize("count_include_pad", [False, True])
@pytest.mark.parametrize(("kernel", "strides", "pads", "dilations", "ceil"), POOL_CASES)
def test_average_pool_matches_loops(
    kernel, strides, pads, dilations, ceil, count_include_pad
) -> None:
    x = np.random.default_rng(1).standard_normal((2, 2, 7, 8))
    attrs = {
        "kernel_shape": kernel,
        "strides": strides,
        "pads": pads,
        "dilations": dilations,
        "ceil_mode": int(ceil),
        "count_include_pad": int(count_include_pad),
    }
    expected = loop_pool2d(x, "avg", kernel, strides, pads, dilations, ceil, count_include_pad)
    np.testing.assert_allclose(run("AveragePool", attrs, [x])[0], expected, atol=1e-14)


def test_onnx_max_pool_examples() -> None:
    y, indices = run("MaxPool", {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}, [ONE_TO_25])
    rows = [[13, 14, 15, 15, 15], [18, 19, 20, 20, 20]] + [[23, 24, 25, 25, 25]] * 3
    np.testing.assert_array_equal(y[0, 0], rows)
    np.testing.assert_array_equal(indices[0, 0], np.array(rows) - 1)
    ceil = run("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}, [ONE_TO_16])[
        0
    ]
    np.testing.assert_array_equal(ceil[0, 0], [[11, 12], [15, 16]])
    dilated = run("MaxPool", {"kernel_shape": [2, 2], "dilations": [2, 2]}, [ONE_TO_16])[0]
    np.testing.assert_array_equal(dilated[0, 0], [[11, 12], [15, 16]])
    same = run(
        "MaxPool",
        {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
        [ONE_TO_25],
    )[0]
    np.testing.assert_array_equal(same[0, 0], [[7, 9, 10], [17, 19, 20], [22, 24, 25]])


def test_max_pool_indices_in_column_major_order() -> None:
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2], "storage_order": 1}
    y, indices = run("MaxPool", attrs, [ONE_TO_25])
    np.testing.assert_array_equal(y[0, 0], [[7, 9], [17, 19]])
    np.testing.assert_array_equal(indices[0, 0], [[6, 16], [8, 18]])


def test_max_pool_indices_count_whole_batch_and_channels() -> None:
    x = distinct(np.random.default_rng(2), (2, 3, 4, 4))
    y, indices = run("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2]}, [x])
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(x.reshape(-1)[indices], y)
    assert indices.min() >= 0 and indices.max() < x.size


def test_max_pool_backward_routes_to_the_maximum() -> None:
    x = np.array([[[[1.0, 5.0], [3.0, 2.0]]]])
    op = make("MaxPool", {"kernel_shape": [2, 2]}, [x])
    out = op.forward([x])
    (dx,) = op.backward([np.array([[[[7.0]]]]), np.zeros((1, 1, 1, 1))], [x], out)
    np.testing.assert_array_equal(dx, [[[[0, 7], [0, 0]]]])


def test_onnx_average_pool_examples() -> None:
    y = run("AveragePool", {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}, [ONE_TO_25])[0]
    expected = [
        [7, 7.5, 8, 8.5, 9],
        [9.5, 10, 10.5, 11, 11.5],
        [12, 12.5, 13, 13.5, 14],
        [14.5, 15, 15.5, 16, 16.5],
        [17, 17.5, 18, 18.5, 19],
    ]
    np.testing.assert_allclose(y[0, 0], expected)
    attrs = {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2], "count_include_pad": 1}
    y = run("AveragePool", attrs, [ONE_TO_25])[0]
    expected = [
        [2.52, 3.60, 4.80, 4.08, 3.24],
        [4.56, 6.40, 8.40, 7.04, 5.52],
        [7.20, 10.00, 13.00, 10.80, 8.40],
        [6.96, 9.60, 12.40, 10.24, 7.92],
        [6.12, 8.40, 10.80, 8.88, 6.84],
    ]
    np.testing.assert_allclose(y[0, 0], expected)


def test_average_pool_in_one_and_three_dimensions() -> None:
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 6, 5))
    y = run("AveragePool", {"kernel_shape": [2, 3, 5]}, [x])[0]
    assert y.shape == (2, 3, 3, 4, 1)
    np.testing.assert_allclose(y[:, :, 0, 0, 0], x[:, :, :2, :3, :].mean(axis=(2, 3, 4)))
    x1 = np.arange(6.0).reshape(1, 1, 6)
    np.testing.assert_allclose(
        run("AveragePool", {"kernel_shape": [2], "strides": [2]}, [x1])[0][0, 0], [0.5, 2.5, 4.5]
    )


def test_global_average_pool_is_the_spatial_mean() -> None:
    x = np.random.default_rng(4).standard_normal((2, 3, 4, 5))
    y = run("GlobalAveragePool", {}, [x])[0]
    assert y.shape == (2, 3, 1, 1)
    np.testing.assert_allclose(
        y[:, :, 0, 0], [[x[i, c].sum() / 20 for c in range(3)] for i in range(2)]
    )


@st.composite
def pool_problems(draw):
    rank = draw(st.integers(1, 3))
    kernel = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    spatial = draw(st.lists(st.integers(2, 6 if rank < 3 else 4), min_size=rank, max_size=rank))
    attrs = {
        "kernel_shape": kernel,
        "strides": draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)),
        "dilations": draw(st.lists(st.integers(1, 2), min_size=rank, max_size=rank)),
        "ceil_mode": draw(st.integers(0, 1)),
    }
    auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
    attrs["auto_pad"] = auto_pad
    if auto_pad == "NOTSET":
        attrs["pads"] = [draw(st.integers(0, k // 2)) for k in kernel * 2]
    x = distinct(np.random.default_rng(draw(st.integers(0, 2**16))), (2, 2, *spatial))
    try:
        make("MaxPool", attrs, [x])
    except UsageError:
        assume(False)
    return attrs, x


@PROPERTY
@given(pool_problems())
def test_max_pool_backward_matches_central_differences(problem) -> None:
    attrs, x = problem
    assume(np.isfinite(run("MaxPool", attrs, [x])[0]).all())
    assert_gradients("MaxPool", attrs, [x])


@PROPERTY
@given(pool_problems(), st.integers(0, 1))
def test_average_pool_backward_matches_central_differences(problem, count_include_pad) -> None:
    attrs, x = problem
    attrs = {**attrs, "count_include_pad": count_include_pad}
    with np.errstate(invalid="ignore", divide="ignore"):
        assume(np.isfinite(run("AveragePool", attrs, [x])[0]).all())
    assert_gradients("AveragePool", attrs, [x])


@PROPERTY
@given(st.lists(st.integers(1, 4), min_size=1, max_size=3), st.integers(0, 2**16))
def test_global_average_pool_backward_matches_central_differences(spatial, seed) -> None:
    x = np.random.default_rng(seed).standard_normal((2, 3, *spatial))
    assert_gradients("GlobalAveragePool", {}, [x])
