"""d5-kernels' level-0 backend: ONNX operators run by compiled C++ kernels.

Registered in the ``d5.operators`` group as ``native``. Every operator runs in d5's own
process on numpy buffers: the timed callable is one call into the compiled module, which
releases the GIL and runs on the OpenMP threads (:func:`d5_kernels.set_num_threads`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, ClassVar

from d5_kernels.ops import FLOAT_DTYPES, OPERATOR_CLASSES, NativeOperator
from d5core.api import OperatorBackend, TensorDescriptor, UsageError

__all__ = ["OPERATORS", "NativeBackend"]

#: Operator classes by ONNX operator type.
OPERATORS: Mapping[str, type[NativeOperator[Any]]] = {cls.op_type: cls for cls in OPERATOR_CLASSES}


class NativeBackend(OperatorBackend):
    """The native C++ operators on the CPU.

    >>> relu = NativeBackend().create("Relu", {}, [TensorDescriptor((2, 3))])
    >>> relu.op_type
    'Relu'
    """

    name: ClassVar[str] = "native"
    dtypes: ClassVar[tuple[str, ...]] = FLOAT_DTYPES

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
    ) -> NativeOperator[Any]:
        """Build ``op_type`` with ``attributes`` for ``inputs``, checking their count,
        dtypes and shapes and refusing attributes the kernels cannot run."""
        cls = OPERATORS.get(op_type)
        if cls is None:
            raise UsageError(
                f"the native backend has no operator {op_type!r}; it implements "
                f"{', '.join(sorted(OPERATORS))}"
            )
        op = cls(attributes)
        op.check_descriptors(inputs)
        return op
