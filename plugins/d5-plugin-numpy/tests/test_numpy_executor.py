"""The numpy reference executor: against onnx's ReferenceEvaluator, central differences,
the onnx package's light models, opset adaptation, errors and graph-node events."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from d5_plugin_numpy.executor import NumpyExecutor
from onnx import helper
from onnx.reference import ReferenceEvaluator

from d5core.api import GRAPH_NODE, UsageError, use_bus
from d5core.onnx.network import Network
from d5core.testing.executors import ZOO_MODELS
from d5core.testing.networks import (
    assert_matches_light_output,
    cnn,
    feeds_for,
    float64_model,
    legacy,
    mlp,
)
from d5core.testing.reference_agreement import LIGHT_MODELS


def _zoo_models() -> list[tuple[str, onnx.ModelProto | None]]:
    return [("mlp", mlp()), ("cnn", cnn())]


def _no_lrn(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnx's reference LRN loops over the batch instead of the channels: skip the node;
    its opset-9 BatchNormalization rejects ``spatial``: drop it."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for node in m.graph.node:
        kept = [a for a in node.attribute if a.name != "spatial"]
        del node.attribute[:]
        node.attribute.extend(kept)
        if node.op_type == "LRN":
            node.op_type = "Identity"
            del node.attribute[:]
    return m


@pytest.mark.parametrize("build", [mlp, cnn, legacy], ids=["mlp", "cnn", "legacy"])
def test_inference_matches_onnx_reference(build) -> None:
    original = build()
    model = _no_lrn(original)
    feeds = feeds_for(model)
    got = NumpyExecutor(original if build is legacy else model).inference(feeds)
    if build is legacy:  # onnx's reference ignores opset-9 Softmax's 2-D coercion
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = sess.run(None, feeds)
    else:
        want = ReferenceEvaluator(model).run(None, feeds)
    for out, w in zip(model.graph.output, want, strict=True):
        np.testing.assert_allclose(got[out.name], w, rtol=1e-4, atol=1e-5)


def test_zoo_models_match_onnx_reference() -> None:
    for name in ("mlp", "lenet5", "resnet20"):
        net = Network(ZOO_MODELS[name](batch=2))
        feeds = {
            v.name: np.random.default_rng(0)
            .standard_normal([d if isinstance(d, int) and d > 0 else 2 for d in v.shape])
            .astype(np.float32)
            for v in net.inputs
        }
        got = NumpyExecutor(net).inference(feeds)
        want = ReferenceEvaluator(net.model).run(None, feeds)
        for out, w in zip(net.outputs, want, strict=True):
            np.testing.assert_allclose(got[out.name], w, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("build", [mlp, cnn], ids=["mlp", "cnn"])
def test_gradients_match_central_differences(build) -> None:
    model = float64_model(build())
    feeds = {
        k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds_for(model).items()
    }
    ex = NumpyExecutor(model)
    _, grads = ex.inference_and_backprop(feeds, "loss")
    params = ex.get_parameters()
    assert set(grads) == {n for n, a in params.items() if a.dtype == np.float64}
    rng = np.random.default_rng(5)
    h = 1e-6
    for name, g in grads.items():
        assert g.shape == params[name].shape
        flat = params[name].reshape(-1)
        picks = rng.choice(flat.size, size=min(flat.size, 6), replace=False)
        for j in picks:
            values = []
            for sign in (1, -1):
                p = flat.copy()
                p[j] += sign * h
                ex.set_parameters({name: p.reshape(params[name].shape)})
                values.append(float(ex.inference_and_backprop(feeds, "loss")[0]["loss"]))
            ex.set_parameters({name: params[name]})
            numeric = (values[0] - values[1]) / (2 * h)
            assert abs(g.reshape(-1)[j] - numeric) <= 1e-6 + 1e-5 * abs(numeric), (name, j)


def test_training_mode_keeps_running_stats_until_applied() -> None:
    model = cnn()
    ex = NumpyExecutor(model)
    before = ex.get_parameters()
    ex.inference_and_backprop(feeds_for(model), "loss")
    assert set(ex.running_stats) == {"mu", "var"}
    np.testing.assert_array_equal(ex.get_parameters()["mu"], before["mu"])
    ex.apply_running_stats()
    np.testing.assert_allclose(ex.get_parameters()["mu"], ex.running_stats["mu"])


@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_models_match_expected_output(name: str) -> None:
    def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> np.ndarray:
        (got,) = NumpyExecutor(model).inference(feeds).values()
        return got

    assert_matches_light_output(run, name)


def test_unsupported_operator_is_one_line_usage_error() -> None:
    # neither d5 nor onnx.reference (the fallback) runs an operator of an unknown domain
    model = mlp(loss=False)
    model.graph.node[1].op_type = "Frobnicate"
    model.graph.node[1].domain = "com.example"
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    name = Network(model).nodes[1].name
    with pytest.raises(
        UsageError, match=rf"operator 'com.example.Frobnicate' \(node '{name}'\)"
    ) as info:
        NumpyExecutor(model)
    assert "\n" not in str(info.value)


def test_bad_attribute_names_the_node_at_construction() -> None:
    model = mlp(loss=False)
    model.graph.node[1].attribute.append(helper.make_attribute("bogus", 1))
    net = Network(model, check=False)
    with pytest.raises(UsageError, match=f"node '{net.nodes[1].name}'"):
        NumpyExecutor(net)


def test_graph_node_events_only_when_subscribed(monkeypatch: pytest.MonkeyPatch) -> None:
    model = cnn()
    feeds = feeds_for(model)
    ex = NumpyExecutor(model)
    with use_bus() as bus:
        events = []
        unsubscribe = bus.subscribe(GRAPH_NODE + ".end", events.append)
        ex.inference(feeds)
        assert [e.payload["node"] for e in events] == [n.name for n in ex._graph.nodes]
        assert events[0].payload["op_type"] == "Conv" and events[0].level == 1
        assert all(e.payload["duration_ns"] >= 0 for e in events)
        unsubscribe()

        def no_span(*args, **kwargs):
            raise AssertionError("span built with nobody listening")

        monkeypatch.setattr(type(bus), "span", no_span)
        ex.inference(feeds)
        ex.inference_and_backprop(feeds, "loss")


def test_prepared_callables_and_parameters() -> None:
    model = mlp()
    feeds = feeds_for(model)
    ex = NumpyExecutor(model)
    out = ex.prepare_inference(feeds)()
    np.testing.assert_array_equal(out["scores"], ex.inference(feeds)["scores"])
    _, grads = ex.prepare_train_step(feeds, "loss")()
    assert set(grads) == {"w1", "b1", "w2", "b2", "w3", "b3"}
    with pytest.raises(UsageError, match="no parameter 'nope'"):
        ex.set_parameters({"nope": np.zeros(1)})
    with pytest.raises(UsageError, match="shape"):
        ex.set_parameters({"b1": np.zeros(3)})
    with pytest.raises(UsageError, match="needs input 'x'"):
        ex.inference({})
