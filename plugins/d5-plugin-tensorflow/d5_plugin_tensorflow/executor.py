"""The TensorFlow graph executor, registered as ``tensorflow`` in the ``d5.frameworks`` group.

:class:`TensorFlowExecutor` translates an ONNX graph once, node by node, into TensorFlow
ops (:mod:`d5_plugin_tensorflow.graph.nodes`; no ONNX converter is involved) and runs the
whole graph as ONE ``tf.function``: inference, or forward and backward together under a
``tf.GradientTape``. TensorFlow traces the function once per input signature and runs
the traced graph afterwards, optimised by its graph optimizer (Grappler) and, with
``jit_compile=True`` (:class:`TensorFlowXLAExecutor`, ``tensorflow-xla``), compiled by XLA.

Layout. TensorFlow's CPU convolution and pooling kernels take channels-last tensors
``(N, H, W, C)``; ONNX's are ``(N, C, H, W)``. Convolution and pooling nodes run
channels-last, and so do the nodes that do not care about the layout (element-wise
ones, BatchNormalization, LRN, Concat, GlobalAveragePool) when their input already is,
so a ResNet or VGG body transposes once on entry and once where a Flatten, Reshape or
Gemm needs the ONNX layout back (:mod:`d5_plugin_tensorflow.graph.layout`); the ONNX
form of a channels-last activation is made only where some node reads it.

Parameters are ``tf.Variable``s, the live tensors an optimizer updates. A convolution
weight (Conv or ConvTranspose input 1, read by no other node) is kept in TensorFlow's
kernel layout, so that the graph reads it with no transpose: Conv's ONNX ``(M, C/group,
*k)`` as ``(*k, C/group, M)``, ConvTranspose's ``(C, M/group, *k)`` as ``(*k, M/group,
C)`` (:func:`~d5_plugin_tensorflow.graph.layout.kernel_perm`). A Gemm weight whose
input A is the Flatten of a channels-last activation keeps its ``C*H*W`` axis in
``H*W*C`` order, so that the Flatten reshapes the channels-last form as it is
(:func:`~d5_plugin_tensorflow.graph.layout.flat_weight_layout`). Every other parameter
keeps its ONNX shape; per-channel ones (BatchNormalization's, a bias) are ``(C,)`` and
broadcast against the channels-last activations as they are. What speaks ONNX speaks
ONNX's layout: :meth:`~TensorFlowExecutor.get_parameters`,
:meth:`~TensorFlowExecutor.set_parameters` and the numpy gradients of
:meth:`~TensorFlowExecutor.inference_and_backprop` are transposed on the host, outside
the compiled function. The native training API
(:meth:`~TensorFlowExecutor.native_parameters`,
:meth:`~TensorFlowExecutor.native_train_step`) gives the variables and their gradients
in the variables' own layout (:meth:`~TensorFlowExecutor.native_layouts` says which are
laid out otherwise, and how), which element-wise optimizers (the ``tf-*`` ones) do not mind.

Modes match the numpy reference executor: :meth:`~TensorFlowExecutor.inference` runs
Dropout as the identity and BatchNormalization with its running statistics;
:meth:`~TensorFlowExecutor.inference_and_backprop` runs both in training mode, with the
reference's Dropout mask (``numpy.random.default_rng(seed).random(shape) >= ratio``,
drawn once per traced shape). Training-mode BatchNormalization computes new running
statistics with ONNX's convention (biased variance, ``momentum`` weighting the old
value); they are kept in :attr:`TensorFlowExecutor.running_stats` and written into the
parameters only by :meth:`TensorFlowExecutor.apply_running_stats`.

Static values. Inputs a node needs when the graph is built (a Reshape's shape, axes, a
Dropout ratio) come from constants, initializers, feeds (a trace per fed value) or
nodes computing them from those and from shapes, which are folded while tracing
(:mod:`d5_plugin_tensorflow.graph.program`).

XLA. With op determinism on (as :mod:`d5_plugin_tensorflow._tf` sets it) XLA refuses
TensorFlow's MaxPool gradient; in training mode under XLA, MaxPool takes a gradient
built from slices and selects instead (:func:`~d5_plugin_tensorflow.graph.windows.max_pool`).

Per-node times (``d5 bench net --breakdown``) come from TensorFlow's profiler on the
compiled graph (:mod:`d5_plugin_tensorflow.graph.profile`), forward and backward.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import onnx

from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.correct_counter import VariableCorrectCounter
from d5_plugin_tensorflow.graph.layout import VariableLayout, flat_weight_layout, kernel_perm
from d5_plugin_tensorflow.graph.nodes import CONSTANT_OPS, Translator
from d5_plugin_tensorflow.graph.profile import NodeTimes, profile_calls
from d5_plugin_tensorflow.graph.program import Program, node_of_op
from d5_plugin_tensorflow.trace import active as trace_active
from d5core.api import END, GRAPH_NODE, GraphExecutor, NativeTraining, UsageError, get_bus
from d5core.onnx import GraphView, constant_value, graph_view

__all__ = ["TensorFlowExecutor", "TensorFlowXLAExecutor", "VariableCorrectCounter"]

tf = tensorflow()

_NODE_END = GRAPH_NODE + END
#: A TensorFlow error's pointer to the op that raised it.
_OP_IN_ERROR = re.compile(r"\{\{node ([^}\s]+)\}\}")
#: Unsupported-op wording of XLA's refusal to compile a graph.
_XLA_REFUSAL = re.compile(r"No registered '([^']+)' OpKernel for XLA")
#: Wordings of errors XLA raises while compiling (not while running).
_XLA_COMPILING = re.compile(r"XLA|compile", re.IGNORECASE)


#: Operators whose input 1 may be kept in TensorFlow's kernel layout.
_KERNEL_READERS = frozenset({"Conv", "ConvTranspose"})


def _kernel_weights(graph: GraphView) -> frozenset[str]:
    """The float parameters read only as the weights of Conv or ConvTranspose nodes (and
    not graph outputs): kept in TensorFlow's kernel layout."""
    uses: dict[str, set[tuple[str, int]]] = {}
    for node in graph.nodes:
        for position, name in enumerate(node.input):
            if name:
                uses.setdefault(name, set()).add((node.op_type, position))
    return frozenset(
        name
        for name, value in graph.parameters.items()
        if value.ndim >= 3
        and np.issubdtype(value.dtype, np.floating)
        and name not in graph.outputs
        and uses.get(name)
        and all(op in _KERNEL_READERS and position == 1 for op, position in uses[name])
    )


