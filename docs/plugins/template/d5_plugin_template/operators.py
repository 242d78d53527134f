"""The operator backend (level 0), registered as ``template`` in ``d5.operators``.

Replace the numpy calls with your framework's. An operator converts its inputs to the
framework's tensors in :meth:`~d5core.api.Operator.prepare_forward`, so that
the callable d5 times runs the framework alone; numpy needs no conversion, so this one
keeps the default.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from d5core.api import Operator, OperatorBackend, TensorDescriptor, UsageError

__all__ = ["TemplateBackend", "TemplateRelu"]


class TemplateRelu(Operator):
    """ONNX ``Relu``: ``max(x, 0)`` elementwise."""

    op_type = "Relu"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        (x,) = inputs
        return [np.maximum(x, 0).astype(x.dtype, copy=False)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        (x,), (dy,) = inputs, grad_outputs
        return [np.where(x > 0, dy, 0).astype(x.dtype, copy=False)]


#: The operators of the backend, by ONNX operator type.
OPERATORS: dict[str, type[Operator]] = {"Relu": TemplateRelu}


class TemplateBackend(OperatorBackend):
    """The operators this plugin provides; ``d5 validate op Relu --backend template``
    checks them against d5's reference backend."""

    name = "template"
    dtypes = ("float32", "float64")

    def supported(self) -> Collection[str]:
        return sorted(OPERATORS)

    def create(
        self,
        op_type: str,
        attributes: Mapping[str, Any],
        inputs: Sequence[TensorDescriptor],
    ) -> Operator:
        """Build ``op_type`` for ``inputs``.

        :raises UsageError: one line, for an operator the backend lacks, an attribute
            (Relu takes none), a number of inputs other than one, or an unsupported dtype.
        """
        cls = OPERATORS.get(op_type)
        if cls is None:
            raise UsageError(
                f"the template backend has no operator {op_type!r}; it has: "
                f"{', '.join(self.supported())}"
            )
        if attributes:
            raise UsageError(f"{op_type} takes no attributes, not {sorted(attributes)[0]!r}")
        if len(inputs) != 1:
            raise UsageError(f"{op_type} takes one input, not {len(inputs)}")
        if inputs[0].dtype not in self.dtypes:
            raise UsageError(f"{op_type} runs on {' or '.join(self.dtypes)}, not {inputs[0].dtype}")
        return cls(attributes)
