"""What every JAX operator shares: input slots, compilation, and the timed callables.

An operator declares its inputs as slots and builds a *kernel*: a pure function of JAX
arrays (``jax.numpy`` and ``jax.lax`` calls only) that returns the outputs as a tuple.
Static inputs (a ``Reshape`` shape, ``Slice`` bounds) are read into Python values when
the kernel is built, so they are constants of the compiled program.

Preparing a callable does everything but the computation, outside the region d5 times:
checking shapes and dtypes, putting the arrays on the device, tracing the kernel
(``jax.jit``), lowering it to XLA and compiling it (``.lower(*args).compile()``); its
seconds are kept as :attr:`JaxOperator.compile_s` and reported by ``details()``. The
timed callable calls the compiled executable once and returns its outputs; JAX
dispatches asynchronously, so the operators are ``asynchronous`` and the plugin's
``d5_synchronize`` waits for the last outputs (``block_until_ready``).

The backward pass is ``jax.vjp`` of the kernel inside one compiled function that takes
the inputs and the output gradients (the cotangents); like a TensorFlow graph, it keeps
nothing between calls, so each call recomputes what the gradient needs of the forward.

float64 computations run under x64 mode for the one call or compilation
(:func:`d5_plugin_jax._jax.x64`); compiled code keeps its types outside that block.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from d5_plugin_jax import _jax
from d5core.api import UsageError
from d5core.onnx import BackendOperator, InputSlot
from d5core.onnx import Signature as PlanSignature

__all__ = [
    "FLOAT_DTYPES",
    "JaxOperator",
    "Kernel",
    "Prepared",
    "Signature",
    "Slot",
    "jax",
    "jnp",
    "one_line",
    "refuse",
]

jax = _jax.jax()
jnp = jax.numpy

#: Element types of floating inputs, by numpy name (JAX takes numpy's names).
FLOAT_DTYPES: dict[str, str] = {"float32": "float32", "float64": "float64"}

#: A function of JAX arrays (``None`` for an absent optional input) that returns the
#: operator's outputs as a tuple.
Kernel = Callable[..., tuple[Any, ...]]

#: One input of an operator, as ONNX names it.
Slot = InputSlot

#: Errors JAX raises while tracing or compiling a kernel for inputs it rejects.
_JAX_ERRORS = (TypeError, ValueError, IndexError, RuntimeError, NotImplementedError)


@dataclass(frozen=True)
class Signature(PlanSignature):
    """The inputs a kernel is built for; ``dtype`` is the float type's numpy name."""

    @property
    def wide(self) -> bool:
        """Whether the kernel computes in 64 bits (x64 mode)."""
        return bool(self.dtype == "float64")


def one_line(exc: BaseException) -> str:
    """The first line of an error JAX raised, without JAX's traceback hints."""
    for raw in str(exc).splitlines():
        line = raw.strip()
        if line and not line.startswith(("--------", "The stack trace", "For simplicity")):
            return line
    return type(exc).__name__


class Prepared:
    """A compiled executable with its argument arrays: the callable d5 times.

    Calling it runs the executable once and returns its outputs (JAX arrays, possibly
    not yet computed: JAX dispatches asynchronously); the outputs are also left for the
    plugin's ``d5_synchronize`` hook to wait for.
    """

    __slots__ = ("args", "compiled", "dtypes", "positions")

    def __init__(
        self,
        compiled: Callable[..., Any],
        args: tuple[Any, ...],
        positions: tuple[int, ...],
        dtypes: tuple[np.dtype[Any] | None, ...],
    ) -> None:
        #: The compiled executable (``jax.stages.Compiled``).
        self.compiled = compiled
        #: Its arguments, on the device.
        self.args = args
        #: The output (forward) or input (backward) position of each result.
        self.positions = positions
        #: The numpy type each result is given back in (``None``: as computed).
        self.dtypes = dtypes

    def __call__(self) -> tuple[Any, ...]:
        outputs: tuple[Any, ...] = self.compiled(*self.args)
        _jax.PENDING[0] = outputs
        return outputs

    def to_numpy(self, results: Sequence[Any]) -> list[np.ndarray]:
        """``results`` of a call as numpy arrays (outside the timed region)."""
        out = []
        for value, dtype in zip(results, self.dtypes, strict=True):
            array = np.asarray(value)
            out.append(array if dtype is None else array.astype(dtype, copy=False))
        return out


