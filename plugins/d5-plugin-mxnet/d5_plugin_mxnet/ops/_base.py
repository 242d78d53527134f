"""What every MXNet operator shares: input slots, conversion, and the timed callables.

An operator declares its inputs as :class:`Slot` s and builds a :class:`Plan`: a *kernel*
(a function of ``mx.nd`` arrays that makes only ``mx.nd`` calls) and what its outputs are
in ONNX terms. Everything else (checking shapes and dtypes, reading integer inputs such
as a ``Reshape`` shape into Python values, copying numpy arrays into ``mx.nd`` arrays,
recording the autograd graph) happens when a callable is prepared, outside the region
d5 times. :meth:`MXNetOperator.forward` and :meth:`MXNetOperator.backward` go through
the same prepared callables, so what is validated is exactly what is timed.

MXNet's engine is asynchronous on the CPU too: a prepared callable only *enqueues* the
work and returns the output arrays at once. The operators say so (``asynchronous``), so
the measurement engine waits for MXNet (``d5_synchronize``, ``mx.nd.waitall``) before it
reads its clock; the callables never wait themselves. Results reach numpy through
``asnumpy`` (which waits), outside the timed region.

MXNet 1.9's ``mx.nd`` arrays (outside its numpy mode, which is process-wide) have no
zero-dimensional shape: a 0-d input is handed to MXNet as shape ``(1,)``, and a plan
names the outputs that are 0-d in ONNX, reshaped on the way back. An axis of size 0
means "unknown" to MXNet and is refused.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from d5_plugin_mxnet._mx import mxnet
from d5core.onnx import BackendOperator, InputSlot
from d5core.onnx import Signature as PlanSignature

__all__ = [
    "FLOAT_DTYPES",
    "Kernel",
    "MXNetOperator",
    "Plan",
    "Signature",
    "Slot",
    "kernel_shape",
    "one_line",
]

mx = mxnet()

#: Element types of floating inputs, by numpy name (MXNet names them the same way).
FLOAT_DTYPES: dict[str, str] = {"float32": "float32", "float64": "float64"}

#: A function of ``mx.nd`` arrays that returns the operator's outputs as a tuple.
Kernel = Callable[..., tuple[Any, ...]]

#: Errors MXNet raises for inputs it rejects; they become one-line ``UsageError`` s.
_MX_ERRORS = (mx.base.MXNetError, ValueError, TypeError, IndexError)

#: One input of an operator, as ONNX names it (:class:`d5core.api.InputSlot`).
Slot = InputSlot


def kernel_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """The shape MXNet holds an array of ONNX ``shape`` in: ``(1,)`` for a 0-d one."""
    return tuple(int(d) for d in shape) or (1,)


#: The inputs a kernel is built for (``dtype``: the float type's numpy name; shapes are
#: ONNX's, before any 0-d input is held as ``(1,)``).
Signature = PlanSignature


@dataclass(frozen=True)
class Plan:
    """A kernel, and how its outputs map back to ONNX's."""

    kernel: Kernel
    #: ONNX shapes of outputs whose kernel-side shape differs (a 0-d result is ``(1,)``
    #: in MXNet), by output position.
    shapes: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    #: numpy dtypes of outputs that are not floating in ONNX (computed by MXNet in the
    #: float type), by output position: they get no gradient.
    dtypes: Mapping[int, str] = field(default_factory=dict)
    #: What the timed call does besides the operator's own MXNet call (an explicit pad).
    notes: tuple[str, ...] = ()


@dataclass
class _Bound:
    """A plan with its arrays in MXNet, ready to call."""

    plan: Plan
    args: tuple[Any, ...]
    #: Operator input positions whose gradients are computed, in order.
    grad_inputs: tuple[int, ...]
    #: The arrays (leaves of the graph) those gradients are taken with respect to.
    grad_leaves: tuple[Any, ...]
    shapes: tuple[tuple[int, ...] | None, ...]


