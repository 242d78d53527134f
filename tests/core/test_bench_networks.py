"""Issue 11: feeds, batch and breakdown of ``d5 bench net`` / ``d5 validate net`` (items 1,
4, 12 and 18). Core lane: models are built with onnx.helper, no executor plugin runs."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from d5core.bus import GRAPH_NODE, get_bus
from d5core.errors import UsageError
from d5core.levels.networks import GraphExecutor
from d5core.lv0.workloads import memory
from d5core.lv1.runner import (
    BREAKDOWN_REPEATS,
    NetworkWorkload,
    layer_breakdown,
    make_feeds,
    network_workload,
    node_runs,
    resolve_batch,
    samples_in,
    with_loss,
)
from d5core.onnx.network import Network


def _conv_model(out_channels: int, size: int, batch: int | str = "N") -> onnx.ModelProto:
    """x (batch, 2, size, size) -> Conv 1x1 -> y (batch, out_channels, size, size)."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 2, size, size])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, out_channels, size, size])
    weight = np.ones((out_channels, 2, 1, 1), np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")], "g", [x], [y],
        [numpy_helper.from_array(weight, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _relu_model(shape: list[int | str]) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


# -- item 12: labels are classes along axis 1 ----------------------------------------


def test_labels_of_a_spatial_output_are_classes_of_axis_one():
    trained, _ = with_loss(Network(_conv_model(out_channels=3, size=8)))
    labels = make_feeds(trained, 4, seed=0)["labels"]
    assert labels.shape == (4, 8, 8)
    assert labels.min() >= 0 and labels.max() < 3  # not below 8, the last dimension
    assert len(np.unique(labels)) == 3


def test_labels_of_a_1000_class_output_with_unit_spatial_dims_are_not_all_zero():
    trained, _ = with_loss(Network(_conv_model(out_channels=1000, size=1, batch=1)))
    labels = make_feeds(trained, 1, seed=0)["labels"]
    assert labels.shape == (1, 1, 1)
    assert 0 < labels.item() < 1000


# -- item 1: a fixed batch is run as it is, never claimed to be another --------------


def test_a_fixed_batch_model_refuses_another_batch_in_one_line():
    network = Network(_conv_model(3, 4, batch=1))
    with pytest.raises(
        UsageError, match=r"fixed batch of 1 .* leave out --batch or pass --batch 1"
    ):
        resolve_batch(network, 32, what="m.onnx")
    assert resolve_batch(network, None) == 1
    assert resolve_batch(network, 1) == 1


def test_a_symbolic_batch_takes_the_asked_batch_or_32():
    network = Network(_conv_model(3, 4))
    assert resolve_batch(network, 8) == 8
    assert resolve_batch(network, None) == 32


def test_the_samples_counted_are_those_the_feeds_hold(tmp_path):
    path = tmp_path / "fixed4.onnx"
    onnx.save(_conv_model(3, 4, batch=4), path)
    work = network_workload(str(path))
    assert work.batch == 4 == samples_in(work.network, work.feeds)
    assert work.feeds["x"].shape == (4, 2, 4, 4)


# -- item 18: an input too large for memory is refused with the figure ----------------


def test_an_input_declared_larger_than_memory_is_refused_before_allocating(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 16 * 2**30)
    network = Network(_relu_model([1, 4_000_000_000]))
    with pytest.raises(UsageError) as caught:
        make_feeds(network, 1)
    # 4e9 float32 values, and the float64 draw they are made from
    assert f"need at least {(4e9 * 4 + 4e9 * 8) / 2**30:.1f} GiB" in str(caught.value)
    assert "16.0 GiB of memory available" in str(caught.value)


def test_bench_net_refuses_an_input_larger_than_memory_in_one_line(monkeypatch, tmp_path, d5_cli):
    monkeypatch.setattr(memory, "available_bytes", lambda: 16 * 2**30)
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))
    path = tmp_path / "huge.onnx"
    onnx.save(_relu_model([1, 4_000_000_000]), path)
    result = d5_cli("bench", "net", str(path), "--executors", "numpy")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("d5: error: ") and result.stderr.count("\n") == 1
    assert "GiB" in result.stderr


# -- item 4: the breakdown says when it cannot be trusted ----------------------------


def _runs(*node_seconds: float, repeats: int = 3) -> list[list[tuple[str, str, str, float]]]:
    return [
        [(f"n{i}", "Relu", "forward", t) for i, t in enumerate(node_seconds)]
        for _ in range(repeats)
    ]


def test_node_times_that_add_up_to_the_step_carry_no_warning():
    result = layer_breakdown(_runs(0.004, 0.005), 0.0095, executor="x", mode="inference")
    assert result.agrees and result.note == ""
    assert result.node_sum == pytest.approx(0.009)
    assert [n.node for n in result.nodes] == ["n1", "n0"]


def test_node_times_twenty_times_the_step_are_flagged():
    result = layer_breakdown(_runs(0.1, 0.1), 0.01, executor="torch", mode="inference")
    assert not result.agrees
    assert "add up to 200 ms, 1900% more than the measured step of 10 ms" in result.note
    assert "do not trust" in result.note


def test_forward_and_backward_of_a_node_are_kept_apart():
    runs = [[("n", "Gemm", "forward", 0.001), ("n", "Gemm", "backward", 0.002)]] * 3
    result = layer_breakdown(runs, 0.003, executor="numpy", mode="train-step")
    assert {(n.direction, n.median) for n in result.nodes} == {
        ("forward", 0.001), ("backward", 0.002),
    }  # fmt: skip
    assert result.note == ""


def test_a_training_step_without_backward_nodes_says_so():
    result = layer_breakdown(_runs(0.001), 0.004, executor="torch", mode="train-step")
    assert "breaks down the forward nodes only" in result.note


class _Silent(GraphExecutor):
    """An executor that publishes no node events."""

    name = "silent"

    def inference(self, feeds):
        return {}


class _Traced(_Silent):
    name = "traced"

    def inference(self, feeds):
        with get_bus().span(GRAPH_NODE, level=1, node="r", op_type="Relu"):
            pass
        return {}


def test_an_executor_without_node_events_says_it_cannot_break_down():
    network = Network(_relu_model(["N", 4]))
    feeds = make_feeds(network, 2)
    work = NetworkWorkload("relu", "inference", network, "", feeds, 2)
    silent = _Silent(network)
    runs = node_runs(silent, silent.prepare_inference(feeds), work)
    result = layer_breakdown(runs, 0.001, executor="silent", mode="inference")
    assert result.nodes == []
    assert "the silent executor cannot break a step down per node" in result.note


def test_node_events_are_collected_per_run_after_a_warm_up():
    network = Network(_relu_model(["N", 4]))
    feeds = make_feeds(network, 2)
    work = NetworkWorkload("relu", "inference", network, "", feeds, 2)
    traced = _Traced(network)
    runs = node_runs(traced, traced.prepare_inference(feeds), work)
    assert len(runs) == BREAKDOWN_REPEATS
    assert all([(node, op) for node, op, _, _ in r] == [("r", "Relu")] for r in runs)
