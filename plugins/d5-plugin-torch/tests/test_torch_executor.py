"""The torch executor against the numpy reference executor: outputs and gradients on
small and zoo networks, the onnx package's light models, errors, events, prepared steps."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from d5_plugin_torch.executor import TorchExecutor
from onnx import TensorProto, helper

from d5core.api import GRAPH_NODE, UsageError, use_bus
from d5core.onnx.network import Network
from d5core.testing.networks import cnn, feeds_for, mlp
from d5core.testing.reference_agreement import ReferenceAgreementTests


class TestTorchExecutorAgreesWithTheReference(ReferenceAgreementTests):
    """Outputs, gradients and running statistics on small, zoo and light models."""

    executor = TorchExecutor
    exact_dtypes = False
    light_model_seconds = 30.0


def test_unsupported_operator_is_one_line_usage_error() -> None:
    model = mlp(loss=False)
    model.graph.node[1].op_type = "StringNormalizer"
    name = Network(model).nodes[1].name
    with pytest.raises(UsageError, match=rf"operator 'StringNormalizer' \(node '{name}'\)") as info:
        TorchExecutor(model)
    assert "\n" not in str(info.value)


def test_a_fed_shape_input_is_read_when_the_node_runs() -> None:
    model = cnn(loss=False)
    constant = Network(model).parameters[model.graph.node[8].input[1]]
    model.graph.input.append(helper.make_tensor_value_info("shape2", TensorProto.INT64, [2]))
    model.graph.node[8].input[1] = "shape2"
    ex = TorchExecutor(model)
    feeds = feeds_for(cnn(loss=False))
    fixed = TorchExecutor(cnn(loss=False)).inference(feeds)
    fed = ex.inference({**feeds, "shape2": np.asarray(constant)})
    for name, value in fixed.items():
        np.testing.assert_array_equal(fed[name], value)


def test_graph_node_events_only_when_subscribed(monkeypatch: pytest.MonkeyPatch) -> None:
    model = cnn()
    feeds = feeds_for(model)
    ex = TorchExecutor(model)
    with use_bus() as bus:
        events = []
        unsubscribe = bus.subscribe(GRAPH_NODE + ".end", events.append)
        ex.inference(feeds)
        assert [e.payload["node"] for e in events] == [n.name for n in ex._graph.nodes]
        assert {e.payload["op_type"] for e in events} >= {"Conv", "LRN", "Gemm"}
        unsubscribe()

        def no_span(*args, **kwargs):
            raise AssertionError("span built with nobody listening")

        monkeypatch.setattr(type(bus), "span", no_span)
        ex.inference(feeds)
        ex.inference_and_backprop(feeds, "loss")


def test_prepared_callables_run_torch_only_and_parameters_update_in_place() -> None:
    model = mlp()
    feeds = feeds_for(model)
    ex = TorchExecutor(model)
    run = ex.prepare_inference(feeds)
    step = ex.prepare_train_step(feeds, "loss")
    env = run()
    assert isinstance(env["scores"], torch.Tensor)
    _, grads = step()
    assert all(isinstance(g, torch.Tensor) for g in grads)
    params = ex.get_parameters()
    ex.set_parameters({"w3": params["w3"] * 2})
    np.testing.assert_allclose(ex.get_parameters()["w3"], params["w3"] * 2)
    np.testing.assert_allclose(run()["scores"].numpy(), ex.inference(feeds)["scores"], rtol=1e-6)
    with pytest.raises(UsageError, match="no parameter 'nope'"):
        ex.set_parameters({"nope": np.zeros(1)})


def _intermediates(ex: TorchExecutor, env: dict) -> set[str]:
    produced = {o for node in ex._graph.nodes for o in node.output if o}
    return (set(env) & produced) - set(ex._graph.outputs)


def test_values_are_dropped_after_their_last_reader_and_outputs_kept() -> None:
    """As eager code lets its temporaries go: the allocator reuses their memory at once
    (kept to the end, a resnet20 forward pass faulted in fresh pages and ran 1.6x slower
    than torch.nn)."""
    from d5core.testing.executors import build_network, make_feeds, with_loss

    net, loss = with_loss(build_network("resnet20", input_shape=(3, 8, 8), classes=4, seed=0))
    feeds = make_feeds(net, 2, seed=0)
    ex = TorchExecutor(net)
    env = ex.prepare_inference(feeds)()
    assert isinstance(env, dict) and set(ex._graph.outputs) <= set(env)
    assert _intermediates(ex, env) == set()
    train_env, _ = ex.prepare_train_step(feeds, loss)()
    assert loss in train_env and _intermediates(ex, train_env) <= {loss}
    with use_bus() as bus:  # the per-node (breakdown) path drops them too
        bus.subscribe(GRAPH_NODE + ".end", lambda event: None)
        assert _intermediates(ex, ex.prepare_inference(feeds)()) == set()
    np.testing.assert_array_equal(ex.inference(feeds)["output"], env["output"].numpy())


def test_an_intermediate_loss_survives_the_release() -> None:
    """The loss may be any tensor of the network, also one a later node reads."""
    model = mlp()
    ex = TorchExecutor(model)
    feeds = feeds_for(model)
    hidden = next(o for node in ex._graph.nodes for o in node.output
                  if o not in ex._graph.outputs)  # fmt: skip
    env, grads = ex.prepare_train_step(feeds, hidden)()
    assert hidden in env and grads
