"""What every TensorFlow operator shares: input slots, layouts, and the timed callables.

An operator declares its inputs as :class:`Slot` s and builds a :class:`Plan`: a
*kernel* (a Python function of TensorFlow tensors that makes only TensorFlow calls) and
the :class:`Layout` each input and output has on the kernel's side. The kernel is traced
once into a graph (``tf.function``, with ``jit_compile=True`` for the XLA backend) per
signature: dtype, shapes and the values of static inputs. Everything else (checking
shapes and dtypes, reading a ``Reshape`` shape, converting numpy arrays to tensors,
transposing NCHW data to TensorFlow's channels-last layout, tracing and compiling)
happens when a callable is prepared, outside the region d5 times. The timed callables
run one graph each; :meth:`TFOperator.forward` and :meth:`TFOperator.backward` go
through the same graphs, so what is validated is what is timed.
"""

from __future__ import annotations

import re
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from d5_plugin_tensorflow._tf import tensorflow
from d5core.api import UsageError
from d5core.onnx import BackendOperator, InputSlot
from d5core.onnx import Signature as PlanSignature

__all__ = [
    "FLOAT_DTYPES",
    "Kernel",
    "Layout",
    "Plan",
    "Prepared",
    "Signature",
    "Slot",
    "TFOperator",
    "one_line",
]

tf = tensorflow()

#: Element types of floating inputs, by numpy name.
FLOAT_DTYPES: dict[str, Any] = {"float32": tf.float32, "float64": tf.float64}

#: A function of TensorFlow tensors that returns the operator's outputs as a tuple.
Kernel = Callable[..., tuple[Any, ...]]

#: Errors TensorFlow raises for inputs it rejects (while tracing, compiling or running);
#: they become one-line ``UsageError`` s.
_TF_ERRORS = (tf.errors.OpError, ValueError, TypeError, IndexError)


#: One input of an operator, as ONNX names it (:class:`d5core.api.InputSlot`).
Slot = InputSlot


@dataclass(frozen=True)
class Signature(PlanSignature):
    """The inputs a kernel is built for; ``dtype`` is the float type's numpy name."""

    @property
    def tf_dtype(self) -> Any:
        """The TensorFlow dtype of the float inputs."""
        return FLOAT_DTYPES[self.dtype]

    def key(self) -> tuple[Any, ...]:
        """What identifies the kernel built for this signature: the dtype, the shapes
        and the values of static inputs."""
        statics = tuple(
            None
            if a is None or s.kind != "static"
            else (str(a.dtype), tuple(a.reshape(-1).tolist()))
            for s, a in zip(self.slots, self.arrays, strict=True)
        )
        return self.dtype, self.shapes, statics


@dataclass(frozen=True)
class Layout:
    """How an array in ONNX's layout maps to the tensor the kernel takes or gives.

    On the way in the array is transposed by ``perm``, then reshaped to ``kernel_shape``
    (when given): NCHW to NHWC, a 1-D convolution's ``(N, C, W)`` to ``(N, 1, W, C)``, a
    per-channel vector to ``(1, C, 1, 1)``. Gradients and outputs take the way back.
    Both directions are numpy work, done outside the timed region.
    """

    #: The array's shape in ONNX's layout.
    shape: tuple[int, ...]
    perm: tuple[int, ...]
    kernel_shape: tuple[int, ...] | None = None

    def to_kernel(self, array: np.ndarray) -> np.ndarray:
        """``array`` (ONNX layout) as the kernel takes it, contiguous."""
        moved = np.transpose(np.asarray(array), self.perm)
        if self.kernel_shape is not None:
            moved = moved.reshape(self.kernel_shape)
        return moved.copy(order="C")

    def from_kernel(self, array: np.ndarray) -> np.ndarray:
        """A kernel-side ``array`` back in ONNX's layout."""
        permuted = tuple(self.shape[p] for p in self.perm)
        back = np.asarray(array).reshape(permuted)
        return np.transpose(back, np.argsort(self.perm)).copy(order="C")

    @classmethod
    def reshaped(cls, shape: Sequence[int], kernel_shape: Sequence[int]) -> Layout:
        """A reshape alone (no transpose)."""
        return cls(tuple(shape), tuple(range(len(shape))), tuple(kernel_shape))


@dataclass(frozen=True)
class Plan:
    """A kernel with the layouts of its arguments and outputs.

    ``inputs`` has one entry per kernel argument (the float and index inputs that are
    present, in input order), ``outputs`` one per output; ``None`` means the ONNX layout.
    """

    kernel: Kernel
    inputs: tuple[Layout | None, ...] = ()
    outputs: tuple[Layout | None, ...] = ()
    #: What the timed graph does besides the operator's own TensorFlow call, worth
    #: knowing when comparing timings (an explicit ``tf.pad``, groups split in two).
    notes: tuple[str, ...] = ()


