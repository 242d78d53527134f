"""The window of Conv, ConvTranspose and pooling read from ONNX attributes
(``d5core.onnx.windows``, exported by ``d5core.api``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from d5core.api import UsageError
from d5core.onnx import (
    SpatialWindow,
    average_pool_divisors,
    check_auto_pad,
    conv_transpose_window,
    conv_window,
    spatial_window,
)


def reader(**attributes: Sequence[int]):
    read: list[str] = []

    def read_ints(name: str) -> list[int] | None:
        read.append(name)
        value = attributes.get(name)
        return None if value is None else list(value)

    return read_ints, read


def test_defaults_are_unit_strides_and_dilations_without_padding():
    read_ints, read = reader()
    win = spatial_window("Conv", (5, 6), (3, 3), "NOTSET", read_ints)
    assert win == SpatialWindow((3, 3), (1, 1), (1, 1), ((0, 0), (0, 0)), (5, 6))
    assert win.out_sizes() == (3, 4)
    assert read == ["strides", "dilations", "pads"]


def test_pads_are_read_only_when_auto_pad_is_notset():
    read_ints, read = reader(pads=[9, 9], strides=[2])
    win = spatial_window("MaxPool", (5,), (2,), "SAME_UPPER", read_ints)
    assert win.pads == ((0, 1),) and win.out_sizes() == (3,)
    assert read == ["strides", "dilations"]


def test_dilation_widens_the_kernel_and_ceil_mode_keeps_a_partial_window():
    read_ints, _ = reader(dilations=[2], strides=[2], pads=[0, 1])
    win = spatial_window("MaxPool", (5,), (2,), "NOTSET", read_ints)
    assert win.effective_kernel == (3,)
    assert win.out_sizes() == (2,) and win.out_sizes(ceil_mode=True) == (3,)
    assert win.dilated and win.strided and win.padded and not win.symmetric
    assert win.begin_pads == (0,)


def test_with_pads_keeps_the_subclass():
    class Mine(SpatialWindow):
        pass

    read_ints, _ = reader()
    win = spatial_window("Conv", (4,), (1,), "VALID", read_ints, cls=Mine)
    other = win.with_pads([(1, 1)])
    assert type(other) is Mine and other.pads == ((1, 1),) and other.symmetric


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"strides": [1]}, r"^Conv: attribute strides needs 2 values for 2 spatial axes"),
        ({"dilations": [1, 0]}, r"^Conv: attribute dilations must be positive, got \[1, 0\]$"),
        ({"pads": [0, 0, 0, 0]}, r"^Conv: the kernel \[3, 7\] \(dilated \[3, 7\]\) does not fit"),
    ],
)
def test_bad_attributes_are_usage_errors(attributes, message):
    read_ints, _ = reader(**attributes)
    with pytest.raises(UsageError, match=message):
        spatial_window("Conv", (5, 6), (3, 7), "NOTSET", read_ints)


def test_a_transposed_convolution_need_not_fit():
    read_ints, _ = reader()
    win = spatial_window("ConvTranspose", (2,), (5,), "VALID", read_ints, fit=False)
    assert win.kernel == (5,)


def test_auto_pad_must_be_an_onnx_value():
    assert check_auto_pad("Conv", "SAME_LOWER") == "SAME_LOWER"
    with pytest.raises(UsageError, match=r"^Conv: auto_pad must be one of NOTSET, .*got 'SAME'$"):
        check_auto_pad("Conv", "SAME")


def test_conv_checks_channels_groups_and_bias_before_the_window():
    read_ints, _ = reader(strides=[2, 2])
    win = conv_window("Conv", (1, 4, 7, 7), (6, 2, 3, 3), (6,), 2, "NOTSET", read_ints)
    assert win.out_sizes() == (3, 3)
    with pytest.raises(UsageError, match=r"^Conv: input X has 4 channels, but W expects 3 per"):
        conv_window("Conv", (1, 4, 7, 7), (6, 3, 3, 3), None, 1, "NOTSET", read_ints)
    with pytest.raises(UsageError, match=r"^Conv: W's 5 output channels do not divide into 2"):
        conv_window("Conv", (1, 4, 7, 7), (5, 2, 3, 3), None, 2, "NOTSET", read_ints)
    with pytest.raises(UsageError, match=r"^Conv: input B must have shape \(6,\) .* got \(5,\)$"):
        conv_window("Conv", (1, 4, 7, 7), (6, 2, 3, 3), (5,), 2, "NOTSET", read_ints)


def test_conv_transpose_sizes_follow_onnx():
    read_ints, _ = reader(strides=[2], pads=[1, 0], output_padding=[1])
    geometry = conv_transpose_window(
        "ConvTranspose", (1, 2, 4), (2, 3, 3), (3,), 1, "NOTSET", read_ints
    )
    # full = stride * (in - 1) + output_padding + kernel = 2 * 3 + 1 + 3
    assert geometry.full == (10,) and geometry.out == (9,) and geometry.output_padding == (1,)
    assert geometry.window.pads == ((1, 0),)


def test_conv_transpose_output_shape_sets_the_pads():
    read_ints, _ = reader(strides=[2], output_shape=[8])
    geometry = conv_transpose_window(
        "ConvTranspose", (1, 1, 4), (1, 1, 3), None, 1, "SAME_UPPER", read_ints
    )
    assert geometry.full == (9,) and geometry.out == (8,) and geometry.window.pads == ((0, 1),)
    read_ints, _ = reader(output_padding=[2])
    with pytest.raises(UsageError, match=r"output_padding \[2\] must be smaller than the stride"):
        conv_transpose_window("ConvTranspose", (1, 1, 4), (1, 1, 3), None, 1, "NOTSET", read_ints)
    read_ints, _ = reader(output_shape=[0])
    with pytest.raises(UsageError, match=r"^ConvTranspose: output_shape \[0\] must be positive$"):
        conv_transpose_window("ConvTranspose", (1, 1, 4), (1, 1, 3), None, 1, "NOTSET", read_ints)


@pytest.mark.parametrize(("count_include_pad", "expected"), [(False, [2, 3, 1]), (True, [3, 3, 2])])
def test_average_pool_divides_by_the_elements_each_window_covers(count_include_pad, expected):
    # windows start at -1, 1 and 3 (the last one, of ceil mode, ends beyond the end pad)
    read_ints, _ = reader(pads=[1, 1], strides=[2])
    win = spatial_window("AveragePool", (4,), (3,), "NOTSET", read_ints)
    divisors = average_pool_divisors(
        win, win.out_sizes(ceil_mode=True), count_include_pad=count_include_pad
    )
    assert divisors.tolist() == expected
