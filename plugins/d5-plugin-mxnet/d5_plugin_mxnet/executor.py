"""The MXNet graph executor, registered as ``mxnet`` in the ``d5.frameworks`` group.

:class:`MXNetExecutor` translates an ONNX graph once, node by node, into functions
written for both of MXNet's front ends (:mod:`d5_plugin_mxnet.graph`; no ONNX importer
is involved). For its first signature of feeds (shapes and dtypes), it builds one
``mx.sym`` symbol from the same functions, each node told the shapes of its inputs that
ONNX's shape inference gives (the symbolic batch dimension bound to the feeds'), all
checked by one MXNet shape and type inference; where those do not hold, node by node,
MXNet's inference telling each node the shapes of its inputs from those of the feeds
and parameters (as a hybridized Gluon block infers them). It compiles the symbol into
a ``CachedOp`` with static memory and shapes, which is what
``HybridBlock.hybridize(static_alloc=True, static_shape=True)`` makes of a Gluon
network. Each later signature (a test batch, a smaller last batch) is compiled as a
``CachedOp`` handles a new shape: its symbol is built from the shapes of one already
compiled, the batch's dimension changed, and one inference checks every shape a node
function was told
(:func:`~d5_plugin_mxnet.graph.program.derive_symbol`). Where the inference or a node
refuses, the graph runs once imperatively with ``mx.nd`` to learn every value's shape
(and names what MXNet refused), and the symbol is built from those. Inference and
training steps call that ``CachedOp``; a training step records it with ``mx.autograd``
(``train_mode=True``) and runs the backward pass, which writes the gradients into the
buffers attached to the parameters, as Gluon's parameters have them.
:meth:`~MXNetExecutor.inference` of a signature compiled by an imperative pass returns
what that pass computed (the same operators on the same arrays) instead of running the
graph again for it.

MXNet's engine is asynchronous: a prepared callable only enqueues work and returns
``NDArray``s (the measurement engine waits through the ``d5_synchronize`` hook); what
returns numpy arrays (:meth:`~MXNetExecutor.inference`,
:meth:`~MXNetExecutor.inference_and_backprop`, :meth:`~MXNetExecutor.get_parameters`)
waits with ``asnumpy``.

Modes match the numpy reference executor: inference runs Dropout as the identity and
BatchNormalization with its running statistics; training runs Dropout with the
reference's mask and BatchNormalization with batch statistics. MXNet's BatchNorm updates
its moving statistics in place during the backward pass (ONNX's convention: biased
variance, ``momentum`` weighting the old value); the training graph reads them from
buffers that each step first fills with the parameters, so the running statistics of
the last step are :attr:`MXNetExecutor.running_stats` and reach the parameters only
through :meth:`MXNetExecutor.apply_running_stats`.

Types: MXNet 1.9.1 has no int16, uint16, uint32, uint64 or bool tensors; feeds and
parameters of the first four are refused with a UsageError, bool feeds are held as uint8
(0 or 1), which is what comparisons produce and Where reads. Bool outputs are returned
as bool; MXNet has no rank-0 tensors, so scalar outputs (a reduced loss) come back with
ONNX's shape ``()``.

Static values: inputs a node needs when the graph is built (a Reshape's shape, Slice's
starts, reduction axes) may be constants, fixed initializers, feeds (a graph compiled
per fed value), or computed from those and from shapes (Shape, Gather, Concat chains as
exporters write them): each compilation folds the nodes whose inputs are all known, with
the onnx reference evaluator (:mod:`d5_plugin_mxnet.graph.program`).

``--breakdown``: when the bus wants ``graph.node`` events, a prepared callable runs the
nodes one by one with ``mx.nd`` instead, each inside a ``graph.node`` span that waits for
the engine before it closes (forward nodes; a training step's backward is not broken
down).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import onnx

from d5_plugin_mxnet._host import filled, write_all
from d5_plugin_mxnet._mx import mxnet
from d5_plugin_mxnet.graph import SUPPORTED_OPS, Step, Translator, fold_constants
from d5_plugin_mxnet.graph.base import Shape
from d5_plugin_mxnet.graph.program import (
    CompiledGraph,
    Derived,
    build_symbol,
    compile_symbol,
    derive_symbol,
    run_steps,
)
from d5core.api import END, GRAPH_NODE, GraphExecutor, UsageError, get_bus
from d5core.onnx import graph_view

__all__ = ["GradientsAsRead", "MXNetCorrectCounter", "MXNetExecutor", "StatArray"]

mx = mxnet()

_NODE_END = GRAPH_NODE + END
#: The numpy types MXNet 1.9.1 holds in an NDArray.
_MX_TYPES = frozenset(
    np.dtype(t) for t in ("float16", "float32", "float64", "int8", "uint8", "int32", "int64")
)


def _checked_dtype(what: str, dtype: np.dtype[Any]) -> None:
    if dtype not in _MX_TYPES:
        raise UsageError(
            f"{what} is {dtype.name}, a type MXNet 1.9.1 has no tensors of; use one of "
            "float16, float32, float64, int8, uint8, int32, int64"
        )


def _ndarray(value: npt.NDArray[Any], context: Any) -> Any:
    """``value`` copied into a new ``NDArray`` of its dtype on ``context``.

    What ``mx.nd.array`` does for a numpy array, without its way through
    ``__setitem__``'s indexing and its scipy check, and on the CPU without a request to
    MXNet's engine (:func:`~d5_plugin_mxnet._host.filled`): about 13 µs here instead of
    140, paid for every feed of every step.
    """
    if value.size == 0:  # MXNet 1.9.1 has no zero-size tensors: its own error
        return mx.nd.array(value, ctx=context, dtype=value.dtype)
    return filled(value, context)


def _swapped_dims(ref: CompiledGraph, arrays: Mapping[str, Any]) -> dict[int, int] | None:
    """The dimensions the feeds ``arrays`` changed from those ``ref`` was compiled for
    (old size to new); ``None`` when a feed's rank or type differs, or one size became
    two."""
    swap: dict[int, int] = {}
    for name, array in arrays.items():
        old = ref.shapes.get(name)
        if old is None or len(old) != len(array.shape):
            return None
        if ref.dtypes.get(name) != np.dtype(array.dtype):
            return None
        for was, now in zip(old, array.shape, strict=True):
            if was != now and swap.setdefault(was, now) != now:
                return None
    return swap


#: A value's shape as ONNX's shape inference tells it: each dimension a size, the name
#: of a symbolic one (``"N"``), or ``None`` when unknown.
_Declared = tuple[int | str | None, ...]


#: The ONNX types of weights: never a shape or an index, so shape inference needs only
#: their shapes (passing their data costs more than the inference: 1.6 ms for resnet20).
_WEIGHT_TYPES = frozenset(
    {
        onnx.TensorProto.FLOAT,
        onnx.TensorProto.DOUBLE,
        onnx.TensorProto.FLOAT16,
        onnx.TensorProto.BFLOAT16,
    }
)


def _without_weights(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with its float initializers declared as inputs instead (shape and type,
    no data); the integer ones, which may be shapes, kept."""
    graph = model.graph
    listed = {v.name for v in graph.input}
    weights = [
        onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims))
        for t in graph.initializer
        if t.data_type in _WEIGHT_TYPES and t.name not in listed
    ]
    light = onnx.helper.make_graph(
        graph.node,
        graph.name,
        [*graph.input, *weights],
        graph.output,
        [t for t in graph.initializer if t.data_type not in _WEIGHT_TYPES],
        value_info=graph.value_info,
    )
    return onnx.helper.make_model(
        light,
        ir_version=model.ir_version,
        opset_imports=model.opset_import,
        functions=model.functions,
    )


