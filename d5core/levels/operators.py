"""Level 0 interfaces: tensor descriptors, operators and operator backends.

An operator computes ``forward(inputs) -> outputs`` and
``backward(grad_outputs, inputs, outputs) -> grad_inputs`` on numpy arrays. ONNX operator
types and attribute semantics are the contract, so ``Conv`` means the same thing in every
backend and in the reference that validates it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

__all__ = ["Operator", "OperatorBackend", "TensorDescriptor"]


@dataclass(frozen=True)
class TensorDescriptor:
    """Shape, element type and memory layout of one tensor."""

    shape: tuple[int, ...]
    dtype: str = "float32"
    #: Axis order such as ``"NCHW"``; empty for a plain row-major array.
    layout: str = ""

    @classmethod
    def of(cls, array: np.ndarray, layout: str = "") -> TensorDescriptor:
        """Describe an existing array."""
        return cls(tuple(int(d) for d in array.shape), str(array.dtype), layout)

    @property
    def size(self) -> int:
        """Number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """Bytes the tensor takes when dense."""
        return self.size * np.dtype(self.dtype).itemsize


class Operator(ABC):
    """One operator with fixed attributes, run on numpy arrays.

    Subclass it to write a custom operator; implement :meth:`forward` and, if the operator
    is differentiable, :meth:`backward`. Backends for frameworks override
    :meth:`prepare_forward` and :meth:`prepare_backward` so that the region d5 times holds
    only the framework's own call.

    Validation treats a missing gradient as a failure unless the operator declares it:
    set :attr:`no_gradient` for an operator that has no gradient at all by design, and
    list in :attr:`no_gradient_inputs` the floating inputs (hyperparameters such as a
    dropout ratio) for which :meth:`backward` returns ``None`` on purpose.
    """

    #: The operator type, an ONNX operator name where one exists.
    op_type: ClassVar[str] = ""
    #: The device the operator runs on, passed to the ``d5_synchronize`` hook.
    device: str = "cpu"
    #: True when a call returns before its work is done, on the CPU too (MXNet's
    #: engine): the measurement engine then calls ``d5_synchronize`` before every clock
    #: read, as it does for an accelerator. Added in plugin API 1.4.
    asynchronous: ClassVar[bool] = False
    #: True for an operator that has no gradient by design (its outputs are indices,
    #: shapes or other piecewise-constant values) and so implements no backward.
    no_gradient: ClassVar[bool] = False
    #: Positions of floating inputs that get no gradient by design (``None`` from
    #: :meth:`backward`), such as Dropout's ``ratio``. Integer and boolean inputs never
    #: have one and need not be listed.
    no_gradient_inputs: ClassVar[frozenset[int]] = frozenset()

    def __init__(self, attributes: Mapping[str, Any] | None = None) -> None:
        self.attributes: dict[str, Any] = dict(attributes or {})

    @abstractmethod
    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Compute the outputs from the inputs."""

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        """Gradients of a scalar loss with respect to each input, given those of the outputs.

        An input that has no gradient (an integer shape, say) gets ``None``.
        """
        raise NotImplementedError(f"{type(self).__name__} has no backward")

    @property
    def differentiable(self) -> bool:
        """Whether :meth:`backward` is implemented."""
        return type(self).backward is not Operator.backward

    def declares_no_gradient(self, index: int) -> bool:
        """Whether the operator declares that input ``index`` has no gradient by design:
        the whole operator (:attr:`no_gradient`) or that input (:attr:`no_gradient_inputs`).
        """
        return self.no_gradient or index in self.no_gradient_inputs

    def details(self) -> Mapping[str, Any]:
        """What this operator says about how it was run, stored with its measurements.

        A backend reports here what a reader of its timings must know and the problem
        does not say, such as the memory layout of the timed call
        (``{"timed_layout": "NHWC"}`` for a channels-last convolution) or that it
        composed the operator from several framework calls. JSON-ready values only;
        empty by default. ``d5 bench op`` stores them in the measurement's details
        (``details``) in every worker process. A ``compile_s`` key (seconds) is stored
        as the run's ``compile_time`` too; d5 times the ``prepare_*`` call and the first
        call itself (``prepare_time``, ``first_call_time``), never in the samples.

        .. versionadded:: plugin API 1.2
        """
        return {}

    def prepare_forward(self, inputs: Sequence[np.ndarray]) -> Callable[[], Any]:
        """Convert ``inputs`` once and return a callable that runs only the forward pass.

        The default keeps the numpy arrays; framework backends convert them to native
        tensors here, outside the timed region.
        """
        arrays = list(inputs)
        return lambda: self.forward(arrays)

    def prepare_backward(
        self, grad_outputs: Sequence[np.ndarray], inputs: Sequence[np.ndarray]
    ) -> Callable[[], Any]:
        """Like :meth:`prepare_forward`, for the backward pass (forward run beforehand)."""
        arrays = list(inputs)
        outputs = self.forward(arrays)
        grads = list(grad_outputs)
        return lambda: self.backward(grads, arrays, outputs)


class OperatorBackend(ABC):
    """A family of operators from one framework, registered in ``d5.operators``."""

    #: The name users select the backend by, for example ``"numpy"`` or ``"torch"``.
    name: ClassVar[str] = ""
    #: Element types the backend supports.
    dtypes: ClassVar[tuple[str, ...]] = ("float32", "float64")

    @abstractmethod
    def supported(self) -> Collection[str]:
        """The operator types this backend implements."""

    @abstractmethod
    def create(
        self,
        op_type: str,
        attributes: Mapping[str, Any],
        inputs: Sequence[TensorDescriptor],
    ) -> Operator:
        """Build an operator of ``op_type`` for inputs described by ``inputs``."""
