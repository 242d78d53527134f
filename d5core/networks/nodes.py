"""Reading ONNX nodes as Python and numpy values, for executors of any framework."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from d5core.errors import UsageError

__all__ = ["constant_value", "node_attributes"]


def node_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """The node's attributes as Python values: tensors as numpy arrays, strings decoded."""
    attrs: dict[str, Any] = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if isinstance(value, onnx.TensorProto):
            value = numpy_helper.to_array(value)
        elif isinstance(value, bytes):
            value = value.decode()
        attrs[a.name] = value
    return attrs


def constant_value(node: onnx.NodeProto, inputs: Sequence[np.ndarray]) -> np.ndarray:
    """The value of a ``Constant`` or ``ConstantOfShape`` node (``inputs``: its inputs).

    :raises UsageError: naming the node when it carries no value this reader knows.
    """
    attrs = node_attributes(node)
    if node.op_type == "ConstantOfShape":
        value = np.asarray(attrs.get("value", np.zeros(1, np.float32)))
        shape = tuple(int(d) for d in np.asarray(inputs[0]).reshape(-1))
        return np.full(shape, value.reshape(-1)[0], dtype=value.dtype)
    for key, dtype in (
        ("value", None),
        ("value_float", np.float32),
        ("value_floats", np.float32),
        ("value_int", np.int64),
        ("value_ints", np.int64),
    ):
        if key in attrs:
            return np.asarray(attrs[key], dtype=dtype)
    raise UsageError(f"node {node.name!r} (Constant): no supported value attribute")