def _mx_dtype(elem_type: int) -> np.dtype[Any] | None:
    """The numpy type MXNet holds an ONNX type as (bool as uint8); ``None`` for one it
    has no tensors of."""
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, TypeError, ValueError):
        return None
    if dtype == np.bool_:
        return np.dtype(np.uint8)
    return dtype if dtype in _MX_TYPES else None


def _declared_values(model: onnx.ModelProto) -> dict[str, tuple[_Declared, np.dtype[Any]]]:
    """The shape and type ONNX's shape inference tells of every value of ``model`` it
    can (propagating the values of shapes computed by nodes, as exporters compute a
    Reshape's or an Expand's), types as MXNet holds them (bool as uint8; a value of a
    type MXNet lacks is left out); empty when the inference fails."""
    try:
        light = _without_weights(model)
        graph = onnx.shape_inference.infer_shapes(light, data_prop=True).graph
    except Exception:  # onnx's inference errors have no common type; no guess then
        return {}
    found: dict[str, tuple[_Declared, np.dtype[Any]]] = {}
    types: dict[int, np.dtype[Any] | None] = {}
    declared = graph.input[: len(model.graph.input)]  # not the weights made inputs
    for value in (*declared, *graph.value_info, *graph.output):
        tensor = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
            continue
        if tensor.elem_type not in types:
            types[tensor.elem_type] = _mx_dtype(tensor.elem_type)
        dtype = types[tensor.elem_type]
        if dtype is None:
            continue
        dims = tuple(
            d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tensor.shape.dim
        )
        found[value.name] = (dims, dtype)
    return found


def _bound_shapes(
    declared: Mapping[str, tuple[_Declared, np.dtype[Any]]], arrays: Mapping[str, Any]
) -> tuple[dict[str, Shape], dict[str, np.dtype[Any]]] | None:
    """The shape and type of every value ``declared`` tells in full once its symbolic
    dimensions take the sizes of the feeds ``arrays`` (MXNet's shape ``(1,)`` for a
    scalar); ``None`` when a feed contradicts its declared shape or type."""
    sizes: dict[str, int] = {}
    for name, array in arrays.items():
        found = declared.get(name)
        if found is None or len(found[0]) != len(array.shape):
            continue  # undeclared, or a scalar MXNet holds as a vector of one
        if found[1] != np.dtype(array.dtype):
            return None
        for dim, size in zip(found[0], array.shape, strict=True):
            if isinstance(dim, str) and sizes.setdefault(dim, size) != size:
                return None
            if isinstance(dim, int) and dim != size:
                return None
    shapes: dict[str, Shape] = {}
    dtypes: dict[str, np.dtype[Any]] = {}
    for name, (dims, dtype) in declared.items():
        shape = tuple(sizes.get(d) if isinstance(d, str) else d for d in dims)
        if all(isinstance(d, int) and d > 0 for d in shape):
            shapes[name] = tuple(int(d) for d in shape if d is not None) or (1,)
            dtypes[name] = dtype
    return shapes, dtypes


