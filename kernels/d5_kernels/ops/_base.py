"""What every native operator shares: input checks, buffers, and the timed callables.

An operator checks its inputs' count, dtypes and shapes (before any array exists, from
descriptors, and again on arrays) and derives a *plan* from the shapes: the geometry the
C++ kernels need. Its :meth:`NativeOperator.run_forward` and
:meth:`NativeOperator.run_backward` call the compiled module on contiguous arrays and
write into buffers allocated beforehand. :meth:`prepare_forward` and
:meth:`prepare_backward` allocate those buffers and make the inputs contiguous outside
the timed region, so the timed callable is the native call alone; :meth:`forward` and
:meth:`backward` go through the same ``run_*`` methods, so what is validated is what is
timed.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import numpy as np

from d5_kernels import runtime
from d5core.api import TensorDescriptor, UsageError
from d5core.onnx import (
    DescribedInput,
    SlottedOperator,
    check_attribute_names,
    check_float_dtypes,
    match_input_slots,
)
from d5core.onnx import Signature as PlanSignature

__all__ = ["FLOAT_DTYPES", "NativeOperator", "Shapes", "Signature"]

#: The element types the kernels are compiled for.
FLOAT_DTYPES: tuple[str, ...] = ("float32", "float64")

#: The shape of each input position (``None``: an absent optional input).
Shapes = tuple[tuple[int, ...] | None, ...]

P = TypeVar("P")


#: The inputs matched to their slots; ``dtype`` is the float type's numpy name.
Signature = PlanSignature


class NativeOperator(SlottedOperator, Generic[P]):
    """An ONNX operator run by d5-kernels' compiled code on the CPU.

    Subclasses set :attr:`slots` and :attr:`attribute_defaults` (from
    :func:`d5core.api.onnx_signature`), read attributes in :meth:`configure`, check shapes
    and build the plan in :meth:`plan`, say what they output in :meth:`output_specs`,
    and fill outputs and gradients in :meth:`run_forward` and :meth:`run_backward`.
    """

    #: What the kernels do, for :meth:`details` (such as "im2col + packed GEMM").
    algorithm: str = ""

    def __init__(self, attributes: Mapping[str, Any] | None = None) -> None:
        super().__init__(attributes)
        self.device = "cpu"
        check_attribute_names(self.op_type, self.attributes, self.attribute_defaults)
        self.configure()

    # -- what subclasses provide ------------------------------------------------

    def configure(self) -> None:
        """Read and check the attributes (raise ``UsageError`` for a bad one)."""

    @abstractmethod
    def plan(self, sig: Signature) -> P:
        """Check the input shapes of ``sig`` and return what the kernels need."""

    @abstractmethod
    def output_specs(self, plan: P, dtype: str) -> list[tuple[tuple[int, ...], str]]:
        """The shape and dtype of each output."""

    @abstractmethod
    def run_forward(self, plan: P, inputs: Sequence[Any], outputs: Sequence[np.ndarray]) -> None:
        """Write the outputs for contiguous ``inputs`` (``None`` for absent ones)."""

    @abstractmethod
    def run_backward(
        self,
        plan: P,
        grad_outputs: Sequence[np.ndarray | None],
        inputs: Sequence[Any],
        outputs: Sequence[np.ndarray],
        grads: Sequence[Any],
    ) -> None:
        """Write the gradient of each present input into ``grads`` (contiguous buffers
        shaped like the inputs, ``None`` for absent inputs and for those without a
        gradient, such as indices). ``grad_outputs`` are contiguous in the operator's
        dtype (zeros where none was given); ``None`` for an integer output."""

    def needs_outputs(self) -> bool:
        """Whether :meth:`run_backward` reads the forward outputs."""
        return False

    # -- Operator ------------------------------------------------------------------

    def details(self) -> dict[str, Any]:
        """The backend, the micro-kernel ISA, the OpenMP threads and the algorithm."""
        return {
            "backend": "native",
            "isa": runtime.isa(),
            "threads": runtime.num_threads(),
            "algorithm": self.algorithm,
        }

    def check_descriptors(self, inputs: Sequence[TensorDescriptor]) -> None:
        """Check inputs described by descriptors, before any array exists."""
        self.plan(self._signature([DescribedInput(d) for d in inputs]))

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the forward kernels into fresh output arrays."""
        plan, dtype, arrays = self._bind(inputs)
        outputs = self._allocate(plan, dtype)
        self._call(lambda: self.run_forward(plan, arrays, outputs), arrays)
        return outputs

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray | None],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray] | None = None,
    ) -> list[np.ndarray | None]:
        """The gradients of every input (the forward outputs are recomputed when not
        given and the backward needs them)."""
        run = self._backward_callable(grad_outputs, inputs, outputs)
        return run()

    def prepare_forward(self, inputs: Sequence[np.ndarray]) -> Callable[[], list[np.ndarray]]:
        """Check and make the inputs contiguous, allocate the outputs, run once; return
        a callable that makes the one native call and returns the outputs (the same
        buffers every call)."""
        plan, dtype, arrays = self._bind(inputs)
        outputs = self._allocate(plan, dtype)

        def timed() -> list[np.ndarray]:
            self.run_forward(plan, arrays, outputs)
            return outputs

        self._call(timed, arrays)
        return timed

    def prepare_backward(
        self, grad_outputs: Sequence[np.ndarray | None], inputs: Sequence[np.ndarray]
    ) -> Callable[[], list[np.ndarray | None]]:
        """Run the forward pass if the backward reads its outputs, allocate the
        gradients, run once; return a callable that makes the native backward call."""
        run = self._backward_callable(grad_outputs, inputs, None)
        run()
        return run

    # -- machinery --------------------------------------------------------------------

    def _signature(self, arrays: Sequence[Any]) -> Signature:
        slots = match_input_slots(self.op_type, self.slots, len(arrays))
        dtype = check_float_dtypes(self.op_type, slots, arrays, FLOAT_DTYPES, "native")
        return Signature(tuple(arrays), slots, dtype or "float32")

    def _bind(self, inputs: Sequence[Any]) -> tuple[P, str, list[Any]]:
        arrays = [None if a is None else np.asarray(a) for a in inputs]
        sig = self._signature(arrays)
        plan = self.plan(sig)
        contiguous = [None if a is None else _dense(a) for a in arrays]
        return plan, sig.dtype, contiguous

    def _allocate(self, plan: P, dtype: str) -> list[np.ndarray]:
        return [np.empty(shape, dtype=kind) for shape, kind in self.output_specs(plan, dtype)]

    def _backward_callable(
        self,
        grad_outputs: Sequence[np.ndarray | None],
        inputs: Sequence[Any],
        outputs: Sequence[np.ndarray] | None,
    ) -> Callable[[], list[np.ndarray | None]]:
        plan, dtype, arrays = self._bind(inputs)
        specs = self.output_specs(plan, dtype)
        if len(grad_outputs) > len(specs):
            raise self.fail(f"{len(grad_outputs)} output gradients given for {len(specs)} outputs")
        seeds: list[np.ndarray | None] = []
        for i, (shape, kind) in enumerate(specs):
            given = grad_outputs[i] if i < len(grad_outputs) else None
            if np.dtype(kind).kind != "f":
                seeds.append(None)
                continue
            if given is None:  # no gradient flows back from this output
                seeds.append(np.zeros(shape, dtype=dtype))
                continue
            seed = _dense(np.asarray(given, dtype=dtype))
            if seed.shape != tuple(shape):
                raise self.fail(
                    f"gradient of output {i} has shape {seed.shape}, but the output has "
                    f"shape {tuple(shape)}"
                )
            seeds.append(seed)
        if self.needs_outputs():
            if outputs is None:
                results = self._allocate(plan, dtype)
                self._call(lambda: self.run_forward(plan, arrays, results), arrays)
            else:
                results = [_dense(np.asarray(o)) for o in outputs]
        else:
            results = []
        grads: list[np.ndarray | None] = [
            None if a is None or self.declares_no_gradient(i) else np.empty(a.shape, dtype=dtype)
            for i, a in enumerate(arrays)
        ]
        final: list[np.ndarray | None] = list(grads)

        def timed() -> list[np.ndarray | None]:
            self.run_backward(plan, seeds, arrays, results, grads)
            return final

        return lambda: self._call(timed, arrays)

    def _call(self, run: Callable[[], Any], arrays: Sequence[Any]) -> Any:
        """Run ``run``, turning a rejection by the compiled module into a one-line
        ``UsageError``."""
        try:
            return run()
        except ValueError as exc:
            shapes = ", ".join(str(None if a is None else a.shape) for a in arrays)
            raise UsageError(
                f"{self.op_type}: the native kernels rejected inputs of shapes {shapes}: {exc}"
            ) from None


def _dense(array: np.ndarray) -> np.ndarray:
    """``array`` if it is C-contiguous, else a C-contiguous copy (keeping a 0-d array 0-d,
    unlike ``np.ascontiguousarray``)."""
    return array if array.flags.c_contiguous else array.copy(order="C")
