"""The torch executor against the numpy reference executor: outputs and gradients on
small and zoo networks, the onnx package's light models, errors, events, prepared steps."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
from d5_plugin_numpy import executor as reference
from d5_plugin_torch.executor import TorchExecutor
from onnx import TensorProto, helper

from d5core.bus import GRAPH_NODE, use_bus
from d5core.errors import UsageError
from d5core.networks import zoo
from d5core.networks.network import Network
from d5core.testing.networks import cnn, feeds_for, float64_model, legacy, light, mlp

LIGHT_MODELS = [
    "resnet50",
    "squeezenet",
    "bvlc_alexnet",
    "densenet121",
    "inception_v1",
    "inception_v2",
    "shufflenet",
    "vgg19",
    "zfnet512",
]


def _compare(net, feeds: dict[str, np.ndarray], loss: str | None, rel: float = 2e-3) -> None:
    ref, ex = reference.NumpyExecutor(net), TorchExecutor(net)
    want, got = ref.inference(feeds), ex.inference(feeds)
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=name)
    if loss is None:
        return
    (w_out, w_grads), (g_out, g_grads) = (
        ref.inference_and_backprop(feeds, loss),
        ex.inference_and_backprop(feeds, loss),
    )
    np.testing.assert_allclose(g_out[loss], w_out[loss], rtol=1e-4, atol=1e-5)
    assert set(g_grads) == set(w_grads)
    for name, w in w_grads.items():
        err = float(np.linalg.norm(g_grads[name] - w))
        assert err <= rel * float(np.linalg.norm(w)) + 1e-6, (name, err)
    for name, value in ref.running_stats.items():
        np.testing.assert_allclose(ex.running_stats[name].numpy(), value, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("build", [mlp, cnn, legacy], ids=["mlp", "cnn", "legacy"])
def test_matches_numpy_executor(build) -> None:
    model = build()
    loss = "loss" if any(o.name == "loss" for o in model.graph.output) else None
    _compare(model, feeds_for(model), loss)


@pytest.mark.parametrize("name", ["mlp", "lenet5", "resnet20", "vgg"])
def test_zoo_matches_numpy_executor(name: str) -> None:
    net = Network(zoo.ZOO[name](batch=2))
    loss = net.add_loss(net.outputs[0].name)
    rng = np.random.default_rng(0)
    feeds = {}
    for v in net.inputs:
        shape = [d if isinstance(d, int) and d > 0 else 2 for d in v.shape]
        feeds[v.name] = (
            rng.integers(0, 10, shape).astype(np.int64)
            if v.name == "labels"
            else rng.standard_normal(shape).astype(np.float32)
        )
    _compare(net, feeds, None)
    # gradients in float64: through deep batch-2 BatchNormalization in training mode,
    # float32 rounding alone moves resnet20's first gradients by ~1% (relative L2)
    net64 = Network(float64_model(net.model), check=False)
    feeds64 = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()}
    _compare(net64, feeds64, loss, rel=1e-9)


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_models_match_expected_output(name: str) -> None:
    model, feeds, expected = light(name)
    start = time.perf_counter()
    out = TorchExecutor(model).inference(feeds)
    assert time.perf_counter() - start < 30
    (got,) = out.values()
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)


def test_unsupported_operator_is_one_line_usage_error() -> None:
    model = mlp(loss=False)
    model.graph.node[1].op_type = "Erf"
    name = Network(model).nodes[1].name
    with pytest.raises(UsageError, match=rf"operator 'Erf' \(node '{name}'\)") as info:
        TorchExecutor(model)
    assert "\n" not in str(info.value)


def test_non_constant_shape_input_is_rejected_at_construction() -> None:
    model = cnn(loss=False)
    model.graph.input.append(helper.make_tensor_value_info("shape2", TensorProto.INT64, [2]))
    model.graph.node[8].input[1] = "shape2"
    with pytest.raises(UsageError, match="must be a constant"):
        TorchExecutor(model)


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
