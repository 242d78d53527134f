"""Element-wise arithmetic with ONNX (numpy) broadcasting: ``Add``, ``Sub``, ``Mul``,
``Div``, ``Sum``, and ``Identity``."""

from __future__ import annotations

from typing import Any, ClassVar

from d5_plugin_tensorflow.ops._base import Plan, Signature, TFOperator, tf
from d5core.onnx import BroadcastingRules, onnx_signature

__all__ = ["Add", "Div", "Identity", "Mul", "Sub", "Sum"]


class _Broadcasting(BroadcastingRules, TFOperator):
    """An element-wise operator whose inputs broadcast together (numpy's rules)."""


class _Binary(_Broadcasting):
    #: The name of the TensorFlow function, in ``tf.math``.
    function: ClassVar[str]

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        function = getattr(tf.math, type(self).function)
        return Plan(lambda a, b: (function(a, b),))


class Add(_Binary):
    """ONNX ``Add``: ``tf.math.add``."""

    op_type = "Add"
    slots, attribute_defaults = onnx_signature("Add")
    function = "add"


class Sub(_Binary):
    """ONNX ``Sub``: ``tf.math.subtract``."""

    op_type = "Sub"
    slots, attribute_defaults = onnx_signature("Sub")
    function = "subtract"


class Mul(_Binary):
    """ONNX ``Mul``: ``tf.math.multiply``."""

    op_type = "Mul"
    slots, attribute_defaults = onnx_signature("Mul")
    function = "multiply"


class Div(_Binary):
    """ONNX ``Div``: ``tf.math.divide`` (true division of floats)."""

    op_type = "Div"
    slots, attribute_defaults = onnx_signature("Div")
    function = "divide"


class Sum(_Broadcasting):
    """ONNX ``Sum`` of one or more inputs: ``tf.math.add_n`` when their shapes agree,
    else a chain of broadcasting ``tf.math.add``."""

    op_type = "Sum"
    slots, attribute_defaults = onnx_signature("Sum")

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        add, add_n = tf.math.add, tf.math.add_n
        if len(set(sig.shapes)) == 1 and len(sig.shapes) > 1:
            return Plan(lambda *xs: (add_n(list(xs)),))

        def kernel(first: Any, *rest: Any) -> tuple[Any]:
            total = first
            for x in rest:
                total = add(total, x)
            return (total,)

        return Plan(kernel)


class Identity(TFOperator):
    """ONNX ``Identity``: ``tf.identity``."""

    op_type = "Identity"
    slots, attribute_defaults = onnx_signature("Identity")

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        identity = tf.identity
        return Plan(lambda x: (identity(x),))
