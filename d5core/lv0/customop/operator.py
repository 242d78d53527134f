"""A built custom operator as a d5 level-0 operator of one framework.

:class:`CustomOperator` checks the inputs once for every framework (how many, a shared
float32 or float64 dtype, C-contiguous) and turns an error the operator raises (a
``d5::Error`` from its C++, as each framework reports it) into a one-line
:class:`~d5core.errors.UsageError` naming the operator and the framework.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from d5core.errors import UsageError
from d5core.levels.operators import Operator
from d5core.lv0.customop.glue import Kernels
from d5core.lv0.customop.spec import OpSpec

__all__ = ["CustomOperator"]

_FLOATS = ("float32", "float64")


class CustomOperator(Operator):
    """One framework's build of a C++ custom operator, with fixed attributes."""

    def __init__(
        self,
        spec: OpSpec,
        framework: str,
        kernels: Kernels,
        attributes: Mapping[str, float | int],
    ) -> None:
        super().__init__(attributes)
        self.spec = spec
        self.framework = framework
        self.kernels = kernels
        self.device = str(getattr(kernels, "device", "cpu"))
        #: Called with ``"forward"`` or ``"backward"`` as each call into the C++ begins,
        #: so that a check worker can say which phase a crash happened in.
        self.on_phase: Callable[[str], None] | None = None

    @property
    def asynchronous(self) -> bool:  # type: ignore[override]
        """Whether the framework's calls return before their work is done (MXNet): the
        glue's kernels say so (``kernels.asynchronous``, ``False`` when absent)."""
        return bool(getattr(self.kernels, "asynchronous", False))

    @property
    def op_type(self) -> str:  # type: ignore[override]
        """The operator's declared name (a custom operator has no ONNX type)."""
        return self.spec.name

    def details(self) -> Mapping[str, Any]:
        return {"custom_op": self.spec.name, "framework": self.framework,
                "source": str(self.spec.source)}  # fmt: skip

    def _arrays(self, arrays: Sequence[np.ndarray], what: str, count: int) -> list[np.ndarray]:
        """``arrays`` C-contiguous, after checking their count and dtype."""
        if len(arrays) != count:
            raise UsageError(f"{self.spec.name} takes {count} {what}, not {len(arrays)}")
        found = [np.asarray(a) for a in arrays]
        dtypes = {str(a.dtype) for a in found}
        if len(dtypes) != 1 or not dtypes <= set(_FLOATS):
            raise UsageError(
                f"{self.spec.name} takes {what} of one dtype, float32 or float64, not "
                f"{', '.join(sorted(dtypes))}; cast them"
            )
        return [np.ascontiguousarray(a) for a in found]

    def _inputs(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self._arrays(inputs, f"inputs ({', '.join(self.spec.inputs)})",
                            len(self.spec.inputs))  # fmt: skip

    def _grads(self, grads: Sequence[np.ndarray], dtype: np.dtype[Any]) -> list[np.ndarray]:
        what = f"output gradients ({', '.join(self.spec.outputs)})"
        return self._arrays([np.asarray(g, dtype=dtype) for g in grads], what,
                            len(self.spec.outputs))  # fmt: skip

    def _call(self, fn: Callable[[], list[np.ndarray]]) -> list[np.ndarray]:
        try:
            return [np.asarray(a) for a in fn()]
        except UsageError:
            raise
        except Exception as exc:
            message = " ".join(str(exc).split()) or type(exc).__name__
            raise UsageError(f"{self.spec.name} on {self.framework}: {message}") from exc

    def _enter(self, phase: str) -> None:
        if self.on_phase is not None:
            self.on_phase(phase)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        arrays = self._inputs(inputs)
        self._enter("forward")
        return self._call(lambda: self.kernels.forward(arrays, self.attributes))

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        arrays = self._inputs(inputs)
        grads = self._grads(grad_outputs, arrays[0].dtype)
        self._enter("backward")
        return list(self._call(lambda: self.kernels.backward(grads, arrays, self.attributes)))

    def prepare_forward(self, inputs: Sequence[np.ndarray]) -> Callable[[], Any]:
        return self.kernels.prepare_forward(self._inputs(inputs), self.attributes)

    def prepare_backward(
        self, grad_outputs: Sequence[np.ndarray], inputs: Sequence[np.ndarray]
    ) -> Callable[[], Any]:
        arrays = self._inputs(inputs)
        grads = self._grads(grad_outputs, arrays[0].dtype)
        return self.kernels.prepare_backward(grads, arrays, self.attributes)
