"""d5-plugin-torch's level-0 backend: ONNX operators run by PyTorch.

Registered in the ``d5.operators`` group as ``torch``. Forward passes are native torch
calls, backward passes are torch autograd; both are validated against d5's numpy
reference like any custom operator. Importing this module imports torch, which is why
the plugin module (:mod:`d5_plugin_torch.plugin`) never imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import torch

from d5_plugin_torch.ops import OPERATOR_CLASSES, TorchOperator
from d5_plugin_torch.ops._base import FLOAT_DTYPES, resolve_device
from d5core.onnx import SlottedBackend

__all__ = ["OPERATORS", "TorchBackend", "TorchOperator"]

#: Operator classes by ONNX operator type.
OPERATORS: Mapping[str, type[TorchOperator]] = {cls.op_type: cls for cls in OPERATOR_CLASSES}


class TorchBackend(SlottedBackend[TorchOperator]):
    """PyTorch operators on one device: ``"cpu"`` (the default) or a CUDA device.

    >>> backend = TorchBackend()                 # doctest: +SKIP
    >>> relu = backend.create("Relu", {}, [TensorDescriptor((2, 3))])
    """

    name: ClassVar[str] = "torch"
    dtypes: ClassVar[tuple[str, ...]] = tuple(FLOAT_DTYPES)
    operator_classes = OPERATORS

    def __init__(self, device: str | torch.device = "cpu") -> None:
        self.torch_device = resolve_device(device)
        #: The device operators run on, as passed to the ``d5_synchronize`` hook.
        self.device = str(self.torch_device)

    def instantiate(self, cls: type[Any], attributes: Mapping[str, Any]) -> TorchOperator:
        """A new operator of ``cls`` on this backend's device."""
        op: TorchOperator = cls(attributes, device=self.torch_device)
        return op
