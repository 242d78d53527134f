"""The JAX graph executor, registered as ``jax`` in the ``d5.frameworks`` group.

:class:`JaxExecutor` lowers an ONNX graph, node by node, to one pure JAX function
(:class:`~d5_plugin_jax.graph.program.Program`; the translations are in
:mod:`d5_plugin_jax.graph`) and runs it compiled by ``jax.jit``: inference, or forward
and backward together (``jax.vjp`` of the loss output). JAX traces and compiles the
function once per signature of its arguments (shapes and dtypes); later calls run the
compiled XLA computation.

Parameters are held as JAX arrays in :attr:`JaxExecutor.params` (name -> ``jax.Array``,
ONNX layout), passed to the compiled function on every call, so that a new value
(:meth:`~JaxExecutor.set_parameters`, or an optimizer writing new arrays into the dict)
needs no new compilation. Values a node needs while tracing (integer initializers, a
parameter read as a shape or a ratio, a fed shape) are numpy constants of the trace; a
new value of one of those compiles again.

Modes match the numpy reference executor: :meth:`~JaxExecutor.inference` runs Dropout
as the identity and BatchNormalization with its running statistics;
:meth:`~JaxExecutor.inference_and_backprop` runs both in training mode, with the
reference's Dropout mask (``numpy.random.default_rng(seed).random(shape) >= ratio``,
fixed per traced shape). Training-mode BatchNormalization computes new running
statistics (biased variance, ``momentum`` weighting the old value); they are kept in
:attr:`JaxExecutor.running_stats` and written into the parameters only by
``apply_running_stats``.

Types. Every call runs in JAX's x64 mode (:func:`d5_plugin_jax._jax.x64`, scoped to
the call), so that int64 indices and float64 networks keep ONNX's types; a float64
network on a JAX without x64 is a one-line ``UsageError``.

Compile time. The ``prepare_*`` methods compile ahead of time
(``jit(...).lower(...).compile()``), so that the callables they return run compiled code
only; the seconds spent are kept in :attr:`JaxExecutor.compile_seconds` and reported by
:meth:`~JaxExecutor.details`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, ClassVar

import numpy as np
import onnx

from d5_plugin_jax._jax import PENDING, jax, x64
from d5_plugin_jax.graph import REGISTRY
from d5_plugin_jax.graph.program import Program, static_input_names
from d5_plugin_jax.training import JaxNativeTraining
from d5core.api import GraphExecutor, UsageError
from d5core.onnx import graph_view

__all__ = ["JaxExecutor"]

_jax = jax()
jnp = _jax.numpy

#: A function of the parameters and the dynamic feeds, as ``jax.jit`` compiles it.
StepFn = Callable[[Mapping[str, Any], Mapping[str, Any]], Any]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class JaxExecutor(GraphExecutor, JaxNativeTraining):
    """Runs an ONNX network as one ``jax.jit``-compiled function.

    It offers d5's native training path (:class:`d5core.api.NativeTraining`, from
    :class:`~d5_plugin_jax.training.JaxNativeTraining`) so that the ``jax-*``
    optimizers train :attr:`params` without a numpy round trip.

    :param network: a ``d5core.api.Network`` or an ``onnx.ModelProto``.
    :param device: ``"cpu"`` (the only device this executor runs on).
    """

    name: ClassVar[str] = "jax"
    trains: ClassVar[bool] = True
    #: JAX dispatches asynchronously: a call returns before its computation is done, so
    #: timings wait for it through the ``d5_synchronize`` hook (the prepared callables
    #: leave their outputs in :data:`d5_plugin_jax._jax.PENDING` for it).
    asynchronous: ClassVar[bool] = True
    #: Every operator type the executor translates.
    supported_ops: ClassVar[frozenset[str]] = frozenset(REGISTRY)

    def __init__(self, network: Any, *, device: str = "cpu") -> None:
        super().__init__(network, device=device)
        if device.partition(":")[0] != "cpu":
            raise UsageError(f"the jax executor runs on the CPU only, not {device!r}; use 'cpu'")
        self._graph = graph = graph_view(self.network)
        #: each graph input's name and declared dtype, read once (feeds are checked
        #: against them every step)
        self._declared = [(v.name, v.dtype) for v in self.network.inputs if v.dtype]
        self.check_supported()
        self._wide = self._needs_x64()
        static_names = static_input_names(graph)
        #: Values read as numpy constants while tracing, by name.
        self._statics = {
            name: value
            for name, value in graph.parameters.items()
            if not np.issubdtype(value.dtype, np.floating) or name in static_names
        }
        #: The integer graph inputs whose values a node needs while tracing: part of
        #: what is compiled (one compilation per value); a float one is refused there.
        self._fed_statics = [
            v.name
            for v in self.network.inputs
            if v.name in static_names and v.dtype and np.dtype(v.dtype).kind in "biu"
        ]
        with self._scope():
            #: Every parameter as a JAX array, by name (ONNX layout), and the large values
            #: the graph computes from constants alone (:attr:`.Program.hoisted`), which
            #: the compiled function takes as arguments too.
            self.params: dict[str, Any] = {
                name: jnp.asarray(value) for name, value in graph.parameters.items()
            }
            #: The graph as one pure function (see :class:`~.graph.program.Program`).
            self.program = self._build_program()
        #: The trainable parameters, in the network's order.
        self.trainable: list[str] = list(graph.trainable)
        #: The trainable parameters that get a gradient from the compiled function.
        self.grad_names: list[str] = [
            n
            for n in self.trainable
            if n not in self._statics and np.issubdtype(graph.parameters[n].dtype, np.floating)
        ]
        #: Running statistics of the last training pass, by parameter name.
        self.running_stats: dict[str, Any] = {}
        #: Seconds spent compiling ahead of time, by what was compiled
        #: (``"inference"``, ``"train_step"``), the last of each.
        self.compile_seconds: dict[str, float] = {}
        self._jitted: dict[tuple[Any, ...], Any] = {}

    # -- construction -------------------------------------------------------------------

    def check_supported(self) -> None:
        """Raise a one-line :class:`UsageError` naming the first node whose operator
        this executor does not translate, or that reads or gives a value JAX has no
        arrays of (a sequence, map, optional or string tensor)."""
        graph = self.model.graph
        values = [*graph.input, *graph.output, *graph.value_info]
        not_arrays = {
            v.name
            for v in values
            if v.type.WhichOneof("value") not in ("tensor_type", None)
            or v.type.tensor_type.elem_type == onnx.TensorProto.STRING
        }
        not_arrays.update(
            t.name for t in graph.initializer if t.data_type == onnx.TensorProto.STRING
        )
        for node in self._graph.nodes:
            if node.op_type not in REGISTRY or node.domain not in ("", "ai.onnx", "ai.d5"):
                raise self.unsupported(node.op_type, node.name, node.domain)
            if not_arrays.intersection([*node.input, *node.output]):
                raise UsageError(
                    f"the jax executor does not support operator {node.op_type!r} on "
                    f"sequence, map, optional or string values (node {node.name!r}); "
                    "it runs numeric tensors"
                )

    def _build_program(self) -> Program:
        """The program of the graph with the current static values (call in
        :meth:`_scope`); its hoisted constants go into :attr:`params`."""
        program = Program(self._graph, self._statics)
        for name in getattr(self, "program", program).hoisted:
            self.params.pop(name, None)
        self.params.update((k, jnp.asarray(v)) for k, v in program.hoisted.items())
        return program

    def _needs_x64(self) -> bool:
        """Whether the network holds float64 values (then x64 mode is required)."""
        dtypes = [v.dtype for v in self._graph.parameters.values()]
        dtypes += [np.dtype(d) for d in self._graph.output_types.values() if d is not None]
        dtypes += [np.dtype(v.dtype) for v in self.network.inputs if v.dtype]
        return any(np.dtype(d) == np.float64 for d in dtypes)

    @contextmanager
    def _scope(self) -> Iterator[None]:
        """x64 mode for one call; for a network without float64 values, 32 bits where
        this JAX refuses x64."""
        try:
            manager = x64(what=f"network {self.network.name!r}")
            manager.__enter__()
        except UsageError:
            if self._wide:
                raise
            yield
            return
        try:
            yield
        finally:
            manager.__exit__(None, None, None)

    # -- the compiled functions ---------------------------------------------------------

    def _static_key(self, feeds: Mapping[str, Any]) -> tuple[Any, ...]:
        key = []
        for name in self._fed_statics:
            value = np.asarray(feeds[name])
            key.append((name, value.dtype.str, value.shape, value.tobytes()))
        return tuple(key)

    def _fixed(self, key: tuple[Any, ...]) -> dict[str, np.ndarray]:
        return {
            name: np.frombuffer(data, dtype=np.dtype(dt)).reshape(shape)
            for name, dt, shape, data in key
        }

    def inference_function(self, key: tuple[Any, ...] = ()) -> StepFn:
        """The pure inference function ``(params, feeds) -> outputs`` (not jitted), for
        the static feeds of ``key``."""
        program, fixed = self.program, self._fixed(key)

        def infer(params: Mapping[str, Any], feeds: Mapping[str, Any]) -> dict[str, Any]:
            return program.apply(params, {**feeds, **fixed}, False, None)[0]

        return infer

    def train_function(self, loss: str, key: tuple[Any, ...] = ()) -> StepFn:
        """The pure training-mode function ``(params, feeds) -> (outputs, grads,
        stats)`` (not jitted): every graph output, the gradient of ``loss`` for each
        name in :attr:`grad_names`, and BatchNormalization's new running statistics."""
        if not self.program.has_tensor(loss):
            raise UsageError(f"{loss!r} is not a tensor of the network")
        program, fixed, names = self.program, self._fixed(key), list(self.grad_names)
        fetch = () if loss in self._graph.outputs else (loss,)
        rng = None

        def train(params: Mapping[str, Any], feeds: Mapping[str, Any]) -> Any:
            others = {k: v for k, v in params.items() if k not in names}
            all_feeds = {**feeds, **fixed}

            def forward(trained: dict[str, Any]) -> tuple[Any, tuple[Any, Any]]:
                outputs, stats = program.apply({**others, **trained}, all_feeds, True, rng, fetch)
                value = outputs.pop(loss) if fetch else outputs[loss]
                return value, (outputs, stats)

            value, vjp, (outputs, stats) = _jax.vjp(
                forward, {n: params[n] for n in names}, has_aux=True
            )
            (grads,) = vjp(jnp.ones_like(value))
            return outputs, grads, stats

        return train

    def _function(self, training: bool, loss: str | None, key: tuple[Any, ...]) -> Any:
        found = self._jitted.get((training, loss, key))
        if found is None:
            fn = self.train_function(loss or "", key) if training else self.inference_function(key)
            found = self._jitted[(training, loss, key)] = _jax.jit(fn)
        return found

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` in the executor's scope, JAX's errors as one-line UsageErrors."""
        with self._scope():
            try:
                return fn(*args)
            except UsageError as exc:  # JAX appends notes to errors raised while tracing
                raise UsageError(_first_line(exc)) from None
            except Exception as exc:
                raise UsageError(f"the jax executor failed: {_first_line(exc)}") from None

    def _compile(self, what: str, fn: Any, feeds: Mapping[str, Any]) -> Any:
        """``fn`` compiled ahead for these parameters and feeds; the seconds it took go
        into :attr:`compile_seconds`."""
        start = time.perf_counter()
        compiled = self._call(lambda: fn.lower(self.params, feeds).compile())
        self.compile_seconds[what] = time.perf_counter() - start
        return compiled

    # -- running ------------------------------------------------------------------------

    def _to_arrays(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        self._graph.check_feeds(feeds)
        for name, declared in self._declared:
            dtype = getattr(feeds[name], "dtype", None)
            if dtype is not None and np.dtype(dtype) != declared:
                raise UsageError(
                    f"input {name!r} is {np.dtype(dtype).name}; the network "
                    f"declares {np.dtype(declared).name}: cast the feed"
                )
        with self._scope():
            return {
                k: v if isinstance(v, _jax.Array) else jnp.asarray(np.asarray(v))
                for k, v in feeds.items()
                if k not in self._fed_statics
            }

    def _outputs(self, outputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        return {name: np.asarray(outputs[name]) for name in self._graph.outputs}

    def _keep_stats(self, stats: Mapping[str, Any]) -> None:
        for name, value in stats.items():
            self.running_stats[name] = value

    def run_inference(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """One inference pass on ``feeds`` (numpy or JAX arrays); JAX arrays by name."""
        arrays = self._to_arrays(feeds)
        fn = self._function(False, None, self._static_key(feeds))
        result: dict[str, Any] = self._call(fn, self.params, arrays)
        return result

    def run_train_step(self, feeds: Mapping[str, Any], loss: str) -> tuple[Any, Any]:
        """One training-mode forward and backward pass; the outputs and the gradients
        (of :attr:`grad_names`) as JAX arrays by name. Running statistics are kept."""
        arrays = self._to_arrays(feeds)
        fn = self._function(True, loss, self._static_key(feeds))
        outputs, grads, stats = self._call(fn, self.params, arrays)
        self._keep_stats(stats)
        return outputs, grads

    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the graph in inference mode; every graph output by name."""
        return self._outputs(self.run_inference(feeds))

    def inference_and_backprop(
        self, feeds: Mapping[str, np.ndarray], loss: str
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Run in training mode and differentiate ``loss`` with ``jax.vjp``.

        :return: every graph output, and the gradient of every trainable parameter
            (zeros for one the loss does not depend on), as numpy arrays by name.
        """
        outputs, grads = self.run_train_step(feeds, loss)
        result = {}
        for name in self.trainable:
            found = grads.get(name)
            result[name] = (
                np.asarray(found)
                if found is not None
                else np.zeros_like(self._graph.parameters[name])
            )
        return self._outputs(outputs), result

    def prepare_inference(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """Convert ``feeds`` and compile now; the callable runs the compiled function
        (on the current :attr:`params`) and returns its outputs by name."""
        arrays = self._to_arrays(feeds)
        compiled = self._compile(
            "inference", self._function(False, None, self._static_key(feeds)), arrays
        )
        executor = self

        def run() -> dict[str, Any]:
            outputs: dict[str, Any] = compiled(executor.params, arrays)
            PENDING[0] = outputs
            return outputs

        return run

    def prepare_train_step(
        self, feeds: Mapping[str, np.ndarray], loss: str
    ) -> Callable[[], object]:
        """Convert ``feeds`` and compile now; the callable runs forward and backward
        only and returns the outputs by name and the gradients in trainable order."""
        arrays = self._to_arrays(feeds)
        compiled = self._compile(
            "train_step", self._function(True, loss, self._static_key(feeds)), arrays
        )
        executor, names = self, list(self.grad_names)

        def step() -> tuple[dict[str, Any], tuple[Any, ...]]:
            outputs, grads, stats = compiled(executor.params, arrays)
            executor._keep_stats(stats)
            ordered = tuple(grads[n] for n in names)
            PENDING[0] = (outputs, ordered)
            return outputs, ordered

        return step

    def details(self) -> dict[str, Any]:
        """The seconds the last ahead-of-time compilations took (``compile_s``, by what
        was compiled), apart from the run times benchmarks measure."""
        if not self.compile_seconds:
            return {}
        return {"compile_s": {k: round(v, 6) for k, v in self.compile_seconds.items()}}

    # -- parameters ---------------------------------------------------------------------

    def get_parameters(self) -> dict[str, np.ndarray]:
        """Every parameter (initializer) by name, as numpy copies."""
        return {name: np.array(self.params[name], copy=True) for name in self._graph.parameters}

    def set_parameters(self, params: Mapping[str, Any]) -> None:
        """Replace parameters by name; each must exist and keep its shape. A parameter
        read as a static value (a shape, a ratio) compiles the graph again."""
        for name, value in params.items():
            known = self._graph.parameters.get(name)
            if known is None:
                raise UsageError(f"the network has no parameter {name!r}")
            array = np.asarray(value)
            if array.shape != known.shape:
                raise UsageError(f"parameter {name!r} has shape {known.shape}, not {array.shape}")
            array = array.astype(known.dtype, copy=False)
            with self._scope():
                self.params[name] = jnp.asarray(array)
                if name in self._statics:
                    self._statics[name] = np.array(array, copy=True)
                    self.program = self._build_program()
                    self._jitted.clear()
