"""The tensorflow executor on the ONNX corners an audit found executors wrong on:
ConvTranspose with ``output_shape`` (it cropped the end instead of splitting the
padding), BatchNormalization with ``spatial=0`` and opset-6 PRelu with a slope numpy
cannot broadcast (both refused in one line)."""

from __future__ import annotations

from d5_plugin_tensorflow.executor import TensorFlowExecutor

from d5core.testing.onnx_corners import OnnxCornerTests


class TestTensorFlowExecutorOnOnnxCorners(OnnxCornerTests):
    executor = TensorFlowExecutor
    may_refuse = frozenset({"batch_norm_spatial_0", "prelu_legacy"})
