"""Reading ONNX constants and attributes as numpy values."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from d5core.errors import UsageError
from d5core.onnx.nodes import constant_value, node_attributes


def test_constant_of_shape_fills_the_shape_given_by_its_input():
    value = numpy_helper.from_array(np.array([0.5], np.float32))
    node = helper.make_node("ConstantOfShape", ["s"], ["y"], value=value)
    out = constant_value(node, [np.array([2, 3], np.int64)])
    assert out.shape == (2, 3) and out.dtype == np.float32 and np.all(out == 0.5)


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"value": numpy_helper.from_array(np.arange(3, dtype=np.int64))}, np.arange(3)),
        ({"value_floats": [1.5, 2.5]}, np.array([1.5, 2.5], np.float32)),
        ({"value_int": 7}, np.array(7)),
    ],
)
def test_constant_reads_each_value_attribute(kwargs, expected):
    out = constant_value(helper.make_node("Constant", [], ["y"], **kwargs), [])
    np.testing.assert_array_equal(out, expected)


def test_constant_without_a_value_names_the_node():
    node = helper.make_node("Constant", [], ["y"], name="c0", value_string="x")
    with pytest.raises(UsageError, match="node 'c0' \\(Constant\\)"):
        constant_value(node, [])


def test_attributes_decode_strings_and_tensors():
    node = helper.make_node(
        "Conv", ["x"], ["y"], auto_pad="SAME_UPPER", pads=[1, 1],
        t=numpy_helper.from_array(np.ones(2, np.float32)),
    )  # fmt: skip
    attrs = node_attributes(node)
    assert attrs["auto_pad"] == "SAME_UPPER" and attrs["pads"] == [1, 1]
    np.testing.assert_array_equal(attrs["t"], np.ones(2, np.float32))
