"""The torch executor on the ONNX corners an audit found it wrong on: ConvTranspose
with ``output_shape`` (it cropped the end instead of splitting the padding), opset-6
PRelu with a per-channel slope (it died with a RuntimeError) and BatchNormalization with
``spatial=0`` (a RuntimeError too; now refused in one line)."""

from __future__ import annotations

from d5_plugin_torch.executor import TorchExecutor

from d5core.testing.onnx_corners import OnnxCornerTests


class TestTorchExecutorOnOnnxCorners(OnnxCornerTests):
    executor = TorchExecutor
    may_refuse = frozenset({"batch_norm_spatial_0"})
