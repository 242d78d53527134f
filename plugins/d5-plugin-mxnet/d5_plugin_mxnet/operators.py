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

from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar

from d5_plugin_mxnet.ops import OPERATOR_CLASSES, MXNetOperator
from d5_plugin_mxnet.ops._base import FLOAT_DTYPES
from d5core.api import OperatorBackend, TensorDescriptor, UsageError

__all__ = ["OPERATORS", "MXNetBackend", "MXNetOperator"]

#: Operator classes by ONNX operator type.
OPERATORS: Mapping[str, type[MXNetOperator]] = {cls.op_type: cls for cls in OPERATOR_CLASSES}


class MXNetBackend(OperatorBackend):
    """MXNet operators on the CPU, run by its asynchronous engine.

    >>> backend = MXNetBackend()                 # doctest: +SKIP
    >>> relu = backend.create("Relu", {}, [TensorDescriptor((2, 3))])
    """

    name: ClassVar[str] = "mxnet"
    dtypes: ClassVar[tuple[str, ...]] = tuple(FLOAT_DTYPES)
    #: Calls return before MXNet has run them (see :attr:`MXNetOperator.asynchronous`).
    asynchronous: ClassVar[bool] = True

    def __init__(self) -> None:
        #: The device operators run on, as passed to the ``d5_synchronize`` hook.
        self.device = "cpu"

    def supported(self) -> Collection[str]:
        """The ONNX operator types this backend implements."""
        return tuple(OPERATORS)

    def create(
        self,
        op_type: str,
        attributes: Mapping[str, Any],
        inputs: Sequence[TensorDescriptor],
    ) -> MXNetOperator:
        """Build ``op_type`` with ``attributes`` for ``inputs``, checking their count,
        dtypes and shapes (values of shape and axes inputs are checked when given), and
        refusing attribute combinations MXNet cannot run."""
        cls = OPERATORS.get(op_type)
        if cls is None:
            raise UsageError(
                f"the {self.name} backend has no operator {op_type!r}; it implements "
                f"{', '.join(sorted(OPERATORS))}"
            )
        op = cls(attributes)
        op.check_descriptors(inputs)
        return op
