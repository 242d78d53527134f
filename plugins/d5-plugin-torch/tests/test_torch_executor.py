"""The torch executor against the numpy reference executor: outputs and gradients on
small and zoo networks, the onnx package's light models, errors, events, prepared steps."""

from __future__ import annotations

import os
import time

import numpy as np
import onnx
import pytest
import torch
from d5_plugin_torch.executor import TorchExecutor
from onnx import TensorProto, helper, numpy_helper

from d5core.bus import GRAPH_NODE, use_bus
from d5core.errors import UsageError
from d5core.networks.network import Network

reference = pytest.importorskip(
    "d5_plugin_numpy.executor",
    reason="comparing needs d5's reference executor: pip install -e plugins/d5-plugin-numpy",
)

# -- small models built with onnx.helper (the zoo's are used when it exists) -------

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")


def _init(rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float = 0.3):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _model(nodes, inputs, outputs, inits, opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def mlp(batch: int = 4, loss: bool = True) -> onnx.ModelProto:
    """x (N, 6) -> Gemm -> Tanh -> Gemm -> Relu -> MatMul+Add -> scores (N, 3) [-> loss]."""
    rng = np.random.default_rng(1)
    inits = [
        _init(rng, "w1", (8, 6)),
        _init(rng, "b1", (8,)),
        _init(rng, "w2", (8, 8)),
        _init(rng, "b2", (8,)),
        _init(rng, "w3", (8, 3)),
        _init(rng, "b3", (3,)),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "w1", "b1"], ["h1"], transB=1),
        helper.make_node("Tanh", ["h1"], ["a1"]),
        helper.make_node("Gemm", ["a1", "w2", "b2"], ["h2"], transB=1),
        helper.make_node("Sigmoid", ["h2"], ["a2"]),
        helper.make_node("Add", ["a2", "a1"], ["a3"]),  # a1 used twice: gradients add up
        helper.make_node("MatMul", ["a3", "w3"], ["m"]),
        helper.make_node("Add", ["m", "b3"], ["scores"]),
    ]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 6])]
    outs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, [batch, 3])]
    if loss:
        nodes.append(
            helper.make_node(
                "SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss"], reduction="mean"
            )
        )
        ins.append(helper.make_tensor_value_info("labels", TensorProto.INT64, [batch]))
        outs.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    return _model(nodes, ins, outs, inits)


def cnn(batch: int = 2, loss: bool = True) -> onnx.ModelProto:
    """Conv-BN-Relu-MaxPool, a residual Conv, LRN, AveragePool, Flatten, Gemm, Softmax."""
    rng = np.random.default_rng(2)
    inits = [
        _init(rng, "cw", (4, 3, 3, 3)),
        _init(rng, "cb", (4,)),
        _init(rng, "s", (4,)),
        _init(rng, "bb", (4,)),
        _init(rng, "mu", (4,), 0.1),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 4).astype(np.float32), "var"),
        _init(rng, "cw2", (4, 4, 3, 3)),
        _init(rng, "fw", (5, 16)),
        _init(rng, "fb", (5,)),
        numpy_helper.from_array(np.array([batch, -1], np.int64), "shape"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "s", "bb", "mu", "var"], ["n1"]),
        helper.make_node("Relu", ["n1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "cw2"], ["c2"], pads=[1, 0, 1, 2], strides=[1, 1]),
        helper.make_node("Sum", ["c2", "p1", "p1"], ["r2"]),
        helper.make_node("LRN", ["r2"], ["l2"], size=3, alpha=0.2, beta=0.75, bias=1.5),
        helper.make_node("AveragePool", ["l2"], ["p2"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Reshape", ["p2", "shape"], ["f"]),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["scores"], transB=1),
        helper.make_node("Softmax", ["scores"], ["prob"]),
    ]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])]
    outs = [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [batch, 5])]
    if loss:
        nodes.append(helper.make_node("SoftmaxCrossEntropyLoss", ["scores", "labels"], ["loss"]))
        ins.append(helper.make_tensor_value_info("labels", TensorProto.INT64, [batch]))
        outs.append(helper.make_tensor_value_info("loss", TensorProto.FLOAT, []))
    return _model(nodes, ins, outs, inits)


def legacy() -> onnx.ModelProto:
    """Opset 9: ConstantOfShape weights, Unsqueeze/Squeeze axes attributes, Dropout ratio,
    BatchNormalization, a Constant, and Softmax coerced to 2-D at axis 1."""
    rng = np.random.default_rng(3)
    inits = [
        numpy_helper.from_array(np.array([3], np.int64), "s_shape"),
        _init(rng, "w", (3, 3, 1, 1)),
    ]
    value = numpy_helper.from_array(np.array([0.5], np.float32))
    nodes = [
        helper.make_node("ConstantOfShape", ["s_shape"], ["scale"], value=value),
        helper.make_node(
            "Constant",
            [],
            ["bias"],
            value=numpy_helper.from_array(np.array([0.1, -0.2, 0.3], np.float32)),
        ),
        helper.make_node("Unsqueeze", ["bias"], ["b4"], axes=[0, 2, 3]),
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Add", ["c", "b4"], ["c2"]),
        helper.make_node(
            "BatchNormalization", ["c2", "scale", "bias", "bias", "scale"], ["n"], epsilon=1e-3
        ),
        helper.make_node("Dropout", ["n"], ["d"], ratio=0.3),
        helper.make_node("Softmax", ["d"], ["sm"], axis=1),
        helper.make_node("Squeeze", ["sm"], ["out"], axes=[3]),
    ]
    ins = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4, 1])]
    outs = [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3, 4])]
    model = _model(nodes, ins, outs, inits, opset=9)
    model.ir_version = 4
    return model


def feeds_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for v in model.graph.input:
        if v.name in inits:
            continue
        shape = [d.dim_value for d in v.type.tensor_type.shape.dim]
        if v.type.tensor_type.elem_type == TensorProto.INT64:
            feeds[v.name] = rng.integers(0, 3, shape).astype(np.int64)
        else:
            feeds[v.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def light(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray], np.ndarray]:
    """A light model of the onnx package, its input (as onnx's runner makes it), its
    expected output."""
    model = onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))
    expected = numpy_helper.to_array(
        onnx.load_tensor(os.path.join(LIGHT, f"light_{name}_output_0.pb"))
    )
    inits = {i.name for i in model.graph.initializer}
    (x,) = [v for v in model.graph.input if v.name not in inits]
    shape = [d.dim_value or 1 for d in x.type.tensor_type.shape.dim]
    n = int(np.prod(shape))
    return model, {x.name: (np.arange(n).reshape(shape) / n).astype(np.float32)}, expected


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


def float64_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose float32 initializers and values are float64."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for i, t in enumerate(m.graph.initializer):
        a = numpy_helper.to_array(t)
        if a.dtype == np.float32:
            m.graph.initializer[i].CopyFrom(numpy_helper.from_array(a.astype(np.float64), t.name))
    for v in list(m.graph.input) + list(m.graph.output) + list(m.graph.value_info):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.DOUBLE
    return m


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
    zoo = pytest.importorskip("d5core.networks.zoo")
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