def _backward_order(graph: Any, with_gradient: set[str]) -> list[str]:
    """The trainable parameters of ``graph``: those without a gradient first, then the
    others from the one its nodes read last to the one they read first, which is the
    order a backward pass finishes their gradients in."""
    first_read: dict[str, int] = {}
    for at, node in enumerate(graph.nodes):
        for name in node.input:
            first_read.setdefault(name, at)
    return sorted(
        graph.trainable, key=lambda n: (n in with_gradient, -first_read.get(n, len(first_read)))
    )


def _context(device: str) -> Any:
    """A d5 device (``cpu``, ``gpu:N``) as an MXNet context."""
    kind, _, index = device.partition(":")
    if kind == "cpu":
        return mx.cpu()
    if kind in ("gpu", "cuda"):
        number = int(index) if index.isdigit() else 0
        if number < mx.context.num_gpus():
            return mx.gpu(number)
        raise UsageError(f"MXNet sees no GPU {number} (device {device!r}); use device 'cpu'")
    raise UsageError(f"unknown device {device!r} for the mxnet executor; use 'cpu' or 'gpu:N'")


class StatArray:
    """A running statistic: the live ``NDArray`` (:attr:`array`) and its numpy value."""

    __slots__ = ("array",)

    def __init__(self, array: Any) -> None:
        self.array = array

    def numpy(self) -> npt.NDArray[Any]:
        """The value as a numpy array (waits for the engine)."""
        return np.asarray(self.array.asnumpy())


class GradientsAsRead(Mapping[str, npt.NDArray[Any]]):
    """The gradients of one training step as numpy arrays, each copied from its MXNet
    buffer when it is first read.

    Iteration follows the order in which the backward pass finishes the gradients: the
    parameter the forward pass reads last comes first (parameters without a gradient,
    zeros, before all). An optimizer that steps through the mapping in that order
    updates the last layers while MXNet is still computing the first layers'
    gradients, since reading one gradient waits for that gradient alone.

    The buffers belong to the executor and the next training step overwrites them, so
    the executor calls :meth:`read_all` before that step: a value read later is still
    this step's.
    """

    def __init__(
        self,
        order: Sequence[str],
        buffers: Mapping[str, Any],
        parameters: Mapping[str, npt.NDArray[Any]],
    ) -> None:
        self._order = order
        self._buffers = buffers
        self._parameters = parameters
        self._read: dict[str, npt.NDArray[Any]] = {}

    def __getitem__(self, name: str) -> npt.NDArray[Any]:
        value = self._read.get(name)
        if value is None:
            param = self._parameters[name]  # KeyError for a name that is no parameter
            buffer = self._buffers.get(name)
            if buffer is None and name not in self._order:
                raise KeyError(name)
            value = self._read[name] = (
                np.zeros_like(param)
                if buffer is None
                else buffer.asnumpy().astype(param.dtype, copy=False)
            )
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

    def read_all(self) -> None:
        """Copy every gradient not read yet (waits for the whole backward pass)."""
        for name in self._order:
            self[name]


class MXNetCorrectCounter:
    """Counts correct predictions in an ``NDArray`` on the executor's context; one wait
    per :meth:`take`.

    Given the ``executor`` that made it, a training step's own logits and labels are
    counted by the step's compiled graph (see :meth:`MXNetExecutor.native_correct_counter`):
    :meth:`add` then only adds that count, one engine operation instead of five.
    """

    __slots__ = ("_executor", "_total")

    def __init__(self, executor: MXNetExecutor | None = None) -> None:
        self._executor = executor
        self._total: Any = None

    def add(self, logits: Any, labels: Any) -> None:
        """Add the count of rows where ``logits.argmax(-1) == labels`` (no wait)."""
        counted = None if self._executor is None else self._executor.counted(logits, labels)
        if counted is None:
            hits = mx.nd.sum(mx.nd.argmax(logits, axis=-1) == labels.astype(logits.dtype))
        elif self._total is None:  # the graph's output is overwritten by its next step
            hits = counted.copy()
        else:
            hits = counted
        self._total = hits if self._total is None else self._total + hits

    def take(self) -> int:
        """Everything added since the last take (waits once); resets."""
        total, self._total = self._total, None
        return 0 if total is None else int(total.asscalar())


