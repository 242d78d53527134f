"""The mxnet executor on the ONNX corners an audit found executors wrong on:
BatchNormalization with ``spatial=0`` (it normalised per channel with per-element
statistics, silently wrong; now refused in one line); ConvTranspose's ``output_shape``
and PRelu, which it refuses."""

from __future__ import annotations

from d5_plugin_mxnet.executor import MXNetExecutor

from d5core.testing.onnx_corners import OnnxCornerTests


class TestMXNetExecutorOnOnnxCorners(OnnxCornerTests):
    executor = MXNetExecutor
    may_refuse = frozenset(
        {"batch_norm_spatial_0", "conv_transpose_output_shape", "prelu", "prelu_legacy"}
    )
