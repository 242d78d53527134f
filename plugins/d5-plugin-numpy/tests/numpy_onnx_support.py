"""Run one ONNX node on onnx.reference: the independent forward the transformer
operators' tests compare the reference backend with."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.reference import ReferenceEvaluator

__all__ = ["onnx_forward"]


def onnx_forward(
    op_type: str,
    attributes: Mapping[str, Any],
    inputs: Sequence[np.ndarray | None],
    outputs: int = 1,
    opset: int = 20,
) -> list[np.ndarray]:
    """The outputs of a one-node model ``op_type`` on ``inputs`` (``None``: an optional
    input left out), evaluated by onnx.reference at ``opset``."""
    names = ["" if x is None else f"in{i}" for i, x in enumerate(inputs)]
    outs = [f"out{i}" for i in range(outputs)]
    node = helper.make_node(op_type, names, outs, **dict(attributes))
    graph_inputs = [
        helper.make_tensor_value_info(
            n, helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype), np.shape(x)
        )
        for n, x in zip(names, inputs, strict=True)
        if x is not None
    ]
    graph_outputs = [
        helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in outs
    ]
    graph = helper.make_graph([node], "one", graph_inputs, graph_outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    feeds = {n: np.asarray(x) for n, x in zip(names, inputs, strict=True) if x is not None}
    return [np.asarray(y) for y in ReferenceEvaluator(model).run(None, feeds)]
