"""The numpy reference executor on the ONNX corners an audit found other executors wrong
on: it computes ConvTranspose with ``output_shape`` and opset-6 PRelu (on onnx.reference)
as ONNX defines them, and refuses BatchNormalization with ``spatial=0``."""

from __future__ import annotations

from d5_plugin_numpy.executor import NumpyExecutor

from d5core.testing.onnx_corners import OnnxCornerTests


class TestNumpyExecutorOnOnnxCorners(OnnxCornerTests):
    executor = NumpyExecutor
    may_refuse = frozenset({"batch_norm_spatial_0"})