def _static_dims(model: onnx.ModelProto) -> dict[str, list[int | None]]:
    """The dimensions of every value shape inference can tell (``None`` where unknown)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # a graph onnx cannot infer: no value qualifies
        return {}
    graph = inferred.graph
    dims: dict[str, list[int | None]] = {}
    for value in [*graph.input, *graph.output, *graph.value_info]:
        tensor = value.type.tensor_type
        if value.type.WhichOneof("value") == "tensor_type" and tensor.HasField("shape"):
            dims[value.name] = [
                d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim
            ]
    return dims


def _flat_weights(
    graph: GraphView, model: onnx.ModelProto
) -> tuple[dict[str, VariableLayout], frozenset[str]]:
    """The Gemm weights kept in the order of a channels-last Flatten, and those Flattens'
    outputs.

    A Flatten (axis 1) of an activation ``(N, C, *spatial)`` that a node computes,
    whose output only Gemm nodes read, as A and not transposed, each with a float
    parameter as B that nothing else reads (and neither being a graph output), can
    flatten the channels-last form as it is: each such weight keeps its ``K`` axis in
    the matching order (:func:`~.graph.layout.flat_weight_layout`). That saves the
    transpose back to ONNX's layout on every call (in lenet5 at batch 1, 7% of the
    forward pass).
    """
    readers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    produced: set[str] = set()
    for node in graph.nodes:
        produced.update(o for o in node.output if o)
        for position, name in enumerate(node.input):
            if name:
                readers.setdefault(name, []).append((node, position))
    dims = _static_dims(model)
    outputs = set(graph.outputs)
    layouts: dict[str, VariableLayout] = {}
    flattens: set[str] = set()
    for node in graph.nodes:
        if node.op_type != "Flatten" or not node.input or not node.input[0]:
            continue
        source, flat = node.input[0], node.output[0]
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        shape = dims.get(source)
        if axis != 1 or source not in produced or flat in outputs or not shape:
            continue
        if len(shape) < 3 or any(d is None or d < 1 for d in shape[1:]):
            continue
        channels, spatial = int(shape[1]), tuple(int(d) for d in shape[2:])  # type: ignore[arg-type]
        found: dict[str, VariableLayout] = {}
        for reader, position in readers.get(flat, []):
            attrs = {a.name: a for a in reader.attribute}
            weight = reader.input[1] if len(reader.input) > 1 else ""
            value = graph.parameters.get(weight)
            if (
                reader.op_type != "Gemm"
                or position != 0
                or (attrs["transA"].i if "transA" in attrs else 0)
                or value is None
                or value.ndim != 2
                or not np.issubdtype(value.dtype, np.floating)
                or weight in outputs
                or len(readers.get(weight, [])) != 1
            ):
                found = {}
                break
            trans_b = bool(attrs["transB"].i) if "transB" in attrs else False
            columns = value.shape[0] if trans_b else value.shape[1]
            layout = flat_weight_layout(channels, spatial, int(columns), trans_b)
            if value.size != int(np.prod(layout.view or ())):
                found = {}
                break
            found[weight] = layout
        if found:
            layouts.update(found)
            flattens.add(flat)
    return layouts, frozenset(flattens)


def _device(device: str) -> str:
    """A d5 device (``cpu``, ``gpu``, ``gpu:1``, ``cuda:0``) as a TensorFlow device."""
    kind, _, index = device.partition(":")
    if kind == "cpu":
        return "/CPU:0"
    if kind in ("gpu", "cuda"):
        number = int(index) if index.isdigit() else 0
        if number < len(tf.config.list_physical_devices("GPU")):
            return f"/GPU:{number}"
        raise UsageError(f"TensorFlow sees no GPU {number} (device {device!r}); use device 'cpu'")
    raise UsageError(f"unknown device {device!r} for the tensorflow executor; use 'cpu' or 'gpu:N'")


def _error_line(message: str) -> str:
    """The line of a TensorFlow error that says what went wrong: the one before the
    ``[[{{node ...}}]]`` pointer of a graph execution error, else the first."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if line.startswith("[[{{node") and index > 0:
            return lines[index - 1]
    return lines[0] if lines else "no message"


class TensorFlowExecutor(GraphExecutor, NativeTraining):
    """Runs an ONNX network as one TensorFlow ``tf.function``, translated node by node.

    It offers d5's native training path (:class:`d5core.api.NativeTraining`, with the
    optional ``native_correct_counter`` and ``apply_running_stats``), so that the ``tf-*``
    optimizers train its ``tf.Variable``s in place.

    :param network: a ``d5core.api.Network`` or an ``onnx.ModelProto``.
    :param device: ``"cpu"`` (the default), or ``"gpu:N"`` where TensorFlow sees one.
    :param jit_compile: compile the function with XLA (``tf.function(jit_compile=True)``).
    """

    name: ClassVar[str] = "tensorflow"
    trains: ClassVar[bool] = True
    #: Every operator type the executor translates.
    supported_ops: ClassVar[frozenset[str]] = (
        frozenset(n[3:] for n in dir(Translator) if n.startswith("op_")) | CONSTANT_OPS
    )
    #: Whether instances compile with XLA unless told otherwise.
    default_jit_compile: ClassVar[bool] = False

    def __init__(
        self, network: Any, *, device: str = "cpu", jit_compile: bool | None = None
    ) -> None:
        super().__init__(network, device=device)
        self.tf_device = _device(device)
        self.jit_compile = self.default_jit_compile if jit_compile is None else bool(jit_compile)
        self._graph = graph_view(self.network)
        self.check_supported()
        self._trainable_set = set(self._graph.trainable)
        #: Running statistics of the last training pass, by BatchNormalization input name.
        self.running_stats: dict[str, Any] = {}
        self._constants = self._fold_constants()
        #: The parameters kept in TensorFlow's kernel layout (see the module docstring).
        self._tf_kernels = _kernel_weights(self._graph)
        flat_layouts, self._cl_flattens = _flat_weights(self._graph, self.model)
        #: The layout of every parameter whose variable is not in ONNX's.
        self._layouts: dict[str, VariableLayout] = {
            **{
                name: VariableLayout(tuple(kernel_perm(value.ndim)))
                for name, value in self._graph.parameters.items()
                if name in self._tf_kernels
            },
            **flat_layouts,
        }
        with tf.device(self.tf_device):
            self._vars: dict[str, Any] = {
                name: tf.Variable(
                    self._native(name, value),
                    trainable=name in self._trainable_set
                    and np.issubdtype(value.dtype, np.floating),
                )
                for name, value in self._graph.parameters.items()
            }
            constants = {k: tf.constant(v) for k, v in self._constants.items()}
        #: The trainable float parameters, in trainable order: what gradients are for.
        self._grad_names = [n for n in self._graph.trainable if self._vars[n].trainable]
        self._programs = {
            mode: self._program(mode, {**self._vars, **constants}) for mode in (False, True)
        }
        self._fed_statics = self._static_feeds()
        #: Parameters baked into the traced graph: read as static values, or folded.
        self._static_params = self._programs[False].known.intersection(self._graph.parameters) | {
            node.inputs[p]
            for program in self._programs.values()
            for node in program.nodes
            for p in node.static
            if node.inputs[p] in self._graph.parameters
        }
        self._functions: dict[tuple[Any, ...], Any] = {}
        self._concretes: dict[tuple[Any, ...], Any] = {}

    # -- construction ----------------------------------------------------------------

    def check_supported(self) -> None:
        """Raise a one-line :class:`UsageError` naming the first unsupported node: an
        operator it does not translate, or one reading or giving a sequence, map or
        optional value (it runs tensors only)."""
        graph = self.model.graph
        values = [*graph.input, *graph.output, *graph.value_info]
        not_tensors = {
            v.name for v in values if v.type.WhichOneof("value") not in ("tensor_type", None)
        }
        for node in self._graph.nodes:
            if node.op_type not in self.supported_ops:
                raise self.unsupported(node.op_type, node.name, node.domain)
            if not_tensors.intersection([*node.input, *node.output]):
                raise UsageError(
                    f"the {self.name} executor does not support operator {node.op_type!r} on "
                    f"sequence, map or optional values (node {node.name!r}); it runs tensors"
                )

    def _fold_constants(self) -> dict[str, np.ndarray]:
        """Evaluate Constant nodes, and ConstantOfShape nodes of constant shapes, once."""
        params = self._graph.parameters
        constants: dict[str, np.ndarray] = {}
        for node in self._graph.nodes:
            if node.op_type not in CONSTANT_OPS:
                continue
            found = [constants.get(n, params.get(n)) for n in node.input if n]
            values = [v for v in found if v is not None]
            if len(values) < len(found):
                continue  # a ConstantOfShape of a shape known when tracing
            constants[node.output[0]] = constant_value(node, values)
        return constants

    def _program(self, training: bool, values: Mapping[str, Any]) -> Program:
        statics = {**self._graph.parameters, **self._constants}
        graph = self.model.graph
        translator = Translator(
            self._graph.opset, training, statics, xla=self.jit_compile,
            value_types=[*graph.input, *graph.output, *graph.value_info],
            tf_kernels=self._tf_kernels, cl_flattens=self._cl_flattens,
        )  # fmt: skip
        nodes = [
            translator.translate(n)
            for n in self._graph.nodes
            if not (n.op_type in CONSTANT_OPS and n.output[0] in self._constants)
        ]
        fixed = frozenset(self._constants) | {
            name
            for name, value in self._graph.parameters.items()
            if not np.issubdtype(value.dtype, np.floating)
        }
        return Program(nodes, values, statics, fixed)

    def _native(self, name: str, value: np.ndarray) -> np.ndarray:
        """An ONNX-layout value of parameter ``name`` in its variable's layout."""
        layout = self._layouts.get(name)
        return value if layout is None else layout.to_native(value)

    def _onnx(self, name: str, value: np.ndarray) -> np.ndarray:
        """A value of parameter ``name`` in its variable's layout, in ONNX's layout."""
        layout = self._layouts.get(name)
        return value if layout is None else layout.to_onnx(value)

    def _static_feeds(self) -> list[str]:
        """The fed inputs some node reads as a static value: their values are part of
        what a trace is made for (a fed input that reaches a static input only through
        other nodes is not known when tracing, and refused then)."""
        fed = set(self._graph.inputs)
        found: list[str] = []
        for node in self._programs[False].nodes:
            for position in sorted(node.static):
                name = node.inputs[position]
                if name in fed and name not in found:
                    found.append(name)
        return found

    # -- the compiled function ---------------------------------------------------------

    def _static_key(self, tensors: Mapping[str, Any]) -> tuple[Any, ...]:
        """The values of the feeds read as static inputs, as a hashable key."""
        key = []
        for name in self._fed_statics:
            value = np.asarray(tensors[name])
            key.append((name, value.dtype.str, value.shape, value.tobytes()))
        return tuple(key)

    def _function(self, training: bool, loss: str | None, key: tuple[Any, ...]) -> Any:
        """The ``tf.function`` of one mode (and loss), for the static feeds in ``key``."""
        found = self._functions.get((training, loss, key))
        if found is not None:
            return found
        program = self._programs[training]
        fed = {name: np.frombuffer(data, dtype=np.dtype(dt)).reshape(shape)
               for name, dt, shape, data in key}  # fmt: skip
        names, outputs = list(self._graph.inputs), list(self._graph.outputs)

        def outputs_of(env: Mapping[str, Any]) -> tuple[Any, ...]:
            missing = [o for o in outputs if o not in env]
            if missing:
                raise UsageError(f"graph output {missing[0]!r} is computed by no node")
            return tuple(env[o] for o in outputs)

        def infer(*tensors: Any) -> tuple[Any, ...]:
            return outputs_of(program.run(dict(zip(names, tensors, strict=True)), fed).env)

        variables = [self._vars[n] for n in self._grad_names]

        def train(*tensors: Any) -> tuple[Any, ...]:
            with tf.GradientTape() as tape:
                traced = program.run(dict(zip(names, tensors, strict=True)), fed)
                if loss not in traced.env:
                    raise UsageError(f"{loss!r} is not a tensor of the network")
                value = traced.env[loss]
            grads = (
                tape.gradient(value, variables, unconnected_gradients=tf.UnconnectedGradients.ZERO)
                if variables
                else []
            )
            # a gathered parameter (an embedding) gets IndexedSlices: made dense here, as
            # every gradient is a tensor of its variable's shape
            dense = tuple(tf.convert_to_tensor(g) for g in grads)
            return outputs_of(traced.env), dense, dict(traced.stats)

        with tf.device(self.tf_device):
            function = tf.function(
                train if training else infer, jit_compile=self.jit_compile, autograph=False
            )
        self._functions[(training, loss, key)] = function
        return function

    def _concrete(
        self, training: bool, loss: str | None, args: Sequence[Any], key: tuple[Any, ...]
    ) -> Any:
        """The traced function for ``args`` (traced now if new): calling it skips the
        signature matching of a ``tf.function`` call."""
        signature = (training, loss, key, *((tuple(a.shape), a.dtype) for a in args))
        found = self._concretes.get(signature)
        if found is None:
            function = self._function(training, loss, key)
            with tf.device(self.tf_device):
                found = self._call(function.get_concrete_function, args)
            self._concretes[signature] = found
        return found

    def _call(self, fn: Callable[..., Any], args: Sequence[Any]) -> Any:
        """``fn(*args)``, TensorFlow's runtime errors turned into one-line UsageErrors."""
        try:
            return fn(*args)
        except tf.errors.OpError as exc:
            raise UsageError(self._explain(exc)) from None

    def _explain(self, exc: Any) -> str:
        """A TensorFlow error in one line, naming the ONNX node its op belongs to."""
        message = str(getattr(exc, "message", exc))
        node = ""
        for op in _OP_IN_ERROR.findall(message):
            scope, _ = node_of_op(op)
            found = self._programs[False].by_scope.get(scope)
            if found is not None:
                node = f"node {found[0]!r} ({found[1]})"
                break
        first = _error_line(message)
        if self.jit_compile and _XLA_COMPILING.search(message):
            refused = _XLA_REFUSAL.search(message)
            why = (
                f"TensorFlow op {refused.group(1)!r} has no XLA kernel"
                if refused is not None
                else first.rstrip(".")
            )
            return f"XLA cannot compile {node or 'the network'}: {why}; use the tensorflow executor"
        return f"{node or 'the network'}: TensorFlow failed: {first}"

    # -- running ---------------------------------------------------------------------------

    def _to_tensors(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        self._graph.check_feeds(feeds)
        with tf.device(self.tf_device):
            return {
                k: v if isinstance(v, tf.Tensor) else tf.convert_to_tensor(np.ascontiguousarray(v))
                for k, v in feeds.items()
            }

    def _ordered(self, tensors: Mapping[str, Any]) -> list[Any]:
        return [tensors[n] for n in self._graph.inputs]

    def _run(self, tensors: Mapping[str, Any], training: bool, loss: str | None) -> Any:
        args = self._ordered(tensors)
        concrete = self._concrete(training, loss, args, self._static_key(tensors))
        return self._call(concrete, args)

    def _outputs(self, outs: Sequence[Any]) -> dict[str, np.ndarray]:
        return {n: np.asarray(v.numpy()) for n, v in zip(self._graph.outputs, outs, strict=True)}

    def _keep_stats(self, stats: Mapping[str, Any]) -> None:
        if stats:
            self.running_stats.update(stats)

    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the graph in inference mode; every graph output by name."""
        return self._outputs(self._run(self._to_tensors(feeds), False, None))

    def inference_and_backprop(
        self, feeds: Mapping[str, np.ndarray], loss: str
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Run in training mode and backprop ``loss`` with a ``tf.GradientTape``.

        :return: every graph output, and the gradient for every trainable parameter
            (zeros for one the loss does not depend on).
        """
        outs, grads, stats = self._run(self._to_tensors(feeds), True, loss)
        self._keep_stats(stats)
        by_name = {
            n: self._onnx(n, g.numpy()) for n, g in zip(self._grad_names, grads, strict=True)
        }
        result = {}
        for name in self._graph.trainable:
            found = by_name.get(name)
            result[name] = (
                found if found is not None else np.zeros_like(self._graph.parameters[name])
            )
        return self._outputs(outs), result

    def prepare_inference(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """Convert ``feeds`` and trace the function now; the callable only runs it.

        With XLA the function is also compiled now (one run), so that a node XLA refuses
        is reported here.
        """
        tensors = self._to_tensors(feeds)
        args = self._ordered(tensors)
        concrete = self._concrete(False, None, args, self._static_key(tensors))
        names = self._graph.outputs
        call = self._call

        def run() -> dict[str, Any]:
            if get_bus().wants(_NODE_END) and not trace_active():
                return dict(zip(names, self._publish_profiled(concrete, args), strict=True))
            return dict(zip(names, call(concrete, args), strict=True))

        if self.jit_compile:
            call(concrete, args)
        return run

    def prepare_train_step(
        self, feeds: Mapping[str, np.ndarray], loss: str
    ) -> Callable[[], object]:
        """Convert ``feeds`` and trace now; the callable runs forward and backward only,
        and returns the outputs by name and the gradients in trainable order."""
        tensors = self._to_tensors(feeds)
        args = self._ordered(tensors)
        concrete = self._concrete(True, loss, args, self._static_key(tensors))
        names = self._graph.outputs
        call, keep = self._call, self._keep_stats

        def step() -> tuple[dict[str, Any], tuple[Any, ...]]:
            if get_bus().wants(_NODE_END) and not trace_active():
                outs, grads, stats = self._publish_profiled(concrete, args)
            else:
                outs, grads, stats = call(concrete, args)
            keep(stats)
            return dict(zip(names, outs, strict=True)), grads

        if self.jit_compile:
            call(concrete, args)
        return step

    # -- per-node times -------------------------------------------------------------------

    def _by_scope(self) -> dict[str, tuple[str, str]]:
        return self._programs[False].by_scope

    def _publish_profiled(self, concrete: Any, args: Sequence[Any]) -> Any:
        """One call under TensorFlow's profiler; each node's time goes on the bus as a
        ``graph.node.end`` event (forward nodes, then backward ones)."""
        results, runs = profile_calls(lambda: self._call(concrete, args), 1, self._by_scope())
        bus = get_bus()
        for node, op_type, direction, seconds in runs[0] if runs else []:
            bus.publish(
                _NODE_END, level=1, node=node, op_type=op_type, direction=direction,
                duration_ns=round(seconds * 1e9),
            )  # fmt: skip
        return results[0]

    def profile_nodes(self, feeds: Mapping[str, np.ndarray], repeats: int) -> NodeTimes:
        """Per-node times of ``repeats`` inference runs on ``feeds``, from TensorFlow's
        profiler: ``[(node, op_type, "forward", seconds), ...]`` per run.

        The compiled graph runs once untimed first. A graph compiled with XLA reports
        no nodes (its runs are empty).
        """
        tensors = self._to_tensors(feeds)
        args = self._ordered(tensors)
        concrete = self._concrete(False, None, args, self._static_key(tensors))
        self._call(concrete, args)
        return profile_calls(lambda: self._call(concrete, args), repeats, self._by_scope())[1]

    # -- native (tf.Variable) training ----------------------------------------------------

    def to_native(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """``feeds`` as TensorFlow tensors on the executor's device, converted once;
        tensors pass through untouched.

        :raises UsageError: when a graph input is missing.
        """
        return self._to_tensors(feeds)

    def native_parameters(self) -> dict[str, Any]:
        """The live trainable ``tf.Variable``s by name, in trainable order.

        These are the variables the compiled graph reads: assigning to them (as a bound
        ``tf-*`` optimizer does) changes the network; no copy is made. Convolution
        weights are in TensorFlow's kernel layout (see :meth:`native_layouts`).
        """
        return {n: self._vars[n] for n in self._grad_names}

    def native_layouts(self) -> dict[str, VariableLayout]:
        """The parameters whose variables are not in ONNX's layout, each with its
        :class:`~d5_plugin_tensorflow.graph.layout.VariableLayout` (``to_native`` and
        ``to_onnx`` move a value between the two): the convolution weights, and Gemm
        weights read after a channels-last Flatten."""
        return dict(self._layouts)

    def native_train_step(
        self, feeds: Mapping[str, Any], loss: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """:meth:`inference_and_backprop` without leaving TensorFlow: one call of the
        compiled forward-and-backward function.

        :param feeds: tensors (from :meth:`to_native`) or numpy arrays by input name.
        :param loss: the name of the loss output.
        :return: every graph output as a tensor, and the gradient of every trainable
            parameter as a tensor in its variable's layout (see :meth:`native_layouts`),
            by name in trainable order (zeros for one the loss does not depend on).
            Running statistics are kept as in :meth:`inference_and_backprop`.
        """
        outs, grads, stats = self._run(self._to_tensors(feeds), True, loss)
        self._keep_stats(stats)
        return (
            dict(zip(self._graph.outputs, outs, strict=True)),
            dict(zip(self._grad_names, grads, strict=True)),
        )

    def native_correct_counter(self) -> VariableCorrectCounter:
        """A counter of correct predictions: the trainer's native path adds each step's
        logits and labels, which it keeps and counts in one go when the count is read,
        once per epoch (:class:`~d5_plugin_tensorflow.correct_counter.VariableCorrectCounter`)."""
        return VariableCorrectCounter()

    # -- parameters -------------------------------------------------------------------------

    def get_parameters(self) -> dict[str, np.ndarray]:
        """Every parameter (initializer) by name, as numpy copies in ONNX's layout."""
        return {k: np.array(self._onnx(k, v.numpy()), copy=True) for k, v in self._vars.items()}

    def set_parameters(self, params: Mapping[str, Any]) -> None:
        """Replace parameters by name, in place (prepared callables see the new values);
        each must exist and keep its (ONNX) shape."""
        for name, value in params.items():
            var = self._vars.get(name)
            if var is None:
                raise UsageError(f"the network has no parameter {name!r}")
            array = np.asarray(value)
            shape = self._graph.parameters[name].shape
            if shape != array.shape:
                raise UsageError(f"parameter {name!r} has shape {shape}, not {array.shape}")
            var.assign(self._native(name, array.astype(var.dtype.as_numpy_dtype, copy=False)))
            if name in self._static_params:
                # a static input (a shape, axes, a ratio) is part of the traced graph
                self._graph.parameters[name] = np.array(array, copy=True)
                for program in self._programs.values():
                    program.statics = {**self._graph.parameters, **self._constants}
                self._functions.clear()
                self._concretes.clear()

    def apply_running_stats(self) -> None:
        """Write the running statistics of the last training pass into the parameters."""
        for name, value in self.running_stats.items():
            var = self._vars.get(name)
            if var is not None:
                var.assign(value)


class TensorFlowXLAExecutor(TensorFlowExecutor):
    """:class:`TensorFlowExecutor` compiling its function with XLA
    (``tf.function(jit_compile=True)``); a node XLA cannot compile is a UsageError naming
    it, raised when the function is first compiled (by the first run, or by the prepare
    methods)."""

    name: ClassVar[str] = "tensorflow-xla"
    default_jit_compile: ClassVar[bool] = True
