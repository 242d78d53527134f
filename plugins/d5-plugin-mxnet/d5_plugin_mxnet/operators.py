"""d5-plugin-mxnet's level-0 backend: ONNX operators run by MXNet's ``mx.nd``.

Registered in the ``d5.operators`` group as ``mxnet``. Forward passes are ``mx.nd``
calls, backward passes ``mx.autograd`` over a graph recorded once; both are validated
against d5's numpy reference like any custom operator. MXNet queues work and returns
at once, so every operator is ``asynchronous``: the measurement engine waits for MXNet
through the plugin's ``d5_synchronize`` hook before each clock read. Importing this
module imports MXNet (through :func:`d5_plugin_mxnet._mx.mxnet`, which sets its threads
first), which is why the plugin module never imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from d5_plugin_mxnet.ops import OPERATOR_CLASSES, MXNetOperator
from d5_plugin_mxnet.ops._base import FLOAT_DTYPES
from d5core.onnx import SlottedBackend

__all__ = ["OPERATORS", "MXNetBackend", "MXNetOperator"]

#: Operator classes by ONNX operator type.
OPERATORS: Mapping[str, type[MXNetOperator]] = {cls.op_type: cls for cls in OPERATOR_CLASSES}


class MXNetBackend(SlottedBackend[MXNetOperator]):
    """MXNet operators on the CPU, run by its asynchronous engine.

    >>> backend = MXNetBackend()                 # doctest: +SKIP
    >>> relu = backend.create("Relu", {}, [TensorDescriptor((2, 3))])
    """

    name: ClassVar[str] = "mxnet"
    dtypes: ClassVar[tuple[str, ...]] = tuple(FLOAT_DTYPES)
    operator_classes = OPERATORS
    #: Calls return before MXNet has run them (see :attr:`MXNetOperator.asynchronous`).
    asynchronous: ClassVar[bool] = True

