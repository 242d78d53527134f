"""The torch executor follows ONNX where torch's defaults differ: integer Div truncates
in the inputs' type, unsigned integers wrap, Add/Sub/Mul/Div of opsets before 7 honour
``broadcast``/``axis``, and Dropout in training mode applies (and outputs) the
reference's mask, so it agrees with the numpy reference executor. The cases are d5's
executor kit, :mod:`d5core.testing.onnx_semantics`."""

from __future__ import annotations

from d5_plugin_torch.executor import TorchExecutor

from d5core.testing.onnx_semantics import OnnxSemanticsTests


class TestTorchExecutorFollowsOnnx(OnnxSemanticsTests):
    executor = TorchExecutor
