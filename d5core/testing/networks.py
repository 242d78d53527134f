"""Small ONNX networks for testing graph executors, shared by d5's executor plugins.

They are built with ``onnx.helper`` and exercise what an executor must get right: a tensor
used twice (gradients add up), convolutions with BatchNormalization, LRN and pooling, a
cross-entropy loss, and an opset-9 graph whose constants, axes and ratios are attributes.
Import this module in tests only: it imports onnx.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from d5core.levels.networks import GraphExecutor
from d5core.lv1.zoo import LIGHT_MODELS as _LIGHT_PATHS
from d5core.lv1.zoo import light_inputs
from d5core.onnx.network import Network

__all__ = [
    "assert_gradients_match_central_differences",
    "assert_matches_light_output",
    "cnn",
    "feeds_for",
    "float64_model",
    "legacy",
    "light",
    "loss_over_outputs",
    "mlp",
]


def _init(
    rng: np.random.Generator, name: str, shape: tuple[int, ...], scale: float = 0.3
) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[onnx.ValueInfoProto],
    outputs: Sequence[onnx.ValueInfoProto],
    inits: Sequence[onnx.TensorProto],
    opset: int = 17,
) -> onnx.ModelProto:
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
    """A light model of the onnx package, its input (as onnx's runner makes it), and its
    expected output; ``name`` as in the file name (``resnet50``, ``bvlc_alexnet``, ...)."""
    path = next(
        (p for p in _LIGHT_PATHS.values() if os.path.basename(p) == f"light_{name}.onnx"), None
    )
    if path is None:
        raise KeyError(f"no light model named {name!r}")
    model = onnx.load(path)
    expected = numpy_helper.to_array(onnx.load_tensor(path.replace(".onnx", "_output_0.pb")))
    return model, light_inputs(model), expected


def assert_matches_light_output(
    run: Callable[[onnx.ModelProto, dict[str, np.ndarray]], np.ndarray], name: str
) -> None:
    """Check an executor on the light model ``name``: ``run(model, feeds)`` returns its one
    output, compared with the expected output at ``rtol=1e-3, atol=1e-4``.

    One case is compared before its last node instead. Where the expected output is a
    uniform Softmax (squeezenet: logits near 1e10, all equal in onnx's run), its value is
    decided by rounding: logits one float32 unit apart (1024 at that size) turn it into a
    one-hot, and the summation order of numpy 1.23 or of another framework does that. There
    the logits feeding the Softmax are run and must agree to ``1e-6`` of their size, which
    is what the uniform output says of them."""
    model, feeds, expected = light(name)
    last = model.graph.node[-1]
    flat = expected.reshape(expected.shape[0], -1)
    if last.op_type == "Softmax" and np.ptp(flat, axis=1).max() < 1e-7:
        logits_model = onnx.ModelProto()
        logits_model.CopyFrom(model)
        del logits_model.graph.node[-1]
        del logits_model.graph.output[:]
        logits_model.graph.output.append(
            helper.make_tensor_value_info(last.input[0], TensorProto.FLOAT, list(expected.shape))
        )
        logits = np.asarray(run(logits_model, feeds), dtype=np.float64).reshape(flat.shape)
        spread = np.ptp(logits, axis=1)
        size = np.abs(logits).max(axis=1)
        assert np.all(spread <= 1e-6 * size), (
            f"{name}: logits before the Softmax differ by {spread.max():.4g} at size "
            f"{size.max():.4g}; the expected uniform output needs them equal"
        )
        return
    np.testing.assert_allclose(run(model, feeds), expected, rtol=1e-3, atol=1e-4)


def float64_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose float32 initializers and values are float64."""
    return Network(model, check=False).as_float64().model


def loss_over_outputs(
    outputs: Sequence[str], shapes: Sequence[tuple[int, ...]], rng: np.random.Generator
) -> tuple[list[onnx.NodeProto], str]:
    """Nodes computing ``sum_k sum(c_k * output_k)`` with random constants ``c_k`` of each
    output's shape (float64), so every element of every output gets its own cotangent;
    and the name of the scalar they compute (``"loss"``)."""
    nodes, terms = [], []
    for k, (name, shape) in enumerate(zip(outputs, shapes, strict=True)):
        coef = numpy_helper.from_array(rng.standard_normal(shape), f"coef{k}")
        nodes += [
            helper.make_node("Constant", [], [f"c{k}"], value=coef),
            helper.make_node("Mul", [name, f"c{k}"], [f"m{k}"]),
            helper.make_node("ReduceSum", [f"m{k}"], [f"s{k}"], keepdims=0),
        ]
        terms.append(f"s{k}")
    nodes.append(helper.make_node("Sum", terms, ["loss"]))
    return nodes, "loss"


def _central_differences(
    executor: GraphExecutor, feeds: dict[str, np.ndarray], name: str, loss: str, eps: float
) -> np.ndarray:
    """d loss / d parameter ``name``, element by element, by central differences."""
    base = executor.get_parameters()[name]
    grad = np.zeros_like(base)
    for i in np.ndindex(base.shape):
        values = []
        for step in (eps, -eps):
            p = base.copy()
            p[i] += step
            executor.set_parameters({name: p})
            values.append(float(executor.inference(feeds)[loss]))
        grad[i] = (values[0] - values[1]) / (2 * eps)
    executor.set_parameters({name: base})
    return grad


def assert_gradients_match_central_differences(
    executor: GraphExecutor,
    feeds: dict[str, np.ndarray],
    loss: str = "loss",
    *,
    eps: float = 1e-6,
    rtol: float = 1e-6,
    atol: float = 1e-7,
) -> dict[str, np.ndarray]:
    """Backprop ``loss`` through a float64 ``executor`` (a d5 ``GraphExecutor``) and
    check the gradient of every trainable parameter, element by element, against
    central differences of its inference; return the gradients. For tiny networks only:
    it runs two inferences per parameter element."""
    _, grads = executor.inference_and_backprop(feeds, loss)
    assert grads and set(grads) == set(executor.network.trainable)
    for name, g in grads.items():
        np.testing.assert_allclose(
            g,
            _central_differences(executor, feeds, name, loss, eps),
            rtol=rtol,
            atol=atol,
            err_msg=name,
        )
    return grads
