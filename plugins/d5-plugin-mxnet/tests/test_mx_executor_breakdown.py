"""Per-node times of the MXNet executor (``d5 bench net --breakdown``): while the bus
wants ``graph.node`` events, a prepared callable runs the nodes one by one, each in a
span that waits for MXNet's engine; otherwise it runs the compiled graph and publishes
nothing."""

from __future__ import annotations

from typing import Any

from d5_plugin_mxnet.executor import MXNetExecutor

from d5core.api import GRAPH_NODE, use_bus
from d5core.testing.executors import (
    build_network,
    layer_breakdown,
    make_feeds,
    traced_node_times,
    with_loss,
)
from d5core.testing.networks import cnn, feeds_for


def test_inference_events_name_each_node_once_in_graph_order() -> None:
    model = cnn()
    ex = MXNetExecutor(model)
    run: Any = ex.prepare_inference(feeds_for(model))
    runs = traced_node_times(run, repeats=2)
    names = [s.name for s in ex._steps[False]]
    assert len(runs) == 2
    for events in runs:
        assert [node for node, *_ in events] == names
        assert {direction for _, _, direction, _ in events} == {"forward"}
        assert all(seconds > 0 for *_, seconds in events)
    assert run()["prob"].shape == (2, 5)


def test_train_step_breaks_down_the_forward_nodes_and_still_computes_gradients() -> None:
    net, loss = with_loss(build_network("lenet5", seed=0))
    feeds = make_feeds(net, 2, seed=0)
    ex = MXNetExecutor(net)
    step: Any = ex.prepare_train_step(feeds, loss)
    runs = traced_node_times(step, repeats=2)
    assert [n for n, *_ in runs[0]] == [node.name for node in net.nodes]
    breakdown = layer_breakdown(runs, 1.0, executor="mxnet", mode="train-step")
    assert "forward nodes only" in breakdown.note
    with use_bus() as bus:
        bus.subscribe(GRAPH_NODE + ".end", lambda event: None)
        _, grads = step()
    _, want = ex.inference_and_backprop(feeds, loss)
    for name, grad in zip(net.trainable, grads, strict=True):
        assert abs(grad.asnumpy() - want[name]).max() < 1e-6


def test_nothing_is_published_when_nobody_listens_to_node_ends() -> None:
    model = cnn(loss=False)
    ex = MXNetExecutor(model)
    run: Any = ex.prepare_inference(feeds_for(model))
    seen: list[Any] = []
    with use_bus() as bus:
        bus.subscribe(GRAPH_NODE + ".begin", seen.append)  # not the end event
        run()
    assert seen == []
