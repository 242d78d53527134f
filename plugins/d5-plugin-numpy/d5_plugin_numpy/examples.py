"""A custom operator written the way docs/operators.md teaches: ``IntegerPower``.

It is not part of the backend; it is the worked example of subclassing
:class:`d5core.api.Operator`, and the tests validate it as the docs do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from d5core.api import Operator, UsageError

__all__ = ["IntegerPower"]


class IntegerPower(Operator):
    """``y = x ** n`` for an integer attribute ``exponent`` ``n`` (default 2)."""

    op_type = "IntegerPower"

    def __init__(self, attributes: Mapping[str, Any] | None = None) -> None:
        super().__init__(attributes)
        exponent = self.attributes.get("exponent", 2)
        if int(exponent) != exponent:
            raise UsageError(f"IntegerPower exponent must be an integer, not {exponent!r}")
        self.exponent = int(exponent)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        (x,) = inputs
        return [x**self.exponent]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        (x,), (dy,) = inputs, grad_outputs
        n = self.exponent
        # d/dx x**n = n * x**(n - 1); for n = 0 the output is constant.
        dx = np.zeros_like(x) if n == 0 else n * x ** (n - 1) * dy
        return [dx.astype(x.dtype)]
