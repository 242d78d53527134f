"""Shape operators: ``Reshape``, ``Flatten``, ``Transpose``, ``Concat``, ``Squeeze``,
``Unsqueeze``.

Shape and axes inputs are read into Python values when the kernel is built, so the
compiled program holds the reshape or copy alone. The attribute and input checks are
ONNX's, from :mod:`d5core.onnx`.
"""

from __future__ import annotations

from typing import Any

from d5_plugin_jax.ops._base import JaxOperator, Kernel, Signature, jnp
from d5core.onnx import operator_rules as rules

__all__ = ["Concat", "Flatten", "Reshape", "Squeeze", "Transpose", "Unsqueeze"]


class Reshape(rules.ReshapeRules, JaxOperator):
    """ONNX ``Reshape``: ``jnp.reshape`` to the resolved shape."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self._target(sig)
        assert target is not None
        return lambda x: (jnp.reshape(x, target),)


class Flatten(rules.FlattenRules, JaxOperator):
    """ONNX ``Flatten``: ``jnp.reshape`` to two axes."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self._target(sig)
        return lambda x: (jnp.reshape(x, target),)


class Transpose(rules.TransposeRules, JaxOperator):
    """ONNX ``Transpose``: ``jnp.transpose``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        perm = self._perm(sig)
        return lambda x: (jnp.transpose(x, perm),)


class Concat(rules.ConcatRules, JaxOperator):
    """ONNX ``Concat``: ``jnp.concatenate``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        axis = self.axis

        def kernel(*xs: Any) -> tuple[Any]:
            return (jnp.concatenate(xs, axis=axis),)

        return kernel


class Squeeze(rules.SqueezeRules, JaxOperator):
    """ONNX ``Squeeze``: ``jnp.squeeze``."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        dims = self._dims(sig)
        assert dims is not None
        return lambda x: (jnp.squeeze(x, dims),)


class Unsqueeze(rules.UnsqueezeRules, JaxOperator):
    """ONNX ``Unsqueeze``: a reshape to the shape with the new axes."""

    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        target = self._expanded(sig)
        assert target is not None
        return lambda x: (jnp.reshape(x, target),)