class MXNetExecutor(GraphExecutor):
    """Runs an ONNX network as an MXNet ``CachedOp`` built node by node.

    It offers d5's native training path (:class:`d5core.api.NativeTraining`, with the
    optional ``native_correct_counter`` and ``apply_running_stats``), so that the
    ``mx-*`` optimizers update its ``NDArray``s in place.

    :param network: a ``d5core.api.Network`` or an ``onnx.ModelProto``.
    :param device: ``"cpu"`` (the default), or ``"gpu:N"`` where MXNet sees one.
    """

    name: ClassVar[str] = "mxnet"
    trains: ClassVar[bool] = True
    asynchronous: ClassVar[bool] = True
    #: Every operator type the executor translates.
    supported_ops: ClassVar[frozenset[str]] = SUPPORTED_OPS

    def __init__(self, network: Any, *, device: str = "cpu") -> None:
        super().__init__(network, device=device)
        self.mx_context = _context(device)
        self._graph = graph_view(self.network)
        self.check_supported()
        self._input_ranks = {
            value.name: len(value.type.tensor_type.shape.dim)
            for value in self.network.model.graph.input
            if value.type.tensor_type.HasField("shape")
        }
        self._trainable_set = frozenset(self._graph.trainable)
        self._constants = fold_constants(self._graph.nodes, self._graph.parameters)
        self._translate()
        #: Every parameter as an NDArray, by name (trainable float ones with a gradient).
        self._params: dict[str, Any] = {}
        for name, value in self._graph.parameters.items():
            if name not in self._tensor_inputs and name not in self._graph.outputs:
                continue
            _checked_dtype(f"parameter {name!r}", value.dtype)
            array = mx.nd.array(
                value.reshape(value.shape or (1,)), ctx=self.mx_context, dtype=value.dtype
            )
            if name in self._trainable_set and np.issubdtype(value.dtype, np.floating):
                array.attach_grad()
            self._params[name] = array
        held = {  # bool constants (a causal mask) as uint8, as bool feeds are held
            name: value.astype(np.uint8) if value.dtype == np.bool_ else value
            for name, value in self._constants.items()
            if name in self._tensor_inputs or name in self._graph.outputs
        }
        self._const_arrays = {
            name: mx.nd.array(
                value.reshape(value.shape or (1,)), ctx=self.mx_context, dtype=value.dtype
            )
            for name, value in held.items()
            if value.dtype in _MX_TYPES
        }
        #: The trainable float parameters (those with a gradient), in trainable order.
        self._grad_names = [
            n
            for n in self._graph.trainable
            if n in self._params and np.issubdtype(self._graph.parameters[n].dtype, np.floating)
        ]
        #: Running statistics of the last training step, by BatchNormalization input name.
        self.running_stats: dict[str, StatArray] = {}
        #: Per dtype, the moving statistics of every BatchNormalization (the parameters
        #: are views into ``source``) and the buffers a training step updates (views into
        #: ``buffer``): one copy per step fills them all.
        self._stat_blocks: list[tuple[Any, Any]] = []
        self._buffers = self._statistics_buffers([n for n in self._aux if n in self._params])
        #: The gradient buffers of ``_grad_names``, in that order (a step overwrites them).
        self._grads = tuple(self._params[n].grad for n in self._grad_names)
        #: The trainable parameters in the order the backward pass finishes their
        #: gradients (see :class:`GradientsAsRead`).
        self._backward_order = _backward_order(self._graph, set(self._grad_names))
        #: The last step's gradients given as :class:`GradientsAsRead`, until the next
        #: training step reads what is left of them.
        self._unread: GradientsAsRead | None = None
        self._stats = {n: StatArray(b) for n, b in self._buffers.items()}
        #: (graph output, labels input) that training graphs count the correct
        #: predictions of, once :meth:`native_correct_counter` asked; else ``None``.
        self._counting: tuple[str, str] | None = None
        #: The last training step's (logits, labels, count) when its graph counted.
        self._last_count: tuple[Any, Any, Any] | None = None
        self._node_constants: dict[tuple[str, str], Any] = {}
        self._compiled: dict[tuple[Any, ...], CompiledGraph] = {}
        #: The values the imperative pass of a compilation :meth:`inference` asked for
        #: computed, by name (its feeds' outputs, returned instead of running again).
        self._shape_pass: dict[str, Any] | None = None

    def _statistics_buffers(self, names: Sequence[str]) -> dict[str, Any]:
        """Move the statistics ``names`` into one block per dtype, and make the training
        buffers as one matching block: ``self._params`` then holds views of the first,
        the returned buffers are views of the second, and a training step refreshes every
        buffer with one ``copyto`` (one engine operation instead of one per statistic:
        about 15 µs each, 38 in resnet20)."""
        buffers: dict[str, Any] = {}
        by_dtype: dict[Any, list[str]] = {}
        for name in names:
            by_dtype.setdefault(np.dtype(self._params[name].dtype), []).append(name)
        for dtype, group in by_dtype.items():
            sizes = [int(self._params[n].size) for n in group]
            source = mx.nd.zeros((sum(sizes),), ctx=self.mx_context, dtype=dtype)
            buffer = mx.nd.zeros_like(source)
            start = 0
            for name, size in zip(group, sizes, strict=True):
                old = self._params[name]
                view = source[start : start + size].reshape(old.shape)
                view[:] = old
                self._params[name] = view
                buffers[name] = buffer[start : start + size].reshape(old.shape)
                start += size
            self._stat_blocks.append((source, buffer))
        return buffers

    # -- translation -----------------------------------------------------------------

    def _translate(self) -> None:
        #: What ONNX's shape inference tells of the values (for a first signature's
        #: guess), inferred when a first signature needs it.
        self._declared: dict[str, tuple[_Declared, np.dtype[Any]]] | None = None
        statics = {**self._graph.parameters, **self._constants}
        self._steps: dict[bool, list[Step]] = {}
        self._static_reads: set[str] = set()
        wanted: set[str] = set()
        for training in (False, True):
            translator = Translator(self._graph.opset, training, statics, self._trainable_set)
            self._steps[training] = translator.translate(self._graph.nodes)
            self._static_reads |= translator.read
            wanted |= translator.wanted
        #: The feeds read as values (a static input is computed from them): each value
        #: fed compiles a graph of its own.
        self._static_feeds = self._feeds_behind(wanted)
        #: The values known before any feed: constants and fixed integer initializers.
        self._known = {
            **{
                name: value
                for name, value in self._graph.parameters.items()
                if name not in self._trainable_set and not np.issubdtype(value.dtype, np.floating)
            },
            **self._constants,
        }
        self._tensor_inputs = {
            n for steps in self._steps.values() for s in steps for n in s.inputs if n
        }
        #: The inputs MXNet updates in place while training (moving statistics).
        self._aux = {s.inputs[p] for s in self._steps[True] for p in s.aux}

    def _feeds_behind(self, wanted: set[str]) -> list[str]:
        """The graph inputs the values ``wanted`` are computed from (a Shape or Size node
        reads only its input's shape, which is known)."""
        producers = {o: node for node in self._graph.nodes for o in node.output if o}
        feeds, seen, todo = set(self._graph.inputs), set(), list(wanted)
        found = []
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in feeds:
                found.append(name)
                continue
            node = producers.get(name)
            if node is not None and node.op_type not in ("Shape", "Size"):
                todo.extend(i for i in node.input if i)
        return sorted(found)

    # -- feeds and compilation -----------------------------------------------------------

    def _to_arrays(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        self._graph.check_feeds(feeds)
        arrays = {}
        for name in self._graph.inputs:
            value = feeds[name]
            if isinstance(value, mx.nd.NDArray):
                arrays[name] = value
                continue
            array = np.asarray(value)
            if array.dtype == np.bool_:  # held as uint8, as the node functions expect
                array = array.astype(np.uint8)
            _checked_dtype(f"input {name!r}", array.dtype)
            if array.ndim == 0:
                array = array.reshape(1)
            arrays[name] = _ndarray(array, self.mx_context)
        return arrays

    def _base(self, training: bool) -> dict[str, Any]:
        """Parameters and constants by name; moving statistics as buffers in training."""
        env = {**self._params, **self._const_arrays}
        if training:
            env.update(self._buffers)
        return env

    def _heads(self, training: bool, loss: str | None) -> list[str]:
        outputs = list(self._graph.outputs)
        if training and loss is not None and loss not in outputs:
            outputs.append(loss)
        return outputs

    def _compile(
        self, arrays: Mapping[str, Any], training: bool, loss: str | None, keep: bool = False
    ) -> CompiledGraph:
        """The compiled graph for the signature of ``arrays`` (built now if new; with
        ``keep``, the values an imperative pass that built it computed are kept in
        ``_shape_pass``).

        A new signature's symbol is derived without running the graph, from the shapes
        of one already compiled or, for the first, from MXNet's inference alone
        (:meth:`_derived`); the graph runs imperatively only when the derivation fails."""
        values = {n: self._feed_value(n, arrays[n]) for n in self._static_feeds}
        counting = self._counting if training and loss is not None else None
        key = (
            training,
            loss,
            counting,
            *((n, a.shape, a.dtype) for n, a in arrays.items()),
            *((n, v.dtype.str, v.shape, v.tobytes()) for n, v in values.items()),
        )
        found = self._compiled.get(key)
        if found is not None:
            return found
        known = {**self._known, **values}
        heads = self._heads(training, loss)
        env: dict[str, Any] | None = None
        derived = self._derived(arrays, training, heads, known)
        if derived is not None:
            symbol, fed = derived.symbol, derived.fed
            shapes, dtypes = derived.shapes, derived.dtypes
        else:
            env = self._shape_pass_of(arrays, training, loss, known)
            shapes = {n: tuple(v.shape) for n, v in env.items()}
            dtypes = {n: np.dtype(v.dtype) for n, v in env.items()}
            symbol, fed = build_symbol(
                self._steps[training], shapes, dtypes, heads, self._node_constants, known
            )
        counted = None
        if counting is not None:
            counted = self._count_head(symbol, heads, counting, shapes, dtypes)
        found = self._compiled[key] = compile_symbol(
            symbol if counted is None else counted, heads, fed, arrays
        )
        found.known = {**self._known, **values}
        found.shapes, found.dtypes = shapes, dtypes
        if counted is not None and counting is not None:
            found.counts = (heads.index(counting[0]), counting[1])
        self._bind_args(found, arrays, training)
        if keep and env is not None:
            self._shape_pass = env
        return found

    def _shape_pass_of(
        self,
        arrays: Mapping[str, Any],
        training: bool,
        loss: str | None,
        known: dict[str, npt.NDArray[Any]],
    ) -> dict[str, Any]:
        """Every value of one imperative run on ``arrays`` (``known`` gains what it
        folded), checked: MXNet's errors and missing outputs raise a UsageError."""
        env = run_steps(
            self._steps[training],
            {**self._base(training), **arrays},
            self._node_constants,
            known=known,
            opset=self._graph.opset,
        )
        try:  # an error of the shape pass surfaces here, not at some later wait
            mx.nd.waitall()
        except mx.base.MXNetError as exc:
            lines = [line for line in str(exc).strip().splitlines() if line.strip()]
            raise UsageError(
                f"the network: MXNet failed: {lines[-1].strip() if lines else 'no message'}"
            ) from None
        for name in self._heads(training, loss):
            if name not in env:
                if name == loss:
                    raise UsageError(f"{loss!r} is not a tensor of the network")
                raise UsageError(f"graph output {name!r} is computed by no node")
        return env

    def _derived(
        self,
        arrays: Mapping[str, Any],
        training: bool,
        heads: Sequence[str],
        known: Mapping[str, npt.NDArray[Any]],
    ) -> Derived | None:
        """The symbol of a new signature, built from the shapes of a compiled one and
        checked by MXNet's shape and type inference (:func:`derive_symbol`): what a
        ``CachedOp`` does for a new shape, instead of a run of the whole graph. The first
        signature (nothing compiled gives a guess) is built from the shapes ONNX's shape
        inference tells (:meth:`_first_guess`), checked the same way; without them, or
        when they do not hold, node by node from the shapes MXNet infers from the
        inputs' own. ``None`` when a feed has a zero dimension, a head is missing from
        the guess of a later signature, or MXNet or a node refuses."""
        exact = {**self._base(training), **arrays}
        guess = self._guess(arrays, training, exact)
        rounds = 3
        if guess is None:  # the first signature: guessed from ONNX's shape inference
            if any(0 in a.shape for a in arrays.values()):
                return None
            guess = self._first_guess(arrays, exact)
            rounds = 2  # ONNX's shapes, then those MXNet infers where they differ
            if guess is None:  # every shape inferred from the inputs'
                guess, rounds = self._exact_guess(exact), 0
        elif any(h not in guess[0] for h in heads):
            return None
        return derive_symbol(
            self._steps[training],
            guess[0],
            guess[1],
            heads,
            self._node_constants,
            known,
            exact,
            self._graph.opset,
            rounds=rounds,
        )

    def _first_guess(
        self, arrays: Mapping[str, Any], exact: Mapping[str, Any]
    ) -> tuple[dict[str, Shape], dict[str, np.dtype[Any]]] | None:
        """Every value's shape and type for the feeds ``arrays`` of a first signature, as
        ONNX's shape inference tells them, the symbolic dimensions bound to the feeds'
        sizes; the arrays ``exact`` have their own. ``None`` when it tells nothing or a
        feed contradicts it. (Values it cannot tell are left out: MXNet infers them.)"""
        if self._declared is None:
            self._declared = _declared_values(self.network.model)
        bound = _bound_shapes(self._declared, arrays) if self._declared else None
        if bound is None:
            return None
        shapes, dtypes = bound
        shapes.update((n, tuple(a.shape)) for n, a in exact.items())
        dtypes.update((n, np.dtype(a.dtype)) for n, a in exact.items())
        return shapes, dtypes

    @staticmethod
    def _exact_guess(
        exact: Mapping[str, Any],
    ) -> tuple[dict[str, Shape], dict[str, np.dtype[Any]]]:
        """The shapes and types of the arrays ``exact``, by name: all that is known of
        a first signature before MXNet infers the rest."""
        shapes = {n: tuple(a.shape) for n, a in exact.items()}
        return shapes, {n: np.dtype(a.dtype) for n, a in exact.items()}

    def _guess(
        self, arrays: Mapping[str, Any], training: bool, exact: Mapping[str, Any]
    ) -> tuple[dict[str, Shape], dict[str, np.dtype[Any]]] | None:
        """Every value's shape and type for the feeds ``arrays``, guessed from the last
        graph compiled (one of the same mode first): each dimension in which a feed's
        shape changed (a batch of 32 become 256) is changed in every value; the arrays
        ``exact`` have their own. ``None`` when no compiled graph had feeds of the same
        ranks and types, or a feed has a zero dimension."""
        if any(0 in a.shape for a in arrays.values()):
            return None
        graphs = sorted(reversed(self._compiled.items()), key=lambda kv: kv[0][0] != training)
        for _, ref in graphs:
            swap = _swapped_dims(ref, arrays)
            if swap is None:
                continue
            shapes = {n: tuple(swap.get(d, d) for d in s) for n, s in ref.shapes.items()}
            shapes.update((n, tuple(a.shape)) for n, a in exact.items())
            dtypes = {**ref.dtypes, **{n: np.dtype(a.dtype) for n, a in exact.items()}}
            return shapes, dtypes
        return None

    def _count_head(
        self,
        symbol: Any,
        heads: Sequence[str],
        counting: tuple[str, str],
        shapes: Mapping[str, Shape],
        dtypes: Mapping[str, np.dtype[Any]],
    ) -> Any | None:
        """``symbol`` with one more output: the number of rows where the output
        ``counting[0]``'s argmax over its last axis equals the labels ``counting[1]``,
        in the operations :meth:`MXNetCorrectCounter.add` runs; ``None`` unless the
        scores are float ``(N, C)`` and the labels ``(N,)``."""
        output, labels = counting
        scores, given, dtype = shapes.get(output), shapes.get(labels), dtypes.get(output)
        if output not in heads or scores is None or given is None or dtype is None:
            return None
        if dtype.kind != "f" or len(scores) != 2:
            return None
        if tuple(given) != tuple(scores[:1]):
            return None
        try:
            labels_symbol = symbol.get_internals()[labels]
        except (KeyError, ValueError, IndexError):  # the graph does not read them
            return None
        logits = symbol[heads.index(output)]
        hits = mx.sym.broadcast_equal(
            mx.sym.argmax(logits, axis=-1), mx.sym.cast(labels_symbol, dtype=dtype)
        )
        return mx.sym.Group([symbol[i] for i in range(len(heads))] + [mx.sym.sum(hits)])

    def _bind_args(
        self, compiled: CompiledGraph, arrays: Mapping[str, Any], training: bool
    ) -> None:
        """Fill ``compiled``'s arguments once: parameters, constants and buffers in place,
        the feeds' positions left for each call (:meth:`_args`)."""
        env = {**self._base(training), **compiled.constants}
        compiled.feeds = [(i, n) for i, n in enumerate(compiled.inputs) if n in arrays]
        compiled.args = [None if n in arrays else env[n] for n in compiled.inputs]

    def _feed_value(self, name: str, array: Any) -> npt.NDArray[Any]:
        """A feed read as a value, as numpy, with its declared rank (MXNet holds a scalar
        as a vector of one)."""
        value = np.asarray(array.asnumpy())
        if self._input_ranks.get(name) == 0 and value.size == 1:
            value = value.reshape(())
        return value

    @staticmethod
    def _args(compiled: CompiledGraph, arrays: Mapping[str, Any]) -> list[Any]:
        """The arguments of ``compiled``'s op with ``arrays`` as its feeds."""
        args = list(compiled.args)
        for at, name in compiled.feeds:
            args[at] = arrays[name]
        return args

    # -- running -------------------------------------------------------------------------

    def _inference_callable(self, arrays: dict[str, Any]) -> Callable[[], dict[str, Any]]:
        compiled = self._compile(arrays, False, None)
        op, args, names = compiled.op, self._args(compiled, arrays), compiled.outputs

        def run() -> dict[str, Any]:
            if get_bus().wants(_NODE_END):
                env = self._run_nodes(False, arrays, compiled.known)
                return {n: env[n] for n in names}
            outs = op(*args)
            return dict(zip(names, outs if isinstance(outs, list) else [outs], strict=True))

        return run

    def _train_callable(
        self, arrays: dict[str, Any], loss: str
    ) -> Callable[[], tuple[dict[str, Any], tuple[Any, ...]]]:
        compiled = self._compile(arrays, True, loss)
        op, args, names = compiled.op, self._args(compiled, arrays), compiled.outputs
        at = names.index(loss)
        copies, grads, stats = self._stat_blocks, self._grads, self._stats
        record, backward = mx.autograd.record, mx.autograd.backward
        counts, width = compiled.counts, len(names)
        labels = None if counts is None else arrays[counts[1]]

        def step() -> tuple[dict[str, Any], tuple[Any, ...]]:
            if self._unread is not None:  # the buffers are about to be overwritten
                self._unread.read_all()
                self._unread = None
            for source, buffer in copies:
                source.copyto(buffer)
            self._last_count = None
            if get_bus().wants(_NODE_END):
                with record(train_mode=True):
                    env = self._run_nodes(True, arrays, compiled.known)
                    outs = [env[n] for n in names]
            else:
                with record(train_mode=True):
                    found = op(*args)
                    outs = found if isinstance(found, list) else [found]
                if counts is not None:  # the graph's own count, for the correct counter
                    self._last_count = (outs[counts[0]], labels, outs[width])
                    outs = outs[:width]
            if grads:
                backward([outs[at]])
            self.running_stats = stats
            return dict(zip(names, outs, strict=True)), grads

        return step

    def _run_nodes(
        self, training: bool, arrays: Mapping[str, Any], known: Mapping[str, Any]
    ) -> dict[str, Any]:
        """One run node by node, each in a ``graph.node`` span that waits for it."""
        bus = get_bus()
        waitall = mx.nd.waitall

        class _Span:
            def __init__(self, step: Step) -> None:
                self.span = bus.span(
                    GRAPH_NODE, level=1, node=step.name, op_type=step.op_type, direction="forward"
                )

            def __enter__(self) -> None:
                self.span.__enter__()

            def __exit__(self, *exc: Any) -> None:
                waitall()
                self.span.__exit__(*exc)

        env = {**self._base(training), **arrays}
        return run_steps(
            self._steps[training],
            env,
            self._node_constants,
            each=_Span,
            known=dict(known),
            opset=self._graph.opset,
        )

    def _outputs(self, outs: Mapping[str, Any]) -> dict[str, npt.NDArray[Any]]:
        result = {}
        for name in self._graph.outputs:
            try:
                value = outs[name].asnumpy()
            except mx.base.MXNetError as exc:
                line = str(exc).strip().splitlines()[-1] if str(exc).strip() else "no message"
                raise UsageError(f"the network: MXNet failed: {line}") from None
            want = self._graph.output_types.get(name)
            if want is not None and value.dtype != want:
                value = value.astype(want)
            if name in self._graph.scalars and value.size == 1:
                value = value.reshape(())
            result[name] = value
        return result

    def inference(self, feeds: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
        """Run the graph in inference mode; every graph output by name.

        Feeds of a new signature compiled by an imperative pass (one whose symbol
        MXNet's inference could not derive) are run once, by that pass
        (the same operators on the same arrays): their outputs are that pass's, and the
        compiled graph first runs with the next feeds of that shape.
        """
        arrays = self._to_arrays(feeds)
        self._compile(arrays, False, None, keep=True)
        computed, self._shape_pass = self._shape_pass, None
        if computed is None or get_bus().wants(_NODE_END):
            return self._outputs(self._inference_callable(arrays)())
        return self._outputs({n: computed[n] for n in self._graph.outputs})

    def inference_and_backprop(
        self, feeds: Mapping[str, npt.NDArray[Any]], loss: str
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, npt.NDArray[Any]]]:
        """Run in training mode and backprop ``loss`` with ``mx.autograd``.

        :return: every graph output, and the gradient for every trainable parameter
            (zeros for one the loss does not depend on).
        """
        outputs, grads = self._backprop(feeds, loss)
        return outputs, {name: grads[name] for name in self._graph.trainable}

    def inference_and_backprop_streamed(
        self, feeds: Mapping[str, npt.NDArray[Any]], loss: str
    ) -> tuple[dict[str, npt.NDArray[Any]], GradientsAsRead]:
        """:meth:`inference_and_backprop` with the gradients as a
        :class:`GradientsAsRead`: the outputs wait for the forward pass only, each
        gradient for itself, and they come in the order the backward pass finishes
        them. The trainer's numpy path takes this method when an executor has it."""
        return self._backprop(feeds, loss)

    def _backprop(
        self, feeds: Mapping[str, npt.NDArray[Any]], loss: str
    ) -> tuple[dict[str, npt.NDArray[Any]], GradientsAsRead]:
        outs, grads = self._train_callable(self._to_arrays(feeds), loss)()
        self._unread = GradientsAsRead(
            self._backward_order,
            dict(zip(self._grad_names, grads, strict=True)),
            self._graph.parameters,
        )
        return self._outputs(outs), self._unread

    def prepare_inference(self, feeds: Mapping[str, npt.NDArray[Any]]) -> Callable[[], object]:
        """Convert ``feeds`` and compile now; the callable only enqueues the ``CachedOp``."""
        return self._inference_callable(self._to_arrays(feeds))

    def prepare_train_step(
        self, feeds: Mapping[str, npt.NDArray[Any]], loss: str
    ) -> Callable[[], object]:
        """Convert ``feeds`` and compile now; the callable enqueues forward and backward
        and returns the outputs by name and the gradients in trainable order."""
        return self._train_callable(self._to_arrays(feeds), loss)

    # -- native (NDArray) training ---------------------------------------------------------

    def to_native(self, feeds: Mapping[str, Any]) -> dict[str, Any]:
        """``feeds`` as ``NDArray``s on the executor's context; NDArrays pass through.

        :raises UsageError: when a graph input is missing or of a type MXNet lacks.
        """
        return self._to_arrays(feeds)

    def native_parameters(self) -> dict[str, Any]:
        """The live trainable float ``NDArray``s by name, in trainable order: the arrays
        the compiled graph reads; updating them in place changes the network."""
        return {n: self._params[n] for n in self._grad_names}

    def native_train_step(
        self, feeds: Mapping[str, Any], loss: str
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """:meth:`inference_and_backprop` in ``NDArray``s, nothing waited for.

        :return: every graph output, and the gradient of every trainable float parameter
            by name in trainable order. The gradients are the buffers attached to the
            parameters (as in Gluon), overwritten by the next step; so are the outputs
            (the graph's static memory).
        """
        outs, grads = self._train_callable(self._to_arrays(feeds), loss)()
        return outs, dict(zip(self._grad_names, grads, strict=True))

    def native_correct_counter(self) -> MXNetCorrectCounter:
        """A counter of correct predictions kept in an ``NDArray``, read once per epoch.

        From now on, training graphs whose first output are scores ``(N, C)`` and whose
        input ``labels`` (d5's name for them) is ``(N,)`` also count the rows where the
        argmax of the scores equals the labels, as an output of their ``CachedOp``; the
        counter adds that count when it is given the step's own logits and labels (a
        graph compiled before this call is compiled again, once)."""
        outputs = self._graph.outputs
        if self._counting is None and outputs and "labels" in self._graph.inputs:
            self._counting = (outputs[0], "labels")
        return MXNetCorrectCounter(self)

    def counted(self, logits: Any, labels: Any) -> Any | None:
        """The last training step's count of correct predictions, as its graph counted
        them (an ``NDArray`` of one element, overwritten by the next step), when
        ``logits`` and ``labels`` are that step's own arrays; else ``None``."""
        last = self._last_count
        if last is None or last[0] is not logits or last[1] is not labels:
            return None
        return last[2]

    # -- parameters --------------------------------------------------------------------------

    def get_parameters(self) -> dict[str, npt.NDArray[Any]]:
        """Every parameter (initializer) by name, as numpy copies."""
        result = {}
        for name, value in self._graph.parameters.items():
            array = self._params.get(name)
            result[name] = (
                np.array(value, copy=True)
                if array is None
                else array.asnumpy().astype(value.dtype, copy=False).reshape(value.shape)
            )
        return result

    def set_parameters(self, params: Mapping[str, Any]) -> None:
        """Replace parameters by name, in place (prepared callables see the new values);
        each must exist and keep its shape."""
        retranslate = False
        writes = []
        try:
            for name, value in params.items():
                old = self._graph.parameters.get(name)
                if old is None:
                    raise UsageError(f"the network has no parameter {name!r}")
                array = np.asarray(value)
                if array.shape != old.shape:
                    raise UsageError(f"parameter {name!r} has shape {old.shape}, not {array.shape}")
                live = self._params.get(name)
                if live is not None:
                    writes.append((live, array))
                static = name in self._static_reads or name in self._known
                retranslate = retranslate or static
                if live is None or static:  # a live one's value is its array's
                    self._graph.parameters[name] = np.array(array, dtype=old.dtype, copy=True)
        finally:  # the live arrays, once the engine is done with them: a direct copy each
            write_all(writes)
        if retranslate:  # a static input (a shape, axes, a ratio) is part of the graph
            self._translate()
            self._compiled.clear()

    def apply_running_stats(self) -> None:
        """Write the running statistics of the last training step into the parameters."""
        for name, stat in self.running_stats.items():
            stat.array.copyto(self._params[name])
