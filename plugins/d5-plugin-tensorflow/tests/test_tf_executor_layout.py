"""The tensorflow executor's layouts: convolution weights kept as variables in
TensorFlow's kernel layout (ONNX's layout at the API), and traced graphs that move data
between layouts only where an activation must change layout."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from d5_plugin_numpy import executor as reference
from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.executor import TensorFlowExecutor
from d5_plugin_tensorflow.graph.layout import VariableLayout
from onnx import TensorProto, helper, numpy_helper

from d5core.api import UsageError
from d5core.onnx.network import Network
from d5core.testing.executors import ZOO_MODELS, build_network, make_feeds, with_loss
from d5core.testing.reference_agreement import compare_with_reference, zoo_feeds

tf = tensorflow()


def _conv_model(op: str, weight: tuple[int, ...], shared: bool = False, **attrs: Any) -> Any:
    """x (2, 4, 7, 7) -> ``op`` (weights ``w``, bias ``b``) -> y -> Flatten ->
    SoftmaxCrossEntropyLoss (labels 0 and 5, an initializer) -> loss.
    With ``shared`` the weights are also added to a constant (read by another node)."""
    rng = np.random.default_rng(3)
    out_channels = weight[0] if op == "Conv" else weight[1] * int(attrs.get("group", 1))
    inits = [
        numpy_helper.from_array(rng.standard_normal(weight).astype(np.float32), "w"),
        numpy_helper.from_array(rng.standard_normal(out_channels).astype(np.float32), "b"),
        numpy_helper.from_array(np.array([0, 5], np.int64), "labels"),
    ]
    nodes = [
        helper.make_node(op, ["x", "w", "b"], ["y"], **attrs),
        helper.make_node("Flatten", ["y"], ["flat"]),
        helper.make_node("SoftmaxCrossEntropyLoss", ["flat", "labels"], ["loss"]),
    ]
    outputs = [
        helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"]),
        helper.make_tensor_value_info("loss", TensorProto.FLOAT, []),
    ]
    if shared:
        nodes.append(helper.make_node("Add", ["w", "w"], ["w2"]))
        outputs.append(helper.make_tensor_value_info("w2", TensorProto.FLOAT, list(weight)))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 7, 7])],
        outputs, inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


CASES = {
    "conv": ("Conv", (6, 4, 3, 3), {"pads": [1, 1, 1, 1]}),
    "conv-strided-asymmetric": ("Conv", (6, 4, 3, 2), {"strides": [2, 2], "pads": [1, 0, 0, 1]}),
    "conv-stride2-pad1": ("Conv", (6, 4, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "conv-grouped": ("Conv", (6, 2, 3, 3), {"group": 2}),
    "conv-depthwise": ("Conv", (8, 1, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    "conv-same-upper": ("Conv", (6, 4, 2, 2), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    "conv-transpose": ("ConvTranspose", (4, 3, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
    "conv-transpose-grouped": ("ConvTranspose", (4, 2, 2, 3), {"group": 2, "strides": [2, 1]}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_kernel_variables_are_in_tensorflow_layout_and_results_match_the_reference(
    case: str,
) -> None:
    op, weight, attrs = CASES[case]
    model = _conv_model(op, weight, **attrs)
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 4, 7, 7)).astype(np.float32)}
    ex, ref = TensorFlowExecutor(model), reference.NumpyExecutor(model)
    kh, kw = weight[2:]
    assert tuple(ex.native_parameters()["w"].shape) == (kh, kw, weight[1], weight[0])
    assert ex.native_layouts() == {"w": VariableLayout((2, 3, 1, 0))}
    want_y = ref.inference(feeds)["y"]
    np.testing.assert_allclose(ex.inference(feeds)["y"], want_y, rtol=1e-4, atol=1e-4)
    _, grads = ex.inference_and_backprop(feeds, "loss")
    _, want = ref.inference_and_backprop(feeds, "loss")
    assert grads["w"].shape == weight
    for name in ("w", "b"):
        np.testing.assert_allclose(grads[name], want[name], rtol=1e-3, atol=1e-3, err_msg=name)
    _, native = ex.native_train_step(feeds, "loss")
    np.testing.assert_allclose(native["w"].numpy(), grads["w"].transpose(2, 3, 1, 0), rtol=1e-6)
    np.testing.assert_array_equal(native["b"].numpy(), grads["b"])


def test_parameters_speak_onnx_layout_while_the_variables_are_tensorflows() -> None:
    model = _conv_model("Conv", (6, 4, 3, 2))
    ex = TensorFlowExecutor(model)
    onnx_w = numpy_helper.to_array(model.graph.initializer[0])
    params = ex.get_parameters()
    np.testing.assert_array_equal(params["w"], onnx_w)
    assert params["w"].flags.c_contiguous
    new = np.arange(onnx_w.size, dtype=np.float32).reshape(onnx_w.shape)
    ex.set_parameters({"w": new})
    np.testing.assert_array_equal(ex.get_parameters()["w"], new)
    np.testing.assert_array_equal(ex.native_parameters()["w"].numpy(), new.transpose(2, 3, 1, 0))
    ex.native_parameters()["w"].assign_add(tf.ones((3, 2, 4, 6)))
    np.testing.assert_array_equal(ex.get_parameters()["w"], new + 1)
    with pytest.raises(UsageError, match=r"has shape \(6, 4, 3, 2\), not \(3, 2, 4, 6\)"):
        ex.set_parameters({"w": new.transpose(2, 3, 1, 0)})


def test_a_weight_another_node_reads_stays_in_onnx_layout() -> None:
    model = _conv_model("Conv", (6, 4, 3, 3), shared=True)
    ex = TensorFlowExecutor(model)
    feeds = {"x": np.ones((2, 4, 7, 7), np.float32)}
    assert ex.native_layouts() == {}
    assert tuple(ex.native_parameters()["w"].shape) == (6, 4, 3, 3)
    got, want = ex.inference(feeds), reference.NumpyExecutor(model).inference(feeds)
    for name in ("y", "w2"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-4, atol=1e-4)


def _graph(name: str, training: bool) -> Any:
    net = Network(ZOO_MODELS[name](batch=2))
    if not training:
        ex = TensorFlowExecutor(net)
        feeds = {"input": np.zeros((2, *net.inputs[0].shape[1:]), np.float32)}
        return ex._concrete(False, None, ex._ordered(ex._to_tensors(feeds)), ()).graph
    trained, loss = with_loss(net)
    ex = TensorFlowExecutor(trained)
    args = ex._ordered(ex._to_tensors(make_feeds(trained, 2, seed=0)))
    return ex._concrete(True, loss, args, ()).graph


#: The activations that must change layout, by network: lenet5's input has one channel
#: (its move is a reshape) and its last pooled map goes into a Flatten whose Gemm keeps
#: its weight in the channels-last order (no move); resnet20's input (3 channels) goes
#: into the first Conv, and its pooled (N, 1, 1, C) map into Flatten is a reshape; vgg's
#: input moves, its Flatten does not.
MOVES = {
    "lenet5": [],
    "resnet20": ["n0_conv0/transpose"],
    "vgg": ["n0_conv0/transpose"],
}


@pytest.mark.parametrize("name", sorted(MOVES))
def test_inference_graph_transposes_only_activations_that_change_layout(name: str) -> None:
    """Every Transpose op of the traced graph (none is left for the pruner): no weight
    is transposed, and BatchNormalization and bias parameters broadcast as they are."""
    graph = _graph(name, training=False)
    moved = [op for op in graph.get_operations() if op.type == "Transpose"]
    assert [op.name for op in moved] == MOVES[name]
    assert all(op.inputs[0].op.type != "ReadVariableOp" for op in moved)
    reads = [op for op in graph.get_operations() if op.type == "ReadVariableOp"]
    for read in reads:  # parameters go straight into the ops that use them
        users = {c.type for c in read.outputs[0].consumers()}
        assert not users & {"Transpose", "Reshape"}, (read.name, users)


@pytest.mark.parametrize("name", sorted(MOVES))
def test_train_graph_transposes_only_activations_and_their_gradients(name: str) -> None:
    """The forward moves, the gradient of each but the input's, and the two transposes
    of the gradient of the loss's batched gather (as in TensorFlow's own deterministic
    sparse cross-entropy, which Keras models use)."""
    graph = _graph(name, training=True)
    moved = [op.name for op in graph.get_operations() if op.type == "Transpose"]
    loss = [m for m in moved if "SoftmaxCrossEntropyLoss" in m]
    assert len(loss) == 2 and all(m.startswith("gradient_tape/") for m in loss)
    backward = [f"gradient_tape/{m}/transpose" for m in MOVES[name] if not m.startswith("n0_")]
    assert sorted(set(moved) - set(loss)) == sorted(MOVES[name] + backward)


def test_float32_batchnorm_trains_with_the_fused_kernel_and_matches_the_reference() -> None:
    """In training, channels-last float32 BatchNormalization with enough values per
    channel is TensorFlow's fused op (forward and gradient one op each), smaller ones
    the composed ops; outputs, gradients and running statistics (ONNX's biased variance,
    not the unbiased one the fused op returns) are the reference's either way."""
    graph = _graph("resnet20", training=True)  # batch 2: 2048, 512, 128 values per channel
    types = [op.type for op in graph.get_operations()]
    assert types.count("FusedBatchNormV3") == 7 and types.count("FusedBatchNormGradV3") == 7
    assert "Rsqrt" in types  # the 14 BatchNormalizations of the smaller stages
    net, loss = with_loss(build_network("resnet20", input_shape=(3, 32, 32), classes=10, seed=0))
    compare_with_reference(TensorFlowExecutor, net, zoo_feeds(net, seed=3), loss, rel=1e-3)


