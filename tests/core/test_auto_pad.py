"""``resolve_pads``: the one reading of ONNX's ``auto_pad`` that every executor shares."""

from __future__ import annotations

import itertools
import math

import pytest

from d5core.errors import UsageError
from d5core.onnx.nodes import AUTO_PADS, resolve_pads


def test_notset_takes_the_explicit_pads_begins_first():
    assert resolve_pads((5, 6), (3, 3), pads=[1, 0, 2, 1]) == ((1, 0), (2, 1))


@pytest.mark.parametrize("pads", [None, []])
def test_notset_without_pads_pads_nothing(pads):
    assert resolve_pads((5, 6), (3, 3), pads=pads) == ((0, 0), (0, 0))


def test_valid_pads_nothing_whatever_the_pads_say():
    assert resolve_pads((5,), (3,), auto_pad="VALID", pads=[2, 2]) == ((0,), (0,))


@pytest.mark.parametrize(
    ("auto_pad", "expected"), [("SAME_UPPER", ((0,), (1,))), ("SAME_LOWER", ((1,), (0,)))]
)
def test_same_puts_the_odd_element_at_the_end_it_names(auto_pad, expected):
    # 5 windows of 2 over 5 elements need one element of padding
    assert resolve_pads((5,), (2,), auto_pad=auto_pad, pads=[3, 3]) == expected


@pytest.mark.parametrize(
    ("size", "kernel", "strides", "dilations", "upper", "lower"),
    [
        (7, 3, 2, 1, ((1,), (1,)), ((1,), (1,))),  # 4 windows: 2 to pad, split evenly
        (6, 3, 2, 1, ((0,), (1,)), ((1,), (0,))),  # 3 windows: 1 to pad
        (7, 3, 1, 2, ((2,), (2,)), ((2,), (2,))),  # a dilated kernel spans 5
        (6, 2, 1, 3, ((1,), (2,)), ((2,), (1,))),  # spans 4: 3 to pad
        (4, 1, 3, 1, ((0,), (0,)), ((0,), (0,))),  # strides past the end: nothing to pad
    ],
)
def test_same_padding_follows_strides_and_dilations(size, kernel, strides, dilations, upper, lower):
    options = {"strides": [strides], "dilations": [dilations]}
    assert resolve_pads((size,), (kernel,), auto_pad="SAME_UPPER", **options) == upper
    assert resolve_pads((size,), (kernel,), auto_pad="SAME_LOWER", **options) == lower


def test_same_gives_ceil_of_size_over_stride_windows_on_every_axis():
    cases = itertools.product(range(1, 10), range(1, 5), range(1, 4), range(1, 3))
    for size, k, s, d in cases:
        for auto_pad in ("SAME_UPPER", "SAME_LOWER"):
            (b,), (e,) = resolve_pads((size,), (k,), auto_pad=auto_pad, strides=[s], dilations=[d])
            windows = (size + b + e - ((k - 1) * d + 1)) // s + 1
            assert windows == math.ceil(size / s), (size, k, s, d, auto_pad)
            assert abs(b - e) <= 1 and (b <= e) == (auto_pad == "SAME_UPPER" or b == e)


def test_every_axis_is_resolved_on_its_own():
    got = resolve_pads((6, 7), (2, 3), auto_pad="SAME_UPPER", strides=[1, 2], dilations=[3, 1])
    assert got == ((1, 1), (2, 1))


def test_the_auto_pad_values_are_onnxs_four():
    assert AUTO_PADS == ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"auto_pad": "SAME"},
         "Conv: auto_pad must be one of NOTSET, SAME_UPPER, SAME_LOWER, VALID, not 'SAME'"),
        ({"pads": [1, 1, 1]},
         "Conv: attribute pads must hold 4 non-negative values (begins, then ends), not [1, 1, 1]"),
        ({"pads": [0, -1, 0, 0]},
         "Conv: attribute pads must hold 4 non-negative values (begins, then ends), not [0, -1, 0, 0]"),
        ({"auto_pad": "SAME_UPPER", "strides": [1, 0]},
         "Conv: attribute strides must hold 2 positive values, one per spatial axis, not [1, 0]"),
        ({"dilations": [1]},
         "Conv: attribute dilations must hold 2 positive values, one per spatial axis, not [1]"),
    ],
)  # fmt: skip
def test_bad_attributes_are_one_line_errors_naming_the_operator(options, message):
    with pytest.raises(UsageError) as caught:
        resolve_pads((5, 5), (3, 3), op_type="Conv", **options)
    assert str(caught.value) == message


def test_a_kernel_of_another_rank_is_refused():
    with pytest.raises(UsageError, match=r"^a kernel of shape \[3\] does not fit 2 spatial axes$"):
        resolve_pads((5, 5), (3,))
