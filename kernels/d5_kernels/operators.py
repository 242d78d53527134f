"""d5-kernels' level-0 backend: ONNX operators run by compiled C++ kernels.

Registered in the ``d5.operators`` group as ``native``. Every operator runs in d5's own
process on numpy buffers: the timed callable is one call into the compiled module, which
releases the GIL and runs on the OpenMP threads (:func:`d5_kernels.set_num_threads`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from d5_kernels.ops import FLOAT_DTYPES, OPERATOR_CLASSES, NativeOperator
from d5core.onnx import SlottedBackend

__all__ = ["OPERATORS", "NativeBackend"]

#: Operator classes by ONNX operator type.
OPERATORS: Mapping[str, type[NativeOperator[Any]]] = {cls.op_type: cls for cls in OPERATOR_CLASSES}


class NativeBackend(SlottedBackend[NativeOperator[Any]]):
    """The native C++ operators on the CPU.

    >>> relu = NativeBackend().create("Relu", {}, [TensorDescriptor((2, 3))])
    >>> relu.op_type
    'Relu'
    """

    name: ClassVar[str] = "native"
    dtypes: ClassVar[tuple[str, ...]] = FLOAT_DTYPES
    operator_classes = OPERATORS

