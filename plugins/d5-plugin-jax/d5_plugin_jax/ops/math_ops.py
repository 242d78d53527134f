"""JAX's element-wise math and reductions: ``Pow``, ``Sqrt``, ``Erf``, ``Exp``, ``Log``
and ``Gelu`` as ``jax.numpy`` and ``jax.nn`` calls; the comparisons ``Equal``, ``Less``
and ``Greater``, whose boolean outputs carry no gradient; and ``ReduceMean``,
``ReduceSum`` and ``ReduceMax``, whose axes :class:`~d5core.onnx.ReduceRules` reads."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

from d5_plugin_jax.ops._base import JaxOperator, Kernel, Signature, jax, jnp
from d5_plugin_jax.ops.elementwise import Binary, Broadcasting
from d5core.onnx import (
    GeluRules,
    ReduceMaxRules,
    ReduceMeanRules,
    ReduceRules,
    ReduceSumRules,
    onnx_signature,
)

__all__ = [
    "Equal",
    "Erf",
    "Exp",
    "Gelu",
    "Greater",
    "Less",
    "Log",
    "Pow",
    "ReduceMax",
    "ReduceMean",
    "ReduceSum",
    "Sqrt",
]


class Equal(Binary):
    """ONNX ``Equal``: ``jnp.equal``, a boolean array."""

    op_type = "Equal"
    slots, attribute_defaults = onnx_signature("Equal")
    function = jnp.equal


class Less(Binary):
    """ONNX ``Less``: ``jnp.less``, a boolean array."""

    op_type = "Less"
    slots, attribute_defaults = onnx_signature("Less")
    function = jnp.less


class Greater(Binary):
    """ONNX ``Greater``: ``jnp.greater``, a boolean array."""

    op_type = "Greater"
    slots, attribute_defaults = onnx_signature("Greater")
    function = jnp.greater


class Pow(Broadcasting):
    """ONNX ``Pow``: ``jnp.power``, with gradients for the base and the exponent."""

    op_type = "Pow"
    slots, attribute_defaults = onnx_signature("Pow")

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        power = jnp.power
        return lambda x, y: (power(x, y),)


class _Unary(JaxOperator):
    function: ClassVar[Callable[[Any], Any]]

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        function = type(self).function
        return lambda x: (function(x),)


class Sqrt(_Unary):
    """ONNX ``Sqrt``: ``jnp.sqrt``."""

    op_type = "Sqrt"
    slots, attribute_defaults = onnx_signature("Sqrt")
    function = jnp.sqrt


class Erf(_Unary):
    """ONNX ``Erf``: ``jax.lax.erf``."""

    op_type = "Erf"
    slots, attribute_defaults = onnx_signature("Erf")
    function = jax.lax.erf


class Exp(_Unary):
    """ONNX ``Exp``: ``jnp.exp``."""

    op_type = "Exp"
    slots, attribute_defaults = onnx_signature("Exp")
    function = jnp.exp


class Log(_Unary):
    """ONNX ``Log``: ``jnp.log``."""

    op_type = "Log"
    slots, attribute_defaults = onnx_signature("Log")
    function = jnp.log


class Gelu(GeluRules, JaxOperator):
    """ONNX ``Gelu`` (opset 20): ``jax.nn.gelu``, exact (``approximate="none"``, with
    the error function) or with the tanh approximation (``"tanh"``)."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        gelu, approximate = jax.nn.gelu, self.approximate == "tanh"
        return lambda x: (gelu(x, approximate=approximate),)


class _Reduce(ReduceRules, JaxOperator):
    """A reduction over ``axes`` (read by :class:`~d5core.onnx.ReduceRules`), by
    :attr:`function` with ``axis`` and ``keepdims``."""

    function: ClassVar[Callable[..., Any]]

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        dims = self._dims(sig)
        assert dims is not None
        if not dims:
            return lambda x: (x,)
        function, keepdims = type(self).function, self.keepdims
        return lambda x: (function(x, axis=dims, keepdims=keepdims),)


class ReduceMean(ReduceMeanRules, _Reduce):
    """ONNX ``ReduceMean``: ``jnp.mean``."""

    function = jnp.mean


class ReduceSum(ReduceSumRules, _Reduce):
    """ONNX ``ReduceSum``: ``jnp.sum``."""

    function = jnp.sum


class ReduceMax(ReduceMaxRules, _Reduce):
    """ONNX ``ReduceMax``: ``jnp.max``, whose gradient JAX shares evenly among the
    entries that tie for a maximum."""

    function = jnp.max