class Prepared:
    """A traced graph with its argument tensors: the callable d5 times.

    Calling it runs the graph once and returns its results as TensorFlow tensors, in
    the kernel's layout; :meth:`to_numpy` gives them as numpy arrays in ONNX's layout
    (work that stays outside the timed region).
    """

    __slots__ = ("args", "function", "layouts", "positions", "translate")

    def __init__(
        self,
        function: Any,
        args: tuple[Any, ...],
        translate: Callable[[BaseException], UsageError],
        layouts: tuple[Layout | None, ...],
        positions: tuple[int, ...],
    ) -> None:
        #: The traced graph (a ``ConcreteFunction``).
        self.function = function
        #: Its argument tensors, converted when it was prepared.
        self.args = args
        self.translate = translate
        #: The layout of each result.
        self.layouts = layouts
        #: The output (forward) or input (backward) position of each result.
        self.positions = positions

    def __call__(self) -> tuple[Any, ...]:
        try:
            return self.function(*self.args)  # type: ignore[no-any-return]
        except _TF_ERRORS as exc:
            raise self.translate(exc) from exc

    def to_numpy(self, results: Sequence[Any]) -> list[np.ndarray]:
        """``results`` of a call as numpy arrays in ONNX's layout."""
        return [_to_numpy(t, layout) for t, layout in zip(results, self.layouts, strict=True)]


