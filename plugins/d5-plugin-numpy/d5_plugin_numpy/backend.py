"""The numpy operator backend, registered as ``numpy`` in the ``d5.operators`` group."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from d5_plugin_numpy.ops import OPERATORS
from d5_plugin_numpy.ops.base import FLOAT_DTYPES
from d5core.api import Operator, OperatorBackend, TensorDescriptor, UsageError

__all__ = ["NumpyBackend"]


class NumpyBackend(OperatorBackend):
    """d5's reference: every operator in plain numpy, written to be read and trusted.

    Operators compute in the dtype of their inputs, so one created for float32 also runs
    on float64 arrays (which is how gradient checks run it).
    """

    name = "numpy"
    dtypes = FLOAT_DTYPES

    def supported(self) -> Collection[str]:
        return sorted(OPERATORS)

    def create(
        self,
        op_type: str,
        attributes: Mapping[str, Any],
        inputs: Sequence[TensorDescriptor],
    ) -> Operator:
        """Build ``op_type`` with ``attributes`` for ``inputs``.

        :raises UsageError: with one line, for an unknown operator or attribute, an
            attribute value out of range, an input of the wrong rank or shape, or a dtype
            other than float32 and float64.
        """
        cls = OPERATORS.get(op_type)
        if cls is None:
            raise UsageError(
                f"the numpy backend has no operator {op_type!r}; it has: "
                f"{', '.join(sorted(OPERATORS))}"
            )
        op = cls(attributes)
        op.check_inputs(inputs)
        return op
