"""The TensorFlow executor follows ONNX where TensorFlow's own operators differ:
integer Div truncates in the inputs' type, unsigned integers wrap, Add/Sub/Mul/Div of
opsets before 7 honour ``broadcast``/``axis``, and Dropout in training mode applies (and
outputs) the reference's mask, also on a channels-last activation, so it agrees with
the numpy reference executor. The shared cases are d5's executor kit,
:mod:`d5core.testing.onnx_semantics`."""

from __future__ import annotations

import numpy as np
from d5_plugin_tensorflow.executor import TensorFlowExecutor
from onnx import TensorProto, helper, numpy_helper

from d5core.testing.onnx_semantics import OnnxSemanticsTests, reference_executor


class TestTensorFlowExecutorFollowsOnnx(OnnxSemanticsTests):
    executor = TensorFlowExecutor

    def test_training_dropout_on_a_channels_last_activation_keeps_the_reference_mask(
        self,
    ) -> None:
        """A convolution's output is channels-last inside the graph: the mask is the
        reference's, laid out to match, and comes out in ONNX layout."""
        rng = np.random.default_rng(7)
        w = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
        ratio = numpy_helper.from_array(np.array(0.3, np.float32))
        nodes = [
            helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
            helper.make_node("Constant", [], ["ratio"], value=ratio),
            helper.make_node("Dropout", ["c", "ratio"], ["y", "mask"], name="drop", seed=3),
            helper.make_node("Relu", ["y"], ["r"], name="relu"),
        ]
        graph = helper.make_graph(
            nodes,
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, (2, 3, 5, 6))],
            [
                helper.make_tensor_value_info("r", TensorProto.FLOAT, (2, 4, 5, 6)),
                helper.make_tensor_value_info("mask", TensorProto.BOOL, (2, 4, 5, 6)),
            ],
            [w],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        x = rng.standard_normal((2, 3, 5, 6)).astype(np.float32)
        got, got_grads = self.executor(model).inference_and_backprop({"x": x}, "r")
        want, want_grads = reference_executor(model).inference_and_backprop({"x": x}, "r")
        np.testing.assert_array_equal(got["mask"], want["mask"])
        np.testing.assert_allclose(got["r"], want["r"], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_grads["w"], want_grads["w"], rtol=1e-4, atol=1e-5)
