"""d5-plugin-tensorflow's level-0 backends: ONNX operators run by TensorFlow.

Registered in the ``d5.operators`` group as ``tensorflow`` (graphs built by
``tf.function``, run by TensorFlow's own CPU kernels) and ``tensorflow-xla`` (the same
graphs compiled by XLA, ``jit_compile=True``). Forward passes are traced graphs,
backward passes ``tf.GradientTape`` inside traced graphs; both are validated against
d5's numpy reference like any custom operator. Importing this module imports
TensorFlow (through :func:`d5_plugin_tensorflow._tf.tensorflow`, which sets its threads
and determinism first), which is why the plugin module never imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from d5_plugin_tensorflow.ops import OPERATOR_CLASSES, TFOperator
from d5_plugin_tensorflow.ops._base import FLOAT_DTYPES
from d5core.onnx import SlottedBackend

__all__ = ["OPERATORS", "TFOperator", "TensorFlowBackend", "TensorFlowXLABackend"]

#: Operator classes by ONNX operator type.
OPERATORS: Mapping[str, type[TFOperator]] = {cls.op_type: cls for cls in OPERATOR_CLASSES}


class TensorFlowBackend(SlottedBackend[TFOperator]):
    """TensorFlow operators on the CPU, each a graph traced once per signature.

    >>> backend = TensorFlowBackend()                 # doctest: +SKIP
    >>> relu = backend.create("Relu", {}, [TensorDescriptor((2, 3))])
    """

    name: ClassVar[str] = "tensorflow"
    dtypes: ClassVar[tuple[str, ...]] = tuple(FLOAT_DTYPES)
    operator_classes = OPERATORS
    #: Whether XLA compiles every graph.
    xla: ClassVar[bool] = False


    def instantiate(self, cls: type[Any], attributes: Mapping[str, Any]) -> TFOperator:
        """A new operator of ``cls``, compiled by XLA when this backend is."""
        op: TFOperator = cls(attributes, xla=self.xla)
        return op


class TensorFlowXLABackend(TensorFlowBackend):
    """The same operators, every graph compiled by XLA (``jit_compile=True``).

    XLA compiles when a callable is prepared (outside the timed region); an operator
    it refuses is a one-line ``UsageError`` that points to the ``tensorflow`` backend.
    """

    name: ClassVar[str] = "tensorflow-xla"
    xla: ClassVar[bool] = True
