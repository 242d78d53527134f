"""Absent optional inputs in the numpy executor: ONNX writes an empty name for an
optional input left out before a given one (torch's exporter writes LSTM inputs
``X, W, R, B, "", initial_h, initial_c``; an LSTM it exported is tested with the torch
plugin, test_torch_exported_lstm_on_reference.py). The executor passes ``None`` to operators
that take it (LSTM, GRU), so such nodes run natively and train; operators that do not
take it still run the node on onnx.reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from d5_plugin_numpy.executor import NumpyExecutor
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from d5core.testing.networks import assert_gradients_match_central_differences, loss_over_outputs


def _recurrent_model(op: str, inputs: list[str], given: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A model of one ``op`` node (hidden size 3, bidirectional) whose inputs are
    ``inputs`` (empty names absent), ``X`` fed and the others initializers, plus a loss."""
    rng = np.random.default_rng(2)
    node = helper.make_node(op, inputs, ["Y", "Y_h"], hidden_size=3, direction="bidirectional")
    steps, batch = given["X"].shape[:2]
    nodes, loss = loss_over_outputs(["Y", "Y_h"], [(steps, 2, batch, 3), (2, batch, 3)], rng)
    graph = helper.make_graph(
        [node, *nodes],
        "absent",
        [helper.make_tensor_value_info("X", TensorProto.DOUBLE, list(given["X"].shape))],
        [helper.make_tensor_value_info(loss, TensorProto.DOUBLE, [])],
        initializer=[numpy_helper.from_array(v, k) for k, v in given.items() if k != "X"],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _recurrent_inputs(gates: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "X": rng.standard_normal((3, 2, 2)),
        "W": rng.standard_normal((2, gates * 3, 2)) * 0.6,
        "R": rng.standard_normal((2, gates * 3, 3)) * 0.6,
        "B": rng.standard_normal((2, 2 * gates * 3)) * 0.5,
        "initial_h": rng.standard_normal((2, 2, 3)),
    }


@pytest.mark.parametrize(
    ("op", "inputs"),
    [
        ("LSTM", ["X", "W", "R", "B", "", "initial_h"]),
        ("LSTM", ["X", "W", "R", "", "", "initial_h"]),
        ("GRU", ["X", "W", "R", "", "", "initial_h"]),
    ],
)
def test_empty_middle_inputs_run_natively(op: str, inputs: list[str]) -> None:
    given = {k: v for k, v in _recurrent_inputs(4 if op == "LSTM" else 3).items() if k in inputs}
    model = _recurrent_model(op, inputs, given)
    ex = NumpyExecutor(model)
    feeds = {"X": given["X"]}
    got = ex.inference(feeds)["loss"]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert ex.fallback == {}
    grads = assert_gradients_match_central_differences(ex, feeds)
    assert set(grads) == {k for k in given if k != "X"}


def test_operator_without_absent_inputs_still_falls_back() -> None:
    """Slice with an empty ``axes`` before ``steps``: d5's Slice takes no absent input,
    so onnx.reference runs the node (and says so)."""
    data = np.arange(24, dtype=np.float64).reshape(4, 6)
    consts: dict[str, Any] = {
        "starts": np.array([1, 0]), "ends": np.array([4, 6]), "steps": np.array([2, 3]),
    }  # fmt: skip
    graph = helper.make_graph(
        [helper.make_node("Slice", ["x", "starts", "ends", "", "steps"], ["y"], name="cut")],
        "slice",
        [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [4, 6])],
        [helper.make_tensor_value_info("y", TensorProto.DOUBLE, [2, 2])],
        initializer=[numpy_helper.from_array(v, k) for k, v in consts.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    ex = NumpyExecutor(model)
    np.testing.assert_array_equal(ex.inference({"x": data})["y"], data[1:4:2, 0:6:3])
    assert ex.details()["fallback"] == {"cut": "Slice"}
