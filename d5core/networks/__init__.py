"""Level 1 networks: ONNX models (:class:`Network`), the model zoo and graph passes."""

from __future__ import annotations

from d5core.networks.network import D5_IR_VERSION, D5_OPSET, Network, ValueInfo

__all__ = ["D5_IR_VERSION", "D5_OPSET", "Network", "ValueInfo"]