class JaxOperator(BackendOperator):
    """An ONNX operator run by JAX (XLA) on the CPU, compiled ahead of the timed call.

    Subclasses set :attr:`slots` and :attr:`attribute_defaults` (or take them from a
    rules mixin of :mod:`d5core.onnx`), check their attributes in :meth:`configure` and
    their inputs in :meth:`check`, and return the kernel from :meth:`build`.
    """

    float_dtypes = FLOAT_DTYPES
    backend = "jax"
    signature_class = Signature
    #: JAX returns before the computation is done: the engine synchronizes through
    #: ``d5_synchronize`` before every clock read.
    asynchronous: ClassVar[bool] = True
    #: The numpy types of the outputs, by position, when they differ from what JAX
    #: computes outside x64 mode (ONNX's int64 indices and shapes).
    output_dtypes: ClassVar[Mapping[int, str]] = {}

    def __init__(self, attributes: Mapping[str, Any] | None = None) -> None:
        super().__init__(attributes)
        self.device = "cpu"
        #: Seconds spent tracing, lowering and compiling the last prepared callable.
        self.compile_s: float | None = None
        #: Whether the last prepared callable computes in 64 bits.
        self.x64 = False
        #: What the timed call does besides the operator itself, worth knowing when
        #: comparing timings.
        self.timed_notes: tuple[str, ...] = ()
        self._compiled: dict[tuple[Any, ...], tuple[Any, float]] = {}
        self._plans: dict[tuple[Any, ...], _Plan] = {}
        self.configure()

    # -- what subclasses provide --------------------------------------------

    @abstractmethod
    def build(self, sig: Signature, *, for_grad: bool) -> Kernel:
        """The JAX computation for inputs matching ``sig``: a function of one array per
        input that is not ``static`` (``None`` when absent), in input order, returning
        the outputs as a tuple. ``for_grad`` is true when it will be differentiated."""

    # -- Operator -------------------------------------------------------------

    @property
    def differentiable(self) -> bool:
        """Whether there is a backward to check (not for :attr:`no_gradient` operators)."""
        return not self.no_gradient

    def details(self) -> dict[str, Any]:
        """What a stored result should keep: the compile seconds of the timed callable
        (apart from its run time), x64 mode, and notes on what the timed call holds."""
        return {
            "backend": self.backend,
            "jit": True,
            "compile_s": self.compile_s,
            "x64": self.x64,
            "notes": list(self.timed_notes),
        }

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the compiled forward on numpy arrays (converting in and out)."""
        prepared = self.prepare_forward(inputs)
        return prepared.to_numpy(prepared())

    def gradients(
        self, grad_outputs: Sequence[np.ndarray | None], inputs: Sequence[np.ndarray]
    ) -> tuple[tuple[int, ...], list[np.ndarray]]:
        """The gradients of the differentiable inputs (``jax.vjp``), with their positions."""
        prepared = self.prepare_backward(grad_outputs, inputs)
        return prepared.positions, prepared.to_numpy(prepared())

    def prepare_forward(self, inputs: Sequence[np.ndarray]) -> Prepared:
        """Put ``inputs`` on the device and compile the kernel for them (outside the
        timed region; once per signature); return the callable that runs the compiled
        code once."""
        sig = self._checked(inputs)
        self.x64 = sig.wide
        with _jax.x64(sig.wide, what=f"{self.op_type} in float64"):
            plan = self._kernel_plan(sig, for_grad=False)
            args = self._arrays(sig)
            compiled = self._compile(("forward", *plan.key), plan.kernel, args, sig)
        self.timed_notes = plan.notes
        count = len(plan.shapes)
        return Prepared(compiled, args, tuple(range(count)), plan.dtypes)

    def prepare_backward(
        self, grad_outputs: Sequence[np.ndarray | None], inputs: Sequence[np.ndarray]
    ) -> Prepared:
        """Compile ``jax.vjp`` of the kernel for these inputs and output gradients (once
        per signature); return a callable that runs it once and returns the gradients of
        the differentiable inputs, in input order."""
        sig = self._checked(inputs)
        self.x64 = sig.wide
        with _jax.x64(sig.wide, what=f"{self.op_type} in float64"):
            plan = self._kernel_plan(sig, for_grad=True)
            args = self._arrays(sig)
            self.check_output_gradients(len(grad_outputs), len(plan.shapes))
            seeded, seeds = self._seeds(grad_outputs, plan.shapes)
            slots = self._kernel_slots(sig)
            wrt = tuple(
                k
                for k, (pos, slot) in enumerate(slots)
                if args[k] is not None
                and slot.kind == "float"
                and not self.declares_no_gradient(pos)
            )
            positions = tuple(slots[k][0] for k in wrt)
            dtypes = tuple(np.dtype(sig.dtype) for _ in wrt)
            self.timed_notes = (*plan.notes, "backward recomputes the forward (jax.vjp)")
            if not seeded or not wrt:
                zeros = tuple(jnp.zeros_like(args[k]) for k in wrt)
                self.compile_s = 0.0
                return Prepared(lambda: zeros, (), positions, dtypes)
            function = _vjp_function(plan.kernel, len(args), wrt, seeded)
            key = ("backward", seeded, wrt, *plan.key)
            compiled = self._compile(key, function, (*args, *seeds), sig)
        return Prepared(compiled, (*args, *seeds), positions, dtypes)

    # -- machinery --------------------------------------------------------------

    def _checked(self, inputs: Sequence[np.ndarray | None]) -> Signature:
        arrays = [None if a is None else np.asarray(a) for a in inputs]
        sig: Signature = self._signature(arrays, values_known=True)
        return sig

    def _kernel_slots(self, sig: Signature) -> list[tuple[int, InputSlot]]:
        """The input position and slot of each kernel argument (inputs not static)."""
        return [(pos, slot) for pos, slot in enumerate(sig.slots) if slot.kind != "static"]

    def _arrays(self, sig: Signature) -> tuple[Any, ...]:
        """The kernel's arguments on the device: floats in the signature's type, index
        inputs as integers (int64 under x64, else int32), booleans as they are."""
        index_type = np.int64 if sig.wide else np.int32
        out: list[Any] = []
        for pos, slot in self._kernel_slots(sig):
            array = sig.arrays[pos]
            if array is None:
                out.append(None)
                continue
            if slot.kind == "float":
                data = np.asarray(array, dtype=sig.dtype)
            elif slot.kind == "index":
                data = np.asarray(array).astype(index_type)
            else:
                data = np.asarray(array)
            out.append(jax.device_put(data))
        return tuple(out)

    def _key(self, sig: Signature) -> tuple[Any, ...]:
        """What identifies a compiled kernel: dtype, shapes and the static values."""
        statics = tuple(
            None
            if a is None or s.kind != "static"
            else (str(np.asarray(a).dtype), tuple(np.asarray(a).reshape(-1).tolist()))
            for s, a in zip(sig.slots, sig.arrays, strict=True)
        )
        return sig.dtype, sig.shapes, statics

    def _compile(
        self, key: tuple[Any, ...], function: Callable[..., Any], args: Sequence[Any], sig: Any
    ) -> Any:
        """``function`` compiled for ``args`` (once per key), timing the compilation."""
        found = self._compiled.get(key)
        if found is not None:
            self.compile_s = found[1]
            return found[0]
        translate = self.rejection(sig.shapes, one_line)
        start = time.perf_counter()
        try:
            compiled = jax.jit(function).lower(*args).compile()
        except _JAX_ERRORS as exc:
            raise translate(exc) from exc
        seconds = time.perf_counter() - start
        self._compiled[key] = (compiled, seconds)
        self.compile_s = seconds
        return compiled

    def _kernel_plan(self, sig: Signature, *, for_grad: bool) -> _Plan:
        """The kernel for ``sig`` with its output shapes (traced once per signature: a
        gradient check runs the forward hundreds of times on one signature)."""
        key = self._key(sig)
        plan = self._plans.get((for_grad, *key))
        if plan is None:
            self.timed_notes = ()
            kernel = self.build(sig, for_grad=for_grad)
            try:
                shapes = tuple(jax.eval_shape(kernel, *self._arrays(sig)))
            except _JAX_ERRORS as exc:
                raise self.rejection(sig.shapes, one_line)(exc) from exc
            dtypes = tuple(self._result_dtype(i, s.dtype, sig) for i, s in enumerate(shapes))
            plan = _Plan(kernel, key, shapes, dtypes, self.timed_notes)
            self._plans[(for_grad, *key)] = plan
        return plan

    def _seeds(
        self, grad_outputs: Sequence[np.ndarray | None], shapes: Sequence[Any]
    ) -> tuple[tuple[int, ...], tuple[Any, ...]]:
        """The outputs given a floating gradient, and those gradients on the device."""
        seeded: list[int] = []
        seeds: list[Any] = []
        for i, (spec, given) in enumerate(zip(shapes, grad_outputs, strict=False)):
            if given is None or not jnp.issubdtype(spec.dtype, jnp.floating):
                continue
            seed = np.asarray(given)
            if tuple(seed.shape) != tuple(spec.shape):
                raise self.fail(
                    f"gradient of output {i} has shape {self.format_shape(seed.shape)}, "
                    f"but the output has shape {self.format_shape(spec.shape)}"
                )
            seeds.append(jax.device_put(seed.astype(spec.dtype)))
            seeded.append(i)
        return tuple(seeded), tuple(seeds)

    def _result_dtype(self, index: int, computed: Any, sig: Signature) -> np.dtype[Any] | None:
        """The numpy type output ``index`` is given back in: the declared one, else
        int64 for integers computed as int32 (JAX outside x64 mode), else as computed."""
        declared = self.output_dtypes.get(index)
        if declared is not None:
            return np.dtype(declared)
        if np.dtype(computed) == np.dtype(np.int32):
            return np.dtype(np.int64)
        return None

    def format_shape(self, shape: Sequence[int]) -> str:
        """Shapes in messages read ``(2, 3)``."""
        return str(tuple(int(d) for d in shape))


@dataclass(frozen=True)
class _Plan:
    """A kernel built for one signature, with what its tracing found."""

    kernel: Kernel
    #: The signature's key (:meth:`JaxOperator._key`).
    key: tuple[Any, ...]
    #: The outputs' shapes and types (``jax.ShapeDtypeStruct``).
    shapes: tuple[Any, ...]
    #: The numpy type each output is given back in (``None``: as computed).
    dtypes: tuple[np.dtype[Any] | None, ...]
    notes: tuple[str, ...]


def _vjp_function(
    kernel: Kernel, count: int, wrt: tuple[int, ...], seeded: tuple[int, ...]
) -> Callable[..., tuple[Any, ...]]:
    """A function of the ``count`` kernel arguments and the cotangents of outputs
    ``seeded`` that returns the gradients of arguments ``wrt`` (``jax.vjp``)."""

    def gradients(*values: Any) -> tuple[Any, ...]:
        args, seeds = list(values[:count]), values[count:]

        def differentiated(*leaves: Any) -> tuple[Any, ...]:
            full = list(args)
            for k, leaf in zip(wrt, leaves, strict=True):
                full[k] = leaf
            outputs = kernel(*full)
            return tuple(outputs[i] for i in seeded)

        _, pullback = jax.vjp(differentiated, *(args[k] for k in wrt))
        return tuple(pullback(tuple(seeds)))

    return gradients


def refuse(op_type: str, why: str) -> UsageError:
    """A one-line ``UsageError`` for a case JAX cannot run, naming the operator."""
    return UsageError(f"{op_type}: the jax backend cannot run this: {why}")
