"""Translators of ONNX operators into torch calls, grouped by kind, mixed into the torch
graph executor's translator (:mod:`d5_plugin_torch.executor`)."""
