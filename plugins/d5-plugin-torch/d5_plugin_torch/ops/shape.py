"""Shape operators: ``Reshape``, ``Flatten``, ``Transpose``, ``Concat``, ``Squeeze``,
``Unsqueeze``.

Shape and axes inputs are integers that ONNX passes as tensors; they are read into
Python values when the kernel is built, so the timed call is the torch view or copy
alone. Like torch's own, the results of ``Reshape``, ``Flatten``, ``Transpose``,
``Squeeze`` and ``Unsqueeze`` are views where torch can make one. The attribute and
input checks are ONNX's, from :mod:`d5core.onnx`.
"""

from __future__ import annotations

import torch

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5core.onnx import operator_rules as rules

__all__ = ["Concat", "Flatten", "Reshape", "Squeeze", "Transpose", "Unsqueeze"]


class Reshape(rules.ReshapeRules, TorchOperator):
    """ONNX ``Reshape``: ``torch.reshape`` to the resolved shape."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self._target(sig)
        assert target is not None
        reshape = torch.reshape
        return lambda x: (reshape(x, target),)


class Flatten(rules.FlattenRules, TorchOperator):
    """ONNX ``Flatten``: ``torch.reshape`` to two axes."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self._target(sig)
        reshape = torch.reshape
        return lambda x: (reshape(x, target),)


class Transpose(rules.TransposeRules, TorchOperator):
    """ONNX ``Transpose``: ``torch.permute``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        perm = self._perm(sig)
        permute = torch.permute
        return lambda x: (permute(x, perm),)


class Concat(rules.ConcatRules, TorchOperator):
    """ONNX ``Concat``: ``torch.cat``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        cat, axis = torch.cat, self.axis
        return lambda *xs: (cat(xs, axis),)


class Squeeze(rules.SqueezeRules, TorchOperator):
    """ONNX ``Squeeze``: ``torch.squeeze``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        dims = self._dims(sig)
        assert dims is not None
        squeeze = torch.squeeze
        return lambda x: (squeeze(x, dims),)


class Unsqueeze(rules.UnsqueezeRules, TorchOperator):
    """ONNX ``Unsqueeze``: ``torch.unsqueeze`` per new axis."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        dims = self._dims(sig)
        assert dims is not None
        unsqueeze = torch.unsqueeze

        def kernel(x: torch.Tensor) -> tuple[torch.Tensor]:
            for dim in dims:
                x = unsqueeze(x, dim)
            return (x,)

        return kernel
