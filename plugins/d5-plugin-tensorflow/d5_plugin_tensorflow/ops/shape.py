"""Shape operators: ``Reshape``, ``Flatten``, ``Transpose``, ``Concat``, ``Squeeze``,
``Unsqueeze``.

Shape and axes inputs are integers that ONNX passes as tensors; they are read into
Python values when the graph is built, so the timed graph holds the reshape (or the
transpose, or the concatenation) alone, with a constant target. ``Reshape``,
``Flatten``, ``Squeeze`` and ``Unsqueeze`` are all one ``tf.reshape``.
"""

from __future__ import annotations

from d5_plugin_tensorflow.ops._base import Plan, Signature, TFOperator, tf
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


def _reshape_to(target: tuple[int, ...]) -> Plan:
    reshape, shape = tf.reshape, list(target)
    return Plan(lambda x: (reshape(x, shape),))


class Reshape(TFOperator):
    """ONNX ``Reshape`` (0 copies the input's dimension unless ``allowzero``; -1 is
    inferred): ``tf.reshape`` to the resolved shape."""

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

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        target = self._target(sig)
        assert target is not None
        return _reshape_to(target)


class Flatten(TFOperator):
    """ONNX ``Flatten``: a 2-D result split at ``axis``, by ``tf.reshape``."""

    op_type = "Flatten"
    slots, attribute_defaults = onnx_signature("Flatten")

    def _target(self, sig: Signature) -> tuple[int, int]:
        shape = sig.shapes[0]
        assert shape is not None
        return flatten_target(shape, int(self.attr("axis")))

    def check(self, sig: Signature) -> None:
        self._target(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        return _reshape_to(self._target(sig))


class Transpose(TFOperator):
    """ONNX ``Transpose`` (default: reverse the axes): ``tf.transpose``, which copies."""

    op_type = "Transpose"
    slots, attribute_defaults = onnx_signature("Transpose")

    def _perm(self, sig: Signature) -> tuple[int, ...]:
        shape = sig.shapes[0]
        assert shape is not None
        return transpose_perm(shape, self.ints("perm"))

    def check(self, sig: Signature) -> None:
        self._perm(sig)

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        perm = list(self._perm(sig))
        transpose = tf.transpose
        return Plan(lambda x: (transpose(x, perm),))


class Concat(TFOperator):
    """ONNX ``Concat`` along ``axis``: ``tf.concat``."""

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
        concat, axis = tf.concat, self.axis
        return Plan(lambda *xs: (concat(list(xs), axis),))


class Squeeze(TFOperator):
    """ONNX ``Squeeze`` (opset 13: ``axes`` is an input; without it every axis of size 1
    goes): ``tf.reshape`` to the shape without them."""

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

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        dims = self._dims(sig)
        shape = sig.shapes[0]
        assert dims is not None and shape is not None
        return _reshape_to(tuple(d for i, d in enumerate(shape) if i not in dims))


class Unsqueeze(TFOperator):
    """ONNX ``Unsqueeze`` (opset 13: ``axes``, a required input, counts in the output's
    rank): ``tf.reshape`` to the shape with them."""

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

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        dims = self._dims(sig)
        shape = sig.shapes[0]
        assert dims is not None and shape is not None
        rest = iter(shape)
        target = tuple(1 if i in dims else next(rest) for i in range(len(shape) + len(dims)))
        return _reshape_to(target)