def test_a_gemm_after_a_channels_last_flatten_keeps_its_weight_in_that_order() -> None:
    """lenet5's first Gemm reads the Flatten of a channels-last map: its variable holds
    the weight with the K axis in (H, W, C) order, the parameters API still speaks
    ONNX's layout, and the network computes what the reference does."""
    net = Network(ZOO_MODELS["lenet5"](batch=2))
    ex = TensorFlowExecutor(net)
    name = "gemm0.weight"
    onnx_value = net.parameters[name]
    layout = ex.native_layouts()[name]
    assert layout.view is not None and layout.view[1:] == (16, 5, 5)
    variable = ex._vars[name].numpy()
    np.testing.assert_array_equal(variable, layout.to_native(onnx_value))
    assert not np.array_equal(variable, onnx_value)
    np.testing.assert_array_equal(ex.get_parameters()[name], onnx_value)
    changed = onnx_value + 1.0
    ex.set_parameters({name: changed})
    np.testing.assert_array_equal(ex.get_parameters()[name], changed)
    feeds = make_feeds(net, 2, seed=1)
    ref = reference.NumpyExecutor(net)
    ref.set_parameters({name: changed})
    np.testing.assert_allclose(
        ex.inference(feeds)["output"], ref.inference(feeds)["output"], rtol=1e-4, atol=1e-5
    )


def test_a_flatten_whose_output_is_also_read_elsewhere_moves_back_to_onnx_order() -> None:
    """When the flattened values are a graph output too, they must be in ONNX's order:
    the weight keeps ONNX's layout and the Flatten transposes as before."""
    model = ZOO_MODELS["lenet5"](batch=2)
    flatten = next(n for n in model.graph.node if n.op_type == "Flatten")
    model.graph.output.append(
        helper.make_tensor_value_info(flatten.output[0], TensorProto.FLOAT, [2, 400])
    )
    net = Network(model)
    ex = TensorFlowExecutor(net)
    assert "gemm0.weight" not in ex.native_layouts()
    feeds = make_feeds(net, 2, seed=1)
    got, want = ex.inference(feeds), reference.NumpyExecutor(net).inference(feeds)
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-5, err_msg=key)
