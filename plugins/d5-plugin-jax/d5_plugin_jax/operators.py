"""d5-plugin-jax's level-0 backend: ONNX operators run by JAX (XLA) on the CPU.

Registered in the ``d5.operators`` group as ``jax``. Each operator is a pure function of
JAX arrays, compiled ahead of the timed call (``jax.jit(f).lower(*args).compile()``); its
backward is ``jax.vjp`` of the same function, compiled the same way. float32 and
float64 (x64 mode, turned on for the one operator's compilation and never for the
process). Importing this module imports JAX (through :func:`d5_plugin_jax._jax.jax`,
which sets XLA's threads first), which is why the plugin module never imports it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from d5_plugin_jax import _jax
from d5_plugin_jax.ops import OPERATOR_CLASSES, JaxOperator
from d5_plugin_jax.ops._base import FLOAT_DTYPES
from d5core.api import TensorDescriptor
from d5core.onnx import SlottedBackend

__all__ = ["OPERATORS", "JaxBackend", "JaxOperator"]

#: Operator classes by ONNX operator type.
OPERATORS: Mapping[str, type[JaxOperator]] = {cls.op_type: cls for cls in OPERATOR_CLASSES}


class JaxBackend(SlottedBackend[JaxOperator]):
    """JAX operators on the CPU, each compiled once per signature.

    >>> backend = JaxBackend()                        # doctest: +SKIP
    >>> relu = backend.create("Relu", {}, [TensorDescriptor((2, 3))])
    """

    name: ClassVar[str] = "jax"
    dtypes: ClassVar[tuple[str, ...]] = tuple(FLOAT_DTYPES)
    operator_classes = OPERATORS

    def create(
        self,
        op_type: str,
        attributes: Mapping[str, Any],
        inputs: Sequence[TensorDescriptor],
    ) -> JaxOperator:
        """Build ``op_type`` for ``inputs``; float64 inputs need JAX's x64 mode, so a
        JAX that cannot turn it on is refused here, in one line."""
        op = super().create(op_type, attributes, inputs)
        if any(d.dtype == "float64" for d in inputs):
            _jax.require_x64(f"{op_type} in float64")
        return op