class TFOperator(BackendOperator):
    """An ONNX operator run by TensorFlow on the CPU, in graph mode.

    Subclasses set :attr:`slots` and :attr:`attribute_defaults`, check their attributes in
    :meth:`configure`, check input shapes in :meth:`check`, and return the kernel and its
    layouts from :meth:`build`.
    """

    signature_class = Signature

    def __init__(self, attributes: Mapping[str, Any] | None = None, *, xla: bool = False) -> None:
        super().__init__(attributes)
        #: Whether every graph is compiled by XLA (``jit_compile=True``).
        self.xla = xla
        #: The backend's name, for messages.
        self.backend = "tensorflow-xla" if xla else "tensorflow"
        self.device = "cpu"
        #: The layout of the data the timed graph works on, such as ``"NHWC"`` (empty for
        #: operators that have none); set when inputs are checked.
        self.timed_layout = ""
        #: What the timed graph does besides the operator's own TensorFlow call; set when
        #: a callable is prepared.
        self.timed_notes: tuple[str, ...] = ()
        self._functions: dict[tuple[Any, ...], Any] = {}
        self._plans: dict[tuple[Any, ...], Plan] = {}
        self.configure()

    # -- what subclasses provide --------------------------------------------

    def layout_of(self, sig: Signature) -> str:
        """The layout the timed graph works on for inputs matching ``sig``."""
        return ""

    @abstractmethod
    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        """The TensorFlow computation for inputs matching ``sig``.

        The kernel takes one tensor per ``float`` or ``index`` input that is present, in
        input order, in the layout the plan gives it, and returns the outputs as a tuple.
        ``for_grad`` is true when the kernel will be differentiated.
        """

    # -- helpers for subclasses ---------------------------------------------

    def refuse(self, what: str) -> UsageError:
        """A ``UsageError`` for a case TensorFlow's CPU kernels cannot run, pointing to
        the XLA backend, which compiles its own."""
        return self.fail(f"{what}; use the tensorflow-xla backend")

    # -- Operator -------------------------------------------------------------

    def details(self) -> dict[str, Any]:
        """What a stored result should keep about the timed graph: its layout, whether
        XLA compiled it, and the notes of :class:`Plan`."""
        return {
            "backend": self.backend,
            "timed_layout": self.timed_layout,
            "jit_compile": self.xla,
            "notes": list(self.timed_notes),
        }

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the forward graph on numpy arrays (converting in and out)."""
        prepared = self._bind_forward(inputs)
        return prepared.to_numpy(prepared())

    def gradients(
        self, grad_outputs: Sequence[np.ndarray | None], inputs: Sequence[np.ndarray]
    ) -> tuple[tuple[int, ...], list[np.ndarray]]:
        """The gradients of the differentiable inputs by ``tf.GradientTape``, with their
        positions; the graph recomputes what the gradient needs from ``inputs``."""
        prepared = self._bind_backward(grad_outputs, inputs)
        return prepared.positions, prepared.to_numpy(prepared())

    def prepare_forward(self, inputs: Sequence[np.ndarray]) -> Prepared:
        """Convert ``inputs`` to tensors once (in the kernel's layout), trace the graph
        and run it once (which compiles it under XLA); return the timed callable.

        The callable makes one call of the traced graph (a ``ConcreteFunction``) and
        returns its output tensors, in the kernel's layout (its ``to_numpy`` gives them
        in ONNX's). On the CPU TensorFlow computes synchronously: the outputs are ready
        when the call returns.
        """
        prepared = self._bind_forward(inputs)
        prepared()
        return prepared

    def prepare_backward(
        self, grad_outputs: Sequence[np.ndarray | None], inputs: Sequence[np.ndarray]
    ) -> Prepared:
        """Trace the gradient graph (``tf.GradientTape`` inside a ``tf.function``) for
        these output gradients, convert everything once and run it once; return a
        callable that runs the graph and returns the gradients of the differentiable
        inputs, in input order (in the kernel's layout).

        Unlike torch's autograd, a TensorFlow graph keeps nothing between calls: the
        gradient graph recomputes the forward results the gradient needs (a ``Relu``'s
        output, a ``Softmax``'s probabilities); graph optimization prunes the rest.
        """
        prepared = self._bind_backward(grad_outputs, inputs)
        prepared()
        return prepared

    # -- machinery --------------------------------------------------------------

    def _bind_forward(self, inputs: Sequence[np.ndarray | None]) -> Prepared:
        sig = self._checked(inputs)
        plan = self._plan(sig, for_grad=False)
        return self._forward(sig, plan, self._tensors(sig, plan)[1])

    def _forward(self, sig: Signature, plan: Plan, args: tuple[Any, ...]) -> Prepared:
        translate = self._translator(sig.shapes)
        key = ("forward", *sig.key())
        function = self._functions.get(key)
        if function is None:
            kernel = plan.kernel

            def graph(*tensors: Any) -> tuple[Any, ...]:
                return tuple(kernel(*tensors))

            function = self._trace(graph, args, translate)
            self._functions[key] = function
        count = len(function.structured_outputs)
        layouts = plan.outputs or (None,) * count
        return Prepared(function, args, translate, layouts, tuple(range(count)))

    def _bind_backward(
        self, grad_outputs: Sequence[np.ndarray | None], inputs: Sequence[np.ndarray | None]
    ) -> Prepared:
        sig = self._checked(inputs)
        plan = self._plan(sig, for_grad=True)
        positions, args = self._tensors(sig, plan)
        forward_plan = self._plan(sig, for_grad=False)
        same = forward_plan.inputs == plan.inputs
        forward = self._forward(
            sig, forward_plan, args if same else self._tensors(sig, forward_plan)[1]
        )
        self.timed_notes = plan.notes
        out_specs = forward.function.structured_outputs
        self.check_output_gradients(len(grad_outputs), len(out_specs))
        seeded: list[int] = []
        seeds: list[Any] = []
        for i, (spec, given) in enumerate(zip(out_specs, grad_outputs, strict=False)):
            if given is None or not spec.dtype.is_floating:
                continue
            layout = forward.layouts[i]
            shape = layout.shape if layout is not None else tuple(spec.shape.as_list())
            seed = np.asarray(given)
            if tuple(seed.shape) != tuple(shape):
                raise self.fail(
                    f"gradient of output {i} has shape {_fmt(seed.shape)}, "
                    f"but the output has shape {_fmt(shape)}"
                )
            kernel_seed = seed if layout is None else layout.to_kernel(seed)
            seeds.append(tf.constant(kernel_seed, dtype=spec.dtype))
            seeded.append(i)
        differentiated = tuple(
            k
            for k, pos in enumerate(positions)
            if sig.slots[pos].kind == "float" and sig.slots[pos].differentiable
        )
        grad_positions = tuple(positions[k] for k in differentiated)
        grad_layouts = tuple(plan.inputs[k] if plan.inputs else None for k in differentiated)
        if not seeded or not differentiated:
            zeros = tuple(tf.zeros_like(args[k]) for k in differentiated)
            return Prepared(lambda: zeros, (), forward.translate, grad_layouts, grad_positions)
        key = ("backward", tuple(seeded), *sig.key())
        function = self._functions.get(key)
        if function is None:
            function = self._trace(
                _gradient_graph(plan.kernel, len(args), differentiated, tuple(seeded)),
                (*args, *seeds),
                forward.translate,
            )
            self._functions[key] = function
        return Prepared(function, (*args, *seeds), forward.translate, grad_layouts, grad_positions)

    def _trace(
        self, graph: Callable[..., Any], args: Sequence[Any], translate: Callable[..., UsageError]
    ) -> Any:
        """The concrete function of ``graph`` for tensors like ``args`` (traced now)."""
        function = tf.function(graph, jit_compile=self.xla, autograph=False)
        specs = [tf.TensorSpec(a.shape, a.dtype) for a in args]
        try:
            return function.get_concrete_function(*specs)
        except _TF_ERRORS as exc:
            raise translate(exc) from exc

    def _checked(self, inputs: Sequence[np.ndarray | None]) -> Signature:
        """The signature of arrays, checked."""
        arrays = [None if a is None else np.asarray(a) for a in inputs]
        return self._signature(arrays, values_known=True)

    def _plan(self, sig: Signature, *, for_grad: bool) -> Plan:
        """The plan for ``sig``, built once (gradient checks run forward hundreds of
        times on one signature)."""
        key = (for_grad, *sig.key())
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = self.build(sig, for_grad=for_grad)
        self.timed_notes = plan.notes
        return plan

    def _tensors(self, sig: Signature, plan: Plan) -> tuple[tuple[int, ...], tuple[Any, ...]]:
        """The input position of each kernel argument, and the arguments: the float and
        index inputs, laid out for the kernel and converted to tensors."""
        positions = tuple(
            pos
            for pos, (slot, array) in enumerate(zip(sig.slots, sig.arrays, strict=True))
            if slot.kind != "static" and array is not None
        )
        if plan.inputs and len(plan.inputs) != len(positions):
            raise AssertionError(f"{self.op_type}: the plan lays out {len(plan.inputs)} inputs")
        args = []
        for k, pos in enumerate(positions):
            array = sig.arrays[pos]
            assert array is not None
            layout = plan.inputs[k] if plan.inputs else None
            data = array if layout is None else layout.to_kernel(array)
            kind = sig.slots[pos].kind
            dtype = tf.int64 if kind == "index" else tf.bool if kind == "bool" else sig.tf_dtype
            args.append(tf.constant(data, dtype=dtype))
        return positions, tuple(args)

    def _signature(self, arrays: Sequence[Any], *, values_known: bool) -> Signature:
        sig: Signature = super()._signature(arrays, values_known=values_known)
        self.timed_layout = self.layout_of(sig)
        return sig

    def _translator(
        self, shapes: Sequence[tuple[int, ...] | None]
    ) -> Callable[[BaseException], UsageError]:
        described = ", ".join(_fmt(s) for s in shapes)
        xla = self.xla

        def translate(exc: BaseException) -> UsageError:
            message = one_line(exc)
            if xla and _is_xla_refusal(exc, message):
                return self.fail(
                    f"XLA cannot compile it for inputs of shapes {described} ({message}); "
                    f"use the tensorflow backend"
                )
            return self.fail(f"{self.backend} rejected inputs of shapes {described}: {message}")

        return translate


def _gradient_graph(
    kernel: Kernel, count: int, differentiated: tuple[int, ...], seeded: tuple[int, ...]
) -> Callable[..., tuple[Any, ...]]:
    """The graph of the gradients of kernel arguments ``differentiated`` for the seeds
    (cotangents) of outputs ``seeded``; it takes the ``count`` kernel arguments, then
    the seeds."""

    def gradients(*tensors: Any) -> tuple[Any, ...]:
        args, seeds = tensors[:count], tensors[count:]
        leaves = [args[k] for k in differentiated]
        with tf.GradientTape() as tape:
            for leaf in leaves:
                tape.watch(leaf)
            outputs = kernel(*args)
        roots = [outputs[i] for i in seeded]
        grads = tape.gradient(
            roots,
            leaves,
            output_gradients=list(seeds),
            unconnected_gradients=tf.UnconnectedGradients.ZERO,
        )
        return tuple(tf.convert_to_tensor(g) for g in grads)

    return gradients


#: Pieces of TensorFlow's messages that say where, not what.
_NOISE = re.compile(
    r" for '\{\{node [^']*'|\S*__inference_\S*|\{\{[^}]*\}\}|\[\[[^\]]*\]\]|\[Op:[^\]]*\]|name: ?$"
)


def one_line(exc: BaseException) -> str:
    """The line of a TensorFlow error that says what went wrong, without the node names,
    the Python traceback of the graph's definition or the function names around it."""
    text = getattr(exc, "message", None) or str(exc)
    lines = []
    for raw in str(text).splitlines():
        line = raw.strip()
        if not line or line.startswith(("File ", "Detected at node", "Stack trace")):
            continue
        if line.endswith(":") and ("Graph execution error" in line or "defined at" in line):
            continue
        line = " ".join(_NOISE.sub("", line).split())
        if line:
            lines.append(line)
    return lines[0] if lines else type(exc).__name__


def _is_xla_refusal(exc: BaseException, message: str) -> bool:
    text = f"{message} {getattr(exc, 'message', '')}"
    return isinstance(exc, tf.errors.UnimplementedError) or any(
        word in text for word in ("XLA", "compile", "Unsupported", "unsupported")
    )


def _fmt(shape: Sequence[int] | None) -> str:
    return "absent" if shape is None else str(tuple(int(d) for d in shape))


def _to_numpy(tensor: Any, layout: Layout | None) -> np.ndarray:
    array = np.asarray(tensor.numpy())
    return array if layout is None else layout.from_kernel(array)
