"""Element-wise arithmetic with ONNX (numpy) broadcasting: ``Add``, ``Sub``, ``Mul``,
``Div``, ``Sum``, and ``Identity``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from d5_plugin_jax.ops._base import JaxOperator, Kernel, Signature, jnp
from d5core.onnx import BroadcastingRules, onnx_signature

__all__ = ["Add", "Div", "Identity", "Mul", "Sub", "Sum"]


class Broadcasting(BroadcastingRules, JaxOperator):
    """An element-wise operator whose inputs broadcast together (numpy's rules)."""


class Binary(Broadcasting):
    """An element-wise function of two inputs, ``function``."""

    function: ClassVar[Callable[[Any, Any], Any]]

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        function = type(self).function
        return lambda a, b: (function(a, b),)


class Add(Binary):
    """ONNX ``Add``: ``jnp.add``."""

    op_type = "Add"
    slots, attribute_defaults = onnx_signature("Add")
    function = jnp.add


class Sub(Binary):
    """ONNX ``Sub``: ``jnp.subtract``."""

    op_type = "Sub"
    slots, attribute_defaults = onnx_signature("Sub")
    function = jnp.subtract


class Mul(Binary):
    """ONNX ``Mul``: ``jnp.multiply``."""

    op_type = "Mul"
    slots, attribute_defaults = onnx_signature("Mul")
    function = jnp.multiply


class Div(Binary):
    """ONNX ``Div``: ``jnp.divide``."""

    op_type = "Div"
    slots, attribute_defaults = onnx_signature("Div")
    function = jnp.divide


class Sum(Broadcasting):
    """ONNX ``Sum`` of one or more inputs, added left to right."""

    op_type = "Sum"
    slots, attribute_defaults = onnx_signature("Sum")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        def kernel(first: Any, *rest: Any) -> tuple[Any]:
            total = first
            for x in rest:
                total = total + x
            return (total,)

        return kernel


class Identity(JaxOperator):
    """ONNX ``Identity``: the input array itself."""

    op_type = "Identity"
    slots, attribute_defaults = onnx_signature("Identity")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        return lambda x: (x,)
