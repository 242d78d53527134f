"""Per-node times of the TensorFlow executor (``d5 bench net --breakdown``), from
TensorFlow's profiler on the compiled graph: ops are given to ONNX nodes by their name
scopes, forward and backward."""

from __future__ import annotations

import d5_plugin_tensorflow.executor as executor_module
import pytest
from d5_plugin_tensorflow.executor import TensorFlowExecutor
from d5_plugin_tensorflow.graph.profile import runs_from_trace
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from d5core.api import GRAPH_NODE, use_bus
from d5core.testing.executors import (
    build_network,
    layer_breakdown,
    make_feeds,
    traced_node_times,
    with_loss,
)
from d5core.testing.networks import cnn, feeds_for


def test_profile_nodes_gives_every_node_of_every_run() -> None:
    model = cnn(loss=False)
    ex = TensorFlowExecutor(model)
    runs = ex.profile_nodes(feeds_for(model), 3)
    names = [n.name for n in ex._programs[False].nodes]
    assert len(runs) == 3
    for run in runs:
        assert [node for node, *_ in run] == names
        assert {direction for _, _, direction, _ in run} == {"forward"}
        assert all(seconds >= 0 for *_, seconds in run)
        assert sum(seconds for *_, seconds in run) > 0


def test_train_step_publishes_forward_and_backward_nodes_only_when_subscribed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    net, loss = with_loss(build_network("lenet5", seed=0))
    ex = TensorFlowExecutor(net)
    step = ex.prepare_train_step(make_feeds(net, 2, seed=0), loss)
    runs = traced_node_times(step, repeats=2)
    assert len(runs) == 2
    forward = [n for n, _, d, _ in runs[0] if d == "forward"]
    backward = {n: s for n, _, d, s in runs[0] if d == "backward"}
    assert forward == [n.name for n in net.nodes]
    assert {"conv0", "conv1", "gemm0"} <= set(backward)  # the weights' gradients
    assert backward["conv0"] > 0
    breakdown = layer_breakdown(runs, 1.0, executor="tensorflow", mode="train-step")
    assert "forward nodes only" not in breakdown.note

    def no_profile(*args, **kwargs):
        raise AssertionError("profiled with nobody listening")

    monkeypatch.setattr(executor_module, "profile_calls", no_profile)
    with use_bus() as bus:
        bus.subscribe(GRAPH_NODE + ".begin", lambda event: None)  # not the end event
        step()


def test_inference_events_name_each_node_once_in_graph_order() -> None:
    model = cnn()
    ex = TensorFlowExecutor(model)
    run = ex.prepare_inference(feeds_for(model))
    with use_bus() as bus:
        events = []
        bus.subscribe(GRAPH_NODE + ".end", events.append)
        out = run()
    assert [e.payload["node"] for e in events] == [n.name for n in ex._programs[False].nodes]
    assert {e.payload["op_type"] for e in events} >= {"Conv", "LRN", "Gemm"}
    assert all(isinstance(e.payload["duration_ns"], int) for e in events)
    assert set(out) == {"prob", "loss"}


def _trace(events: list[tuple[str, int, int]], calls: list[tuple[int, int]]) -> bytes:
    """A serialized XSpace: op events ``(name, start, duration)`` on one line and the
    calls' ``KernelAndDeviceFunc::Run`` spans on another (picoseconds)."""
    space = xplane_pb2.XSpace()
    plane = space.planes.add(name="/host:CPU")
    ids: dict[str, int] = {}

    def meta(name: str) -> int:
        if name not in ids:
            ids[name] = len(ids) + 1
            plane.event_metadata[ids[name]].name = name
        return ids[name]

    python = plane.lines.add(name="python", timestamp_ns=1)
    for start, end in calls:
        python.events.add(metadata_id=meta("KernelAndDeviceFunc::Run"),
                          offset_ps=start - 1000, duration_ps=end - start)  # fmt: skip
    compute = plane.lines.add(name="tf_Compute", timestamp_ns=2)
    for name, start, duration in events:
        compute.events.add(metadata_id=meta(name), offset_ps=start - 2000, duration_ps=duration)
    return space.SerializeToString()


def test_trace_ops_are_added_up_per_node_call_and_direction() -> None:
    by_scope = {"n0_a": ("a", "Conv"), "n1_b": ("b", "Relu"), "n2_c": ("c", "Gemm")}
    data = _trace(
        [
            ("n0_a/Conv2D:_MklNativeFusedConv2D", 110, 20),
            ("n0_a/transpose:Transpose", 140, 5),
            ("n2_c/MatMul:MatMul", 150, 10),
            ("gradient_tape/n2_c/MatMul/MatMul_1:MatMul", 170, 7),
            ("gradient_tape/n0_a/Conv2DBackpropFilter:Conv2DBackpropFilter", 180, 9),
            ("Identity:Identity", 190, 50),  # outside every node: not counted
            ("n1_b/Relu:Relu", 1010, 4),  # the second call
            ("n1_b/Relu:Relu", 5000, 4),  # outside every call
            ("ExecutorState::Process", 100, 100),
        ],
        [(100, 200), (1000, 1100)],
    )
    first, second = runs_from_trace(data, 2, by_scope)
    assert first == [
        ("a", "Conv", "forward", 25e-12),
        ("b", "Relu", "forward", 0.0),  # fused or pruned: no op of its own
        ("c", "Gemm", "forward", 10e-12),
        ("c", "Gemm", "backward", 7e-12),
        ("a", "Conv", "backward", 9e-12),
    ]
    assert second == [
        ("a", "Conv", "forward", 0.0),
        ("b", "Relu", "forward", 4e-12),
        ("c", "Gemm", "forward", 0.0),
    ]


def test_a_call_with_no_node_op_gives_an_empty_run() -> None:
    data = _trace([("cluster_0/XlaRun:_XlaRun", 110, 50)], [(100, 200)])
    assert runs_from_trace(data, 1, {"n0_a": ("a", "Conv")}) == [[]]
