"""Issue 11, item 4: the onnxruntime executor breaks a step down per node, from ONNX
Runtime's own profiler (it publishes no graph-node events)."""

from __future__ import annotations

import numpy as np
import onnx
from d5_plugin_onnxruntime.executor import OnnxRuntimeExecutor, profile_runs
from onnx import TensorProto, helper

from d5core.onnx.network import Network


def _two_nodes() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 64])
    nodes = [
        helper.make_node("Sigmoid", ["x"], ["s"], name="sig"),
        helper.make_node("Tanh", ["s"], ["y"], name="tanh"),
    ]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 17)]
    )
    model.ir_version = 8
    return model


def test_profile_nodes_gives_every_node_of_every_run_after_a_warm_up():
    executor = OnnxRuntimeExecutor(Network(_two_nodes()))
    feeds = {"x": np.ones((4, 64), np.float32)}
    runs = executor.profile_nodes(feeds, 3)
    assert len(runs) == 3
    for run in runs:
        assert sorted((node, op, direction) for node, op, direction, _ in run) == [
            ("sig", "Sigmoid", "forward"), ("tanh", "Tanh", "forward"),
        ]  # fmt: skip
        assert all(seconds >= 0 for *_, seconds in run)


def test_profile_events_are_split_into_runs_by_their_model_run_span():
    def node(name, ts, dur, op="Relu"):
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur,
                "args": {"op_name": op}}  # fmt: skip

    events = [
        {"cat": "Session", "name": "model_run", "ts": 1000, "dur": 100},
        {"cat": "Session", "name": "model_run", "ts": 100, "dur": 100},
        {"cat": "Session", "name": "session_initialization", "ts": 0, "dur": 50},
        node("a", 110, 20),
        node("b", 150, 30, "Conv"),
        node("a", 1010, 40),
        {"cat": "Node", "name": "a_fence_before", "ts": 1005, "dur": 0, "args": {}},
        node("stray", 500, 10),
    ]
    assert profile_runs(events) == [
        [("a", "Relu", "forward", 20e-6), ("b", "Conv", "forward", 30e-6)],
        [("a", "Relu", "forward", 40e-6)],
    ]
