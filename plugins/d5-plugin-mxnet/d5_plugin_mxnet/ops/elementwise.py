"""Element-wise arithmetic with ONNX (numpy) broadcasting: ``Add``, ``Sub``, ``Mul``,
``Div``, ``Sum``, and ``Identity``.

MXNet's ``broadcast_*`` operators align shapes on the right as numpy does; a 0-d input
is held as ``(1,)``, which broadcasts the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from d5_plugin_mxnet.ops._base import MXNetOperator, Plan, Signature, mx
from d5core.onnx import BroadcastingRules, onnx_signature

__all__ = ["Add", "Div", "Identity", "Mul", "Sub", "Sum"]


class _Broadcasting(BroadcastingRules, MXNetOperator):
    def plan(self, sig: Signature, kernel: Callable[..., tuple[Any, ...]]) -> Plan:
        out = self._out_shape(sig)
        return Plan(kernel, {} if out else {0: ()})


class _Binary(_Broadcasting):
    #: The name of the ``mx.nd`` broadcasting function.
    function: ClassVar[str]

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        function = getattr(mx.nd, type(self).function)
        return self.plan(sig, lambda a, b: (function(a, b),))


class Add(_Binary):
    """ONNX ``Add``: ``mx.nd.broadcast_add``."""

    op_type = "Add"
    slots, attribute_defaults = onnx_signature("Add")
    function = "broadcast_add"


class Sub(_Binary):
    """ONNX ``Sub``: ``mx.nd.broadcast_sub``."""

    op_type = "Sub"
    slots, attribute_defaults = onnx_signature("Sub")
    function = "broadcast_sub"


class Mul(_Binary):
    """ONNX ``Mul``: ``mx.nd.broadcast_mul``."""

    op_type = "Mul"
    slots, attribute_defaults = onnx_signature("Mul")
    function = "broadcast_mul"


class Div(_Binary):
    """ONNX ``Div``: ``mx.nd.broadcast_div``."""

    op_type = "Div"
    slots, attribute_defaults = onnx_signature("Div")
    function = "broadcast_div"


class Sum(_Broadcasting):
    """ONNX ``Sum`` of one or more inputs: ``mx.nd.add_n`` when the shapes are equal, a
    chain of ``mx.nd.broadcast_add`` otherwise (a copy for one input)."""

    op_type = "Sum"
    slots, attribute_defaults = onnx_signature("Sum")

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        if len(sig.arrays) == 1:
            copy = mx.nd.identity
            return self.plan(sig, lambda x: (copy(x),))
        if len(set(sig.shapes)) == 1:
            add_n = mx.nd.add_n
            return self.plan(sig, lambda *xs: (add_n(*xs),))
        add = mx.nd.broadcast_add

        def kernel(first: Any, *rest: Any) -> tuple[Any]:
            total = first
            for x in rest:
                total = add(total, x)
            return (total,)

        return self.plan(sig, kernel)


class Identity(MXNetOperator):
    """ONNX ``Identity``: the input array itself (``mx.nd.identity``, a copy, when
    differentiated: autograd needs an operation to record)."""

    op_type = "Identity"
    slots, attribute_defaults = onnx_signature("Identity")

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        shapes: dict[int, tuple[int, ...]] = {} if sig.shapes[0] else {0: ()}
        if for_grad:
            copy = mx.nd.identity
            return Plan(lambda x: (copy(x),), shapes)
        return Plan(lambda x: (x,), shapes)
