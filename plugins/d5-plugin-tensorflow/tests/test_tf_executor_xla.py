"""The executor compiled with XLA (``tensorflow-xla``, ``jit_compile=True``): same
results as the plain graph, training through MaxPool, and a node XLA refuses named in
a one-line UsageError."""

from __future__ import annotations

import numpy as np
import pytest
from d5_plugin_numpy.executor import NumpyExecutor
from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.executor import TensorFlowExecutor, TensorFlowXLAExecutor

from d5core.api import UsageError
from d5core.testing.executors import build_network, make_feeds, with_loss

tf = tensorflow()


@pytest.fixture(scope="module")
def lenet() -> tuple[object, str, dict[str, np.ndarray]]:
    net, loss = with_loss(build_network("lenet5", seed=0))
    return net, loss, make_feeds(net, 4, seed=3)


def test_xla_matches_the_plain_graph_and_the_reference(lenet) -> None:
    net, loss, feeds = lenet
    xla = TensorFlowXLAExecutor(net)
    assert xla.jit_compile and xla.name == "tensorflow-xla"
    plain = TensorFlowExecutor(net)
    ref = NumpyExecutor(net)
    for name, want in ref.inference(feeds).items():
        np.testing.assert_allclose(xla.inference(feeds)[name], want, rtol=1e-4, atol=1e-5)
    _, grads = xla.inference_and_backprop(feeds, loss)  # MaxPool's gradient compiles
    _, want_grads = plain.inference_and_backprop(feeds, loss)
    for name, want in want_grads.items():
        np.testing.assert_allclose(grads[name], want, rtol=1e-4, atol=1e-5, err_msg=name)


def test_xla_max_pool_routes_ties_to_the_first_maximum_as_the_reference() -> None:
    from onnx import TensorProto, helper, numpy_helper

    ties = np.array([[[[1, 1, 0], [1, 2, 2], [0, 2, 1]]]], np.float32)
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], pads=[1, 1, 0, 0])],
        "g",
        [],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, (1, 1, 3, 3))],
        [numpy_helper.from_array(ties, "x")],  # a parameter: its gradient shows the routing
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    got = TensorFlowXLAExecutor(model).inference_and_backprop({}, "y")
    want = NumpyExecutor(model).inference_and_backprop({}, "y")
    np.testing.assert_array_equal(got[0]["y"], want[0]["y"])
    np.testing.assert_array_equal(got[1]["x"], want[1]["x"])
    assert want[1]["x"].sum() == 9 and (want[1]["x"] > 0).sum() < 9  # ties were routed


def test_a_node_xla_refuses_is_named_in_one_line(lenet) -> None:
    net, _, feeds = lenet
    ex = TensorFlowXLAExecutor(net)
    relu = next(n for n in ex._programs[False].nodes if n.op_type == "Relu")

    def through_python(x):  # an op XLA has no kernel for
        y = tf.numpy_function(lambda v: v, [x], x.dtype)
        y.set_shape(x.shape)
        return (y,)

    relu.fn, relu.cl = through_python, None
    with pytest.raises(UsageError) as info:
        ex.prepare_inference(feeds)
    message = str(info.value)
    assert message.startswith(f"XLA cannot compile node {relu.name!r} (Relu): TensorFlow op ")
    assert "use the tensorflow executor" in message and "\n" not in message
    # the same node runs in the plain graph
    plain = TensorFlowExecutor(net)
    node = next(n for n in plain._programs[False].nodes if n.name == relu.name)
    node.fn, node.cl = through_python, None
    assert np.isfinite(plain.inference(feeds)[net.outputs[0].name]).all()


def test_the_jit_compile_option_of_the_plain_executor(lenet) -> None:
    net, _, feeds = lenet
    ex = TensorFlowExecutor(net, jit_compile=True)
    assert ex.jit_compile and ex.name == "tensorflow"
    run = ex.prepare_inference(feeds)
    np.testing.assert_allclose(
        run()[net.outputs[0].name].numpy(),
        TensorFlowExecutor(net).inference(feeds)[net.outputs[0].name],
        rtol=1e-4,
        atol=1e-5,
    )
