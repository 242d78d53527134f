"""Shape operators: ``Reshape``, ``Flatten``, ``Transpose``, ``Concat``, ``Squeeze``,
``Unsqueeze``.

Shape and axes inputs are integers that ONNX passes as tensors; they are read into
Python values when the kernel is built, so the timed call is the torch view or copy
alone. Like torch's own, the results of ``Reshape``, ``Flatten``, ``Transpose``,
``Squeeze`` and ``Unsqueeze`` are views where torch can make one.
"""

from __future__ import annotations

import torch

from d5_plugin_torch.ops._base import Kernel, Signature, TorchOperator
from d5core.api import (
    check_concat_shapes,
    flatten_target,
    integer_values,
    onnx_signature,
    reshape_target,
    squeeze_axes,
    transpose_perm,
    unsqueeze_axes,
)

__all__ = ["Concat", "Flatten", "Reshape", "Squeeze", "Transpose", "Unsqueeze"]


class Reshape(TorchOperator):
    """ONNX ``Reshape`` (0 copies the input's dimension unless ``allowzero``; -1 is
    inferred): ``torch.reshape``."""

    op_type = "Reshape"
    slots, attribute_defaults = onnx_signature("Reshape")

    def configure(self) -> None:
        self.allowzero = bool(int(self.attr("allowzero")))

    def _target(self, sig: Signature) -> tuple[int, ...] | None:
        self.require_rank(sig, 1, (1,), what="(the new shape)")
        data, shape = sig.shapes[0], sig.value("shape")
        if not sig.values_known or shape is None or data is None:
            return None
        wanted = integer_values(self.op_type, "shape", shape)
        return reshape_target(data, wanted, allowzero=self.allowzero)

    def check(self, sig: Signature) -> None:
        self._target(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self._target(sig)
        assert target is not None
        reshape = torch.reshape
        return lambda x: (reshape(x, target),)


class Flatten(TorchOperator):
    """ONNX ``Flatten``: a 2-D result split at ``axis``, by ``torch.reshape``."""

    op_type = "Flatten"
    slots, attribute_defaults = onnx_signature("Flatten")

    def _target(self, sig: Signature) -> tuple[int, int]:
        shape = sig.shapes[0]
        assert shape is not None
        return flatten_target(shape, int(self.attr("axis")))

    def check(self, sig: Signature) -> None:
        self._target(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self._target(sig)
        reshape = torch.reshape
        return lambda x: (reshape(x, target),)


class Transpose(TorchOperator):
    """ONNX ``Transpose`` (default: reverse the axes): ``torch.permute``."""

    op_type = "Transpose"
    slots, attribute_defaults = onnx_signature("Transpose")

    def _perm(self, sig: Signature) -> tuple[int, ...]:
        shape = sig.shapes[0]
        assert shape is not None
        return transpose_perm(shape, self.ints("perm"))

    def check(self, sig: Signature) -> None:
        self._perm(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        perm = self._perm(sig)
        permute = torch.permute
        return lambda x: (permute(x, perm),)


class Concat(TorchOperator):
    """ONNX ``Concat`` along ``axis``: ``torch.cat``."""

    op_type = "Concat"
    slots, attribute_defaults = onnx_signature("Concat")

    def configure(self) -> None:
        if self.attr("axis") is None:
            raise self.fail("attribute axis is required")
        self.axis = int(self.attr("axis"))

    def check(self, sig: Signature) -> None:
        shapes = [s for s in sig.shapes if s is not None]
        check_concat_shapes(shapes, self.axis)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        cat, axis = torch.cat, self.axis
        return lambda *xs: (cat(xs, axis),)


class Squeeze(TorchOperator):
    """ONNX ``Squeeze`` (opset 13: ``axes`` is an input; without it every axis of size 1
    goes): ``torch.squeeze``."""

    op_type = "Squeeze"
    slots, attribute_defaults = onnx_signature("Squeeze")

    def _dims(self, sig: Signature) -> tuple[int, ...] | None:
        shape = sig.shapes[0]
        assert shape is not None
        given = sig.value("axes")
        if given is not None and not sig.values_known:
            return None
        return squeeze_axes(shape, given)

    def check(self, sig: Signature) -> None:
        self._dims(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        dims = self._dims(sig)
        assert dims is not None
        squeeze = torch.squeeze
        return lambda x: (squeeze(x, dims),)


class Unsqueeze(TorchOperator):
    """ONNX ``Unsqueeze`` (opset 13: ``axes``, a required input, counts in the output's
    rank): ``torch.unsqueeze`` per axis."""

    op_type = "Unsqueeze"
    slots, attribute_defaults = onnx_signature("Unsqueeze")

    def _dims(self, sig: Signature) -> tuple[int, ...] | None:
        shape = sig.shapes[0]
        assert shape is not None
        given = sig.value("axes")
        if given is not None and not sig.values_known:
            return None
        return unsqueeze_axes(shape, given)

    def check(self, sig: Signature) -> None:
        self._dims(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        dims = self._dims(sig)
        assert dims is not None
        unsqueeze = torch.unsqueeze

        def kernel(x: torch.Tensor) -> tuple[torch.Tensor]:
            for dim in dims:
                x = unsqueeze(x, dim)
            return (x,)

        return kernel
