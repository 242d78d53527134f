"""Conv and ConvTranspose against explicit loops, scipy and ONNX's examples."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import scipy.signal
from hypothesis import assume, given
from hypothesis import strategies as st
from numpy_ref_support import PROPERTY, assert_gradients, make, run

from d5core.api import UsageError


def loop_conv2d(x, w, b=None, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), group=1):
    """Conv by its definition, one output element at a time."""
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]))
    xp[:, :, pads[0] : pads[0] + h, pads[1] : pads[1] + wd] = x
    oh = (xp.shape[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (xp.shape[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    y = np.zeros((n, m, oh, ow))
    mg = m // group
    for i, o, p, q in itertools.product(range(n), range(m), range(oh), range(ow)):
        g = o // mg
        total = 0.0 if b is None else b[o]
        for ci, a, bb in itertools.product(range(cg), range(kh), range(kw)):
            total += (
                w[o, ci, a, bb]
                * xp[
                    i,
                    g * cg + ci,
                    p * strides[0] + a * dilations[0],
                    q * strides[1] + bb * dilations[1],
                ]
            )
        y[i, o, p, q] = total
    return y


def loop_conv_transpose2d(
    x, w, strides=(1, 1), pads=(0, 0, 0, 0), output_padding=(0, 0), dilations=(1, 1), group=1
):
    """ConvTranspose by its definition: every input element scatters a scaled kernel."""
    n, c, h, wd = x.shape
    _, mg, kh, kw = w.shape
    cg = c // group
    full = [
        strides[a] * (x.shape[2 + a] - 1)
        + output_padding[a]
        + (w.shape[2 + a] - 1) * dilations[a]
        + 1
        for a in range(2)
    ]
    y = np.zeros((n, mg * group, *full))
    for i, ci, p, q in itertools.product(range(n), range(c), range(h), range(wd)):
        g = ci // cg
        for o, a, bb in itertools.product(range(mg), range(kh), range(kw)):
            y[
                i, g * mg + o, p * strides[0] + a * dilations[0], q * strides[1] + bb * dilations[1]
            ] += x[i, ci, p, q] * w[ci, o, a, bb]
    return y[:, :, pads[0] : full[0] - pads[2], pads[1] : full[1] - pads[3]]


@pytest.mark.parametrize(
    ("strides", "pads", "dilations", "group"),
    [
        ((1, 1), (0, 0, 0, 0), (1, 1), 1),
        ((2, 1), (1, 0, 2, 1), (1, 2), 2),
        ((1, 3), (0, 2, 1, 0), (2, 1), 4),
    ],
)
def test_conv2d_matches_loops(strides, pads, dilations, group) -> None:
    rng = np.random.default_rng(0)
    x, w, b = (
        rng.standard_normal((2, 4, 7, 8)),
        rng.standard_normal((4, 4 // group, 3, 2)),
        rng.standard_normal(4),
    )
    attrs = {"strides": strides, "pads": pads, "dilations": dilations, "group": group}
    got = run("Conv", attrs, [x, w, b])[0]
    np.testing.assert_allclose(
        got, loop_conv2d(x, w, b, strides, pads, dilations, group), atol=1e-12
    )


@pytest.mark.parametrize("rank", [1, 2, 3])
def test_conv_without_padding_matches_scipy_correlate(rank) -> None:
    rng = np.random.default_rng(rank)
    x = rng.standard_normal((2, 3, *([6] * rank)))
    w = rng.standard_normal((4, 3, *([3] * rank)))
    expected = np.array(
        [
            [
                sum(scipy.signal.correlate(x[i, c], w[o, c], mode="valid") for c in range(3))
                for o in range(4)
            ]
            for i in range(2)
        ]
    )
    np.testing.assert_allclose(run("Conv", {}, [x, w])[0], expected, atol=1e-12)


def test_onnx_conv_examples() -> None:
    x = np.arange(25.0).reshape(1, 1, 5, 5)
    w = np.ones((1, 1, 3, 3))
    padded = run("Conv", {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}, [x, w])[0]
    np.testing.assert_array_equal(
        padded[0, 0],
        [
            [12, 21, 27, 33, 24],
            [33, 54, 63, 72, 51],
            [63, 99, 108, 117, 81],
            [93, 144, 153, 162, 111],
            [72, 111, 117, 123, 84],
        ],
    )
    np.testing.assert_array_equal(
        run("Conv", {}, [x, w])[0][0, 0], [[54, 63, 72], [99, 108, 117], [144, 153, 162]]
    )
    strided = run("Conv", {"strides": [2, 2], "pads": [1, 1, 1, 1]}, [x, w])[0]
    np.testing.assert_array_equal(strided[0, 0], [[12, 27, 24], [63, 108, 81], [72, 117, 84]])
    x7 = np.arange(35.0).reshape(1, 1, 7, 5)
    valid_row = run("Conv", {"strides": [2, 2], "pads": [1, 0, 1, 0]}, [x7, w])[0]
    np.testing.assert_array_equal(valid_row[0, 0], [[21, 33], [99, 117], [189, 207], [171, 183]])


@pytest.mark.parametrize(("auto_pad", "begin"), [("SAME_UPPER", 1), ("SAME_LOWER", 2)])
def test_conv_same_padding_puts_the_odd_element_at_the_named_end(auto_pad, begin) -> None:
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, 2, 7)), rng.standard_normal((3, 2, 4))
    got = run("Conv", {"auto_pad": auto_pad}, [x, w])[0]
    assert got.shape == (1, 3, 7)
    explicit = run("Conv", {"pads": [begin, 3 - begin]}, [x, w])[0]
    np.testing.assert_allclose(got, explicit)
    strided = run("Conv", {"auto_pad": auto_pad, "strides": [2]}, [x, w])[0]
    assert strided.shape == (1, 3, math.ceil(7 / 2))


def test_conv_valid_padding_ignores_pads() -> None:
    x, w = np.ones((1, 1, 6)), np.ones((1, 1, 3))
    assert run("Conv", {"auto_pad": "VALID"}, [x, w])[0].shape == (1, 1, 4)


@pytest.mark.parametrize(
    ("strides", "pads", "output_padding", "dilations", "group"),
    [
        ((1, 1), (0, 0, 0, 0), (0, 0), (1, 1), 1),
        ((2, 3), (1, 0, 0, 2), (1, 2), (1, 1), 2),
        ((2, 1), (0, 1, 1, 0), (0, 0), (2, 2), 1),
    ],
)
def test_conv_transpose_matches_loops(strides, pads, output_padding, dilations, group) -> None:
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((2, 4, 3, 4)), rng.standard_normal((4, 3, 3, 2))
    attrs = {
        "strides": strides,
        "pads": pads,
        "output_padding": output_padding,
        "dilations": dilations,
        "group": group,
    }
    got = run("ConvTranspose", attrs, [x, w])[0]
    expected = loop_conv_transpose2d(x, w, strides, pads, output_padding, dilations, group)
    np.testing.assert_allclose(got, expected, atol=1e-12)


def test_onnx_conv_transpose_example() -> None:
    x = np.arange(9.0).reshape(1, 1, 3, 3)
    y = run("ConvTranspose", {}, [x, np.ones((1, 2, 3, 3))])[0]
    expected = [
        [0, 1, 3, 3, 2],
        [3, 8, 15, 12, 7],
        [9, 21, 36, 27, 15],
        [9, 20, 33, 24, 13],
        [6, 13, 21, 15, 8],
    ]
    np.testing.assert_array_equal(y[0], [expected, expected])


def test_onnx_conv_transpose_output_shape_example() -> None:
    x, w = np.arange(9.0).reshape(1, 1, 3, 3), np.ones((1, 2, 3, 3))
    rows = [[0, 0, 1, 1, 3, 2, 2, 0], [3, 3, 7, 4, 9, 5, 5, 0], [6, 6, 13, 7, 15, 8, 8, 0]]
    expected = np.array([row for row in rows for _ in range(3)] + [[0] * 8], dtype=float)
    for attrs in ({"output_shape": [10, 8]}, {"output_padding": [1, 1]}):
        y = run("ConvTranspose", {"strides": [3, 2], **attrs}, [x, w])[0]
        np.testing.assert_array_equal(y, np.broadcast_to(expected, (1, 2, 10, 8)))


def test_conv_transpose_output_shape_crops_like_the_onnx_formula() -> None:
    x, w = np.ones((1, 1, 3, 3)), np.ones((1, 2, 3, 3))
    full = run("ConvTranspose", {"strides": [3, 2]}, [x, w])[0]
    # total padding 1: NOTSET puts it at the beginning, SAME_UPPER at the end.
    notset = run("ConvTranspose", {"strides": [3, 2], "output_shape": [8, 6]}, [x, w])[0]
    np.testing.assert_array_equal(notset, full[:, :, 1:, 1:])
    upper = run(
        "ConvTranspose",
        {"strides": [3, 2], "output_shape": [8, 6], "auto_pad": "SAME_UPPER"},
        [x, w],
    )[0]
    np.testing.assert_array_equal(upper, full[:, :, :-1, :-1])


def test_conv_transpose_same_padding() -> None:
    x, w = np.ones((1, 1, 3, 3)), np.ones((1, 2, 3, 3))
    same = run("ConvTranspose", {"strides": [2, 2], "auto_pad": "SAME_UPPER"}, [x, w])[0]
    assert same.shape == (1, 2, 6, 6)
    # full size 7: SAME_UPPER crops the extra element at the end.
    full = run("ConvTranspose", {"strides": [2, 2]}, [x, w])[0]
    np.testing.assert_array_equal(same, full[:, :, :6, :6])


def test_conv_transpose_is_the_adjoint_of_conv() -> None:
    rng = np.random.default_rng(2)
    attrs = {"strides": [2, 3], "pads": [1, 0, 2, 1], "dilations": [1, 2], "group": 2}
    x, w = rng.standard_normal((2, 4, 9, 10)), rng.standard_normal((6, 2, 3, 2))
    y = run("Conv", attrs, [x, w])[0]
    r = rng.standard_normal(y.shape)
    back = run("ConvTranspose", {**attrs, "output_padding": [1, 2]}, [r, w])[0]
    assert back.shape == x.shape
    assert np.vdot(y, r) == pytest.approx(np.vdot(x, back), rel=1e-12)


def test_kernel_shape_must_match_the_weights() -> None:
    with pytest.raises(UsageError, match="kernel_shape"):
        make("Conv", {"kernel_shape": [2, 2]}, [np.ones((1, 1, 4, 4)), np.ones((1, 1, 3, 3))])


@st.composite
def conv_problems(draw, transpose=False):
    rank = draw(st.integers(1, 3))
    group = draw(st.sampled_from([1, 2]))
    c = group * draw(st.integers(1, 2))
    mg = draw(st.integers(1, 2))
    kernel = draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank))
    spatial = draw(st.lists(st.integers(2, 5 if rank < 3 else 3), min_size=rank, max_size=rank))
    strides = draw(st.lists(st.integers(1, 2), min_size=rank, max_size=rank))
    dilations = draw(st.lists(st.integers(1, 2), min_size=rank, max_size=rank))
    pads = draw(st.lists(st.integers(0, 2), min_size=2 * rank, max_size=2 * rank))
    attrs = {"strides": strides, "dilations": dilations, "group": group}
    if transpose:
        attrs["pads"] = pads
        attrs["output_padding"] = [
            draw(st.integers(0, max(s, d) - 1)) for s, d in zip(strides, dilations, strict=True)
        ]
        w_shape = (c, mg, *kernel)
        m = mg * group
    else:
        auto_pad = draw(st.sampled_from(["NOTSET", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"]))
        attrs["auto_pad"] = auto_pad
        if auto_pad == "NOTSET":
            attrs["pads"] = pads
        m = mg * group
        w_shape = (m, c // group, *kernel)
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal((2, c, *spatial)), rng.standard_normal(w_shape)]
    if draw(st.booleans()):
        inputs.append(rng.standard_normal(m))
    try:
        make("ConvTranspose" if transpose else "Conv", attrs, inputs)
    except UsageError:
        assume(False)
    return attrs, inputs


@PROPERTY
@given(conv_problems())
def test_conv_backward_matches_central_differences(problem) -> None:
    attrs, inputs = problem
    assert_gradients("Conv", attrs, inputs)


@PROPERTY
@given(conv_problems(transpose=True))
def test_conv_transpose_backward_matches_central_differences(problem) -> None:
    attrs, inputs = problem
    assert_gradients("ConvTranspose", attrs, inputs)
