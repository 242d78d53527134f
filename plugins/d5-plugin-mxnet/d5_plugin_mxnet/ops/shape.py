"""Shape operators: ``Reshape``, ``Flatten``, ``Transpose``, ``Concat``, ``Squeeze``,
``Unsqueeze``.

Shape and axes inputs are integers that ONNX passes as tensors; they are read into
Python values when the kernel is built, so the timed call is the MXNet operation alone:
``mx.nd.reshape`` with the fully resolved target (no 0 or -1 left for MXNet to read its
own way), ``mx.nd.transpose`` or ``mx.nd.concat``.
"""

from __future__ import annotations

from typing import Any

from d5_plugin_mxnet.ops._base import MXNetOperator, Plan, Signature, kernel_shape, mx
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


def _reshaped(target: tuple[int, ...]) -> Plan:
    """A plan that reshapes its one input to ``target`` (ONNX's; 0-d held as (1,))."""
    reshape, held = mx.nd.reshape, kernel_shape(target)
    return Plan(lambda x: (reshape(x, shape=held),), {} if target else {0: ()})


class Reshape(MXNetOperator):
    """ONNX ``Reshape`` (0 copies the input's dimension unless ``allowzero``; -1 is
    inferred): ``mx.nd.reshape``."""

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
        target = tuple(reshape_target(data, wanted, allowzero=self.allowzero))
        if 0 in target:
            raise self.fail(
                f"target shape {target} has an axis of size 0, which MXNet 1.9's arrays cannot hold"
            )
        return target

    def check(self, sig: Signature) -> None:
        self._target(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        target = self._target(sig)
        assert target is not None
        return _reshaped(target)


class Flatten(MXNetOperator):
    """ONNX ``Flatten``: a 2-D result split at ``axis``, by ``mx.nd.reshape``."""

    op_type = "Flatten"
    slots, attribute_defaults = onnx_signature("Flatten")

    def _target(self, sig: Signature) -> tuple[int, int]:
        shape = sig.shapes[0]
        assert shape is not None
        return flatten_target(shape, int(self.attr("axis")))

    def check(self, sig: Signature) -> None:
        self._target(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        return _reshaped(self._target(sig))


class Transpose(MXNetOperator):
    """ONNX ``Transpose`` (default: reverse the axes): ``mx.nd.transpose``."""

    op_type = "Transpose"
    slots, attribute_defaults = onnx_signature("Transpose")

    def _perm(self, sig: Signature) -> tuple[int, ...]:
        shape = sig.shapes[0]
        assert shape is not None
        return tuple(transpose_perm(shape, self.ints("perm")))

    def check(self, sig: Signature) -> None:
        self._perm(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        perm = self._perm(sig)
        if not perm:
            copy = mx.nd.identity
            return Plan(lambda x: (copy(x),), {0: ()})
        transpose = mx.nd.transpose
        return Plan(lambda x: (transpose(x, axes=perm),))


class Concat(MXNetOperator):
    """ONNX ``Concat`` along ``axis``: ``mx.nd.concat``."""

    op_type = "Concat"
    slots, attribute_defaults = onnx_signature("Concat")

    def configure(self) -> None:
        if self.attr("axis") is None:
            raise self.fail("attribute axis is required")
        self.axis = int(self.attr("axis"))

    def check(self, sig: Signature) -> None:
        shapes = [s for s in sig.shapes if s is not None]
        check_concat_shapes(shapes, self.axis)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        shape = sig.shapes[0]
        assert shape is not None
        concat, axis = mx.nd.concat, self.axis % len(shape)
        return Plan(lambda *xs: (concat(*xs, dim=axis),))


class Squeeze(MXNetOperator):
    """ONNX ``Squeeze`` (opset 13: ``axes`` is an input; without it every axis of size 1
    goes): ``mx.nd.reshape`` to the squeezed shape."""

    op_type = "Squeeze"
    slots, attribute_defaults = onnx_signature("Squeeze")

    def _target(self, sig: Signature) -> tuple[int, ...] | None:
        shape = sig.shapes[0]
        assert shape is not None
        given = sig.value("axes")
        if given is not None and not sig.values_known:
            return None
        dims = set(squeeze_axes(shape, given))
        return tuple(d for i, d in enumerate(shape) if i not in dims)

    def check(self, sig: Signature) -> None:
        self._target(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        target = self._target(sig)
        assert target is not None
        return _reshaped(target)


class Unsqueeze(MXNetOperator):
    """ONNX ``Unsqueeze`` (opset 13: ``axes``, a required input, counts in the output's
    rank): ``mx.nd.reshape`` to the expanded shape."""

    op_type = "Unsqueeze"
    slots, attribute_defaults = onnx_signature("Unsqueeze")

    def _target(self, sig: Signature) -> tuple[int, ...] | None:
        shape = sig.shapes[0]
        assert shape is not None
        given = sig.value("axes")
        if given is not None and not sig.values_known:
            return None
        dims: Any = unsqueeze_axes(shape, given)
        rank = len(shape) + len(dims)
        at = sorted(d % rank for d in dims)
        rest = iter(shape)
        return tuple(1 if i in at else next(rest) for i in range(rank))

    def check(self, sig: Signature) -> None:
        self._target(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        target = self._target(sig)
        assert target is not None
        return _reshaped(target)