class MXNetOperator(BackendOperator):
    """An ONNX operator run by MXNet's imperative API (``mx.nd``) on the CPU.

    Subclasses set :attr:`slots` and :attr:`attribute_defaults`, check their attributes in
    :meth:`configure`, check input shapes in :meth:`check`, and return the kernel from
    :meth:`build`.
    """

    #: MXNet's engine returns before queued work is done, on the CPU too.
    asynchronous: ClassVar[bool] = True
    float_dtypes = FLOAT_DTYPES
    backend = "mxnet"

    def __init__(self, attributes: Mapping[str, Any] | None = None) -> None:
        super().__init__(attributes)
        self.device = "cpu"
        #: What the timed call does besides the operator's own MXNet call; set when a
        #: callable is prepared.
        self.timed_notes: tuple[str, ...] = ()
        self.configure()

    # -- what subclasses provide --------------------------------------------

    @abstractmethod
    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        """The MXNet computation for inputs matching ``sig``.

        The kernel takes one array (or ``None`` when absent) per ``float`` or ``index``
        input, in input order, 0-d ones as shape ``(1,)``, index inputs in the float
        dtype; it returns the outputs as a tuple. ``for_grad`` is true when the kernel
        runs under ``autograd.record`` to be differentiated.
        """

    # -- Operator -------------------------------------------------------------

    def details(self) -> dict[str, Any]:
        """What a stored result should keep about the timed call: the backend, that MXNet
        runs it asynchronously, and the notes of :class:`Plan`."""
        return {"backend": "mxnet", "asynchronous": True, "notes": list(self.timed_notes)}

    def forward(self, inputs: Sequence[np.ndarray[Any, Any]]) -> list[np.ndarray[Any, Any]]:
        """Run the forward pass on numpy arrays (converting in and out; ``asnumpy``
        waits for MXNet)."""
        bound = self._bind(inputs, for_grad=False)
        outputs = self._run_forward(bound)()
        return [self._output(bound.plan, i, out) for i, out in enumerate(outputs)]

    def gradients(
        self,
        grad_outputs: Sequence[np.ndarray[Any, Any] | None],
        inputs: Sequence[np.ndarray[Any, Any]],
    ) -> tuple[tuple[int, ...], list[np.ndarray[Any, Any]]]:
        """The gradients of the differentiable inputs through ``mx.autograd`` (the graph
        is recorded from ``inputs``), with their positions."""
        run, bound = self._prepare_backward(grad_outputs, inputs)
        grads = run()
        found: list[np.ndarray[Any, Any]] = []
        for pos, grad in zip(bound.grad_inputs, grads, strict=True):
            shape = bound.shapes[pos]
            assert shape is not None
            found.append(grad.asnumpy().reshape(shape))
        return bound.grad_inputs, found

    def prepare_forward(self, inputs: Sequence[np.ndarray[Any, Any]]) -> Callable[[], Any]:
        """Copy ``inputs`` into ``mx.nd`` arrays once; return the timed callable.

        The callable makes only the kernel's ``mx.nd`` calls, outside ``autograd``, and
        returns the output arrays as soon as MXNet has queued the work (it never waits).
        """
        return self._run_forward(self._bind(inputs, for_grad=False))

    def prepare_backward(
        self,
        grad_outputs: Sequence[np.ndarray[Any, Any] | None],
        inputs: Sequence[np.ndarray[Any, Any]],
    ) -> Callable[[], Any]:
        """Record the forward pass with ``autograd.record`` once; return a callable that
        runs only the backward pass (``mx.autograd.backward`` with ``retain_graph``) and
        returns the gradient arrays of the differentiable inputs, in input order. Like the
        forward callable it only queues the work."""
        return self._prepare_backward(grad_outputs, inputs)[0]

    # -- machinery --------------------------------------------------------------

    def _run_forward(self, bound: _Bound) -> Callable[[], tuple[Any, ...]]:
        kernel, args = bound.plan.kernel, bound.args
        translate = self.rejection(bound.shapes, one_line)

        def run() -> tuple[Any, ...]:
            try:
                return kernel(*args)
            except _MX_ERRORS as exc:
                raise translate(exc) from exc

        return run

    def _prepare_backward(
        self,
        grad_outputs: Sequence[np.ndarray[Any, Any] | None],
        inputs: Sequence[np.ndarray[Any, Any]],
    ) -> tuple[Callable[[], tuple[Any, ...]], _Bound]:
        bound = self._bind(inputs, for_grad=True)
        plan, translate = bound.plan, self.rejection(bound.shapes, one_line)
        for leaf in bound.grad_leaves:
            leaf.attach_grad()
        try:
            with mx.autograd.record():
                outputs = plan.kernel(*bound.args)
        except _MX_ERRORS as exc:
            raise translate(exc) from exc
        self.check_output_gradients(len(grad_outputs), len(outputs))
        roots: list[Any] = []
        seeds: list[Any] = []
        for i, (out, given) in enumerate(zip(outputs, grad_outputs, strict=False)):
            if given is None or i in plan.dtypes:
                continue
            seed = np.asarray(given)
            onnx_shape = plan.shapes.get(i, tuple(out.shape))
            if tuple(seed.shape) != tuple(onnx_shape):
                raise self.fail(
                    f"gradient of output {i} has shape {_fmt(seed.shape)}, "
                    f"but the output has shape {_fmt(onnx_shape)}"
                )
            roots.append(out)
            seeds.append(mx.nd.array(seed.reshape(out.shape), dtype=out.dtype))
        leaves = bound.grad_leaves
        if not roots or not leaves:
            zeros = tuple(mx.nd.zeros_like(leaf) for leaf in leaves)
            return (lambda: zeros), bound
        grads = tuple(leaf.grad for leaf in leaves)
        backward = mx.autograd.backward

        def run() -> tuple[Any, ...]:
            try:
                backward(roots, seeds, retain_graph=True)
            except _MX_ERRORS as exc:
                raise translate(exc) from exc
            return grads

        return run, bound

    def _bind(self, inputs: Sequence[np.ndarray[Any, Any] | None], *, for_grad: bool) -> _Bound:
        arrays = [None if a is None else np.asarray(a) for a in inputs]
        sig: Signature = self._signature(arrays, values_known=True)
        plan = self.build(sig, for_grad=for_grad)
        self.timed_notes = plan.notes
        args: list[Any] = []
        grad_inputs: list[int] = []
        leaves: list[Any] = []
        for pos, (slot, array) in enumerate(zip(sig.slots, sig.arrays, strict=True)):
            if slot.kind == "static":
                continue
            if array is None:
                args.append(None)
                continue
            # Index inputs (class labels) go in the float type: MXNet's pick and take
            # read indices of any type, and mixed-type arithmetic is refused.
            nd = mx.nd.array(array.reshape(kernel_shape(array.shape)), dtype=sig.dtype)
            if for_grad and slot.kind == "float" and slot.differentiable:
                grad_inputs.append(pos)
                leaves.append(nd)
            args.append(nd)
        return _Bound(plan, tuple(args), tuple(grad_inputs), tuple(leaves), sig.shapes)

    def _output(self, plan: Plan, index: int, out: Any) -> np.ndarray[Any, Any]:
        array: np.ndarray[Any, Any] = out.asnumpy()
        if index in plan.shapes:
            array = array.reshape(plan.shapes[index])
        if index in plan.dtypes:
            array = array.astype(plan.dtypes[index])
        return array

    def signature(
        self,
        arrays: tuple[Any, ...],
        slots: tuple[InputSlot, ...],
        dtype: str | None,
        *,
        values_known: bool,
    ) -> Signature:
        """The signature, once no input has an axis of size 0 (MXNet cannot hold one)."""
        for slot, array in zip(slots, arrays, strict=True):
            if array is not None and slot.kind != "static" and 0 in tuple(array.shape):
                raise self.fail(
                    f"input {slot.name} has shape {_fmt(array.shape)}: MXNet 1.9's arrays "
                    f"cannot hold an axis of size 0; give every axis at least one element"
                )
        return super().signature(arrays, slots, dtype, values_known=values_known)


def one_line(exc: BaseException) -> str:
    """The line of an MXNet error that says what went wrong: the text after
    ``MXNetError:`` (MXNet's messages carry a C++ traceback), else the first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "MXNetError:" in line:
            return line.split("MXNetError:", 1)[1].strip()
    for line in lines:
        if not line.startswith(("Traceback", "File ", "[bt]", "Stack trace")):
            return line
    return type(exc).__name__


def _fmt(shape: Sequence[int] | None) -> str:
    return "absent" if shape is None else str(tuple(int(d) for d in shape))
