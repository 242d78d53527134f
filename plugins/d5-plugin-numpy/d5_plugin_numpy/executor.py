"""The reference graph executor, registered as ``numpy`` in the ``d5.frameworks`` group.

:class:`NumpyExecutor` interprets an ONNX graph node by node with the level-0 reference
operators: slow, clear and trusted, it is what every other executor is validated against.

Modes. :meth:`~NumpyExecutor.inference` runs ``Dropout`` as the identity and
``BatchNormalization`` with its stored running statistics; :meth:`inference_and_backprop`
runs both in training mode (the Dropout mask is the reference operator's reproducible
one; BatchNormalization normalizes with the batch statistics). The running statistics a
training pass computes are kept in :attr:`NumpyExecutor.running_stats` and written into
the parameters only when :meth:`NumpyExecutor.apply_running_stats` is called.

Training passes. The operators of a training pass are told what the graph makes
certain (``ReferenceOperator.retain``, ``unneeded``, ``read``): backward runs on the very
arrays forward got, so Conv and MaxPool keep their windows and maxima instead of
computing them again; an input that depends on no trainable parameter (the data) needs
no gradient, so Conv skips its col2im; MaxPool leaves out ``Indices`` when nothing reads
them. Every result stays bit-identical to operators told nothing.

Opsets. Nodes are translated to the operators' opset-13+ contract before being created:
``Squeeze``/``Unsqueeze`` ``axes`` attributes (opset < 13) become inputs, ``Softmax`` and
``LogSoftmax`` before opset 13 coerce their input to 2-D at ``axis`` (default 1),
``Split``'s ``split`` attribute (opset < 13) becomes an input and, before opset 18, a
``Split`` without ``split`` gets ``num_outputs`` from its node's outputs,
``Add``/``Sub``/``Mul``/``Div`` before opset 7 broadcast ``B`` to ``A`` as their
``broadcast`` and ``axis`` attributes say (equal shapes without ``broadcast=1``), other
obsolete attributes (``spatial``, ``is_test``, ``consumed_inputs``, ``broadcast``) are
dropped, and ``Constant``/``ConstantOfShape`` nodes (and every node whose inputs are all
constants) are folded once at construction. An optional input left out before a given
one (an empty name in ONNX, as torch's exporter writes LSTM's ``sequence_lens``) reaches
the operator as ``None`` when it takes absent inputs (``absent_inputs``: LSTM, GRU), so
the node runs and trains natively; other operators' nodes with one go to the fallback.

Fallback. A node whose operator d5 has no numpy implementation of, or whose element types
or (schema-valid) attribute values d5's operator refuses, runs forward on
``onnx.reference`` (:mod:`d5_plugin_numpy.onnx_fallback`): one runner per node, built
once. :meth:`NumpyExecutor.details` lists those nodes, and a gradient through one is a
one-line :class:`~d5core.api.UsageError` naming its operator.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import numpy as np
import onnx

from d5_plugin_numpy.onnx_fallback import (
    ENGINE,
    FallbackNode,
    implicit_inputs,
    reference_op_types,
    reference_supports,
    value_types,
)
from d5_plugin_numpy.ops import OPERATORS as _LEVEL0
from d5_plugin_numpy.ops.base import ReferenceOperator
from d5_plugin_numpy.ops.lrn import LRN
from d5core.api import (
    GRAPH_NODE,
    GraphExecutor,
    Network,
    Operator,
    TensorDescriptor,
    UsageError,
    get_bus,
)
from d5core.onnx import constant_value, legacy_broadcast, legacy_broadcast_shape, node_attributes

__all__ = ["OPERATORS", "NumpyExecutor", "graph_view"]

#: Attributes of older opsets that carry no meaning for the opset-13 operators.
_OBSOLETE = frozenset({"spatial", "is_test", "consumed_inputs", "broadcast"})
#: Operators folded at construction (they have no runtime input).
_CONSTANTS = frozenset({"Constant", "ConstantOfShape"})
#: Domains whose operators d5's own implementations run (others go to onnx.reference).
_NATIVE_DOMAINS = frozenset({"", "ai.onnx", "ai.d5"})


#: The operators the executor creates: the level-0 backend's, plus LRN (kept out of the
#: backend's registry until it has level-0 test cases in both backends).
OPERATORS: dict[str, type[ReferenceOperator]] = {**_LEVEL0, "LRN": LRN}


# -- the graph, from a Network or a ModelProto ------------------------------


@dataclass
class GraphView:
    """What an executor needs from a network: named nodes in topological order,
    parameters, trainable names, fed input and output names, opset."""

    opset: int
    nodes: list[onnx.NodeProto]
    parameters: dict[str, np.ndarray]
    trainable: list[str]
    inputs: list[str]
    outputs: list[str]
    value_dtypes: dict[str, int] = field(default_factory=dict)


def graph_view(network: Network) -> GraphView:
    """A :class:`GraphView` of a network (``GraphExecutor`` has already made any
    ``onnx.ModelProto`` a ``Network``, with node names filled in)."""
    params = {k: np.asarray(v) for k, v in network.parameters.items()}
    nodes = list(network.nodes)
    opset = int(network.opset)
    trainable = list(network.trainable)
    inputs = [v.name for v in network.inputs if v.name not in params]
    outputs = [v.name for v in network.outputs]
    graph = network.model.graph
    dtypes = {
        v.name: v.type.tensor_type.elem_type
        for v in list(graph.input) + list(graph.output) + list(graph.value_info)
    }
    return GraphView(opset, nodes, params, trainable, inputs, outputs, dtypes)


# -- opset translation --------------------------------------------------------


@dataclass
class _Step:
    """One node, translated to the opset-13 operator contract."""

    name: str
    op_type: str
    attributes: dict[str, Any]
    #: Per operator input: a tensor name, or a constant array.
    inputs: list[str | np.ndarray | None]
    outputs: list[str]
    #: Opset < 13 Softmax/LogSoftmax: coerce to 2-D at this axis.
    coerce_axis: int | None = None
    ops: dict[tuple[Any, ...], Operator] = field(default_factory=dict)
    #: Opset < 7 Add/Sub/Mul/Div: the ``broadcast`` and ``axis`` attributes.
    legacy: tuple[bool, int | None] | None = None
    #: A node d5 has no operator for, run forward by onnx.reference (see onnx_fallback).
    fallback: FallbackNode | None = None
    #: The node the step runs.
    node: onnx.NodeProto | None = None
    #: In a training plan: the positions of inputs that depend on no trainable
    #: parameter, whose gradients backward may skip (see ``ReferenceOperator.unneeded``).
    unneeded: frozenset[int] | None = None
    #: Positions of the outputs that a node or the graph's outputs read.
    read: frozenset[int] | None = None


def _translate(node: onnx.NodeProto, opset: int, training: bool) -> _Step:
    given = node_attributes(node)
    try:
        legacy = legacy_broadcast(node.op_type, opset, given)
    except UsageError as exc:
        raise UsageError(f"node {node.name!r} ({node.op_type}): {exc}") from None
    if legacy is not None:
        given.pop("axis", None)
    attrs = {k: v for k, v in given.items() if k not in _OBSOLETE}
    inputs: list[str | np.ndarray | None] = [n if n else None for n in node.input]
    op_type = node.op_type
    coerce = None
    if op_type in ("Squeeze", "Unsqueeze") and "axes" in attrs:
        inputs = [inputs[0], np.asarray(attrs.pop("axes"), dtype=np.int64)]
    elif op_type == "Slice" and opset < 10:  # starts, ends and axes were attributes
        names = ("starts", "ends", "axes")
        given_ = [np.asarray(attrs.pop(k), dtype=np.int64) for k in names if k in attrs]
        inputs = [inputs[0], *given_]
    elif op_type == "Split":  # split: an attribute before opset 13; num_outputs from 18
        if "split" in attrs:
            inputs = [inputs[0], np.asarray(attrs.pop("split"), dtype=np.int64)]
        if opset < 18 and (len(inputs) < 2 or inputs[1] is None):
            attrs["num_outputs"] = len(node.output)
    elif op_type in ("Softmax", "LogSoftmax") and opset < 13:
        coerce = int(attrs.pop("axis", 1))
        attrs["axis"] = 1
    elif op_type == "BatchNormalization":
        attrs["training_mode"] = int(training)
    elif op_type == "Dropout":
        inputs = inputs[:2]
        attrs["training_mode"] = int(training)
    while inputs and inputs[-1] is None:
        inputs.pop()
    outputs = [o for o in node.output]
    return _Step(node.name, op_type, attrs, inputs, outputs, coerce, legacy=legacy)


class _Coerced2D(Operator):
    """Softmax/LogSoftmax of opsets before 13: flatten to 2-D at ``axis``, then along 1."""

    def __init__(self, inner: Operator, axis: int) -> None:
        super().__init__({})
        self.inner, self.axis = inner, axis

    def _flat(self, x: np.ndarray) -> np.ndarray:
        axis = self.axis % x.ndim if x.ndim else 0
        rows = int(np.prod(x.shape[:axis], dtype=np.int64))
        return x.reshape(rows, -1)

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x = inputs[0]
        return [self.inner.forward([self._flat(x)])[0].reshape(x.shape)]

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        x = inputs[0]
        g = self.inner.backward(
            [self._flat(grad_outputs[0])], [self._flat(x)], [self._flat(outputs[0])]
        )[0]
        return [None if g is None else g.reshape(x.shape)]


class _LegacyBroadcast(Operator):
    """Add, Sub, Mul or Div of opsets before 7: ``B`` viewed with the shape
    (:func:`~d5core.api.legacy_broadcast_shape`) at which numpy's broadcasting
    gives what those opsets' ``broadcast``/``axis`` attributes ask for."""

    def __init__(self, inner: Operator, b_shape: tuple[int, ...]) -> None:
        super().__init__({})
        self.inner, self.b_shape = inner, b_shape

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.inner.forward([inputs[0], inputs[1].reshape(self.b_shape)])

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        b = inputs[1]
        da, db = self.inner.backward(grad_outputs, [inputs[0], b.reshape(self.b_shape)], outputs)
        return [da, None if db is None else db.reshape(b.shape)]


#: Operators whose outputs are random: never folded into constants.
_RANDOM = frozenset(
    {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
     "RandomUniformLike"}
)  # fmt: skip


def _schema_attributes(node: onnx.NodeProto, model: onnx.ModelProto) -> bool:
    """Whether every attribute of ``node`` is one its ONNX schema (at the model's opset)
    defines: only then may a refusal of d5's operator go to onnx.reference, so that a
    misspelt attribute stays an error."""
    version = next((o.version for o in model.opset_import if o.domain == node.domain), None)
    try:
        schema = onnx.defs.get_schema(node.op_type, int(version or 1), node.domain)
    except Exception:  # no schema: nothing to check against
        return False
    return all(a.name in schema.attributes for a in node.attribute)


def _foldable(node: onnx.NodeProto) -> bool:
    """Whether a node onnx.reference runs may be folded into constants: not random, and
    without subgraphs (which may read values of the graph that are not constant)."""
    return node.op_type not in _RANDOM and not implicit_inputs(node)


class _Rerouted(Operator):
    """A node whose d5 operator refused its inputs, run by its onnx.reference runner:
    takes the translated step's inputs and feeds the runner those at ``positions``."""

    def __init__(self, runner: FallbackNode, positions: list[int]) -> None:
        super().__init__({})
        self.runner, self.positions = runner, positions

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return self.runner.forward([inputs[i] for i in self.positions])

    def backward(
        self,
        grad_outputs: Sequence[np.ndarray],
        inputs: Sequence[np.ndarray],
        outputs: Sequence[np.ndarray],
    ) -> list[np.ndarray | None]:
        return self.runner.backward(grad_outputs, inputs, outputs)


# -- the executor ---------------------------------------------------------------


@dataclass
class _Record:
    step: _Step
    op: Operator
    inputs: list[np.ndarray]
    outputs: list[np.ndarray]


class NumpyExecutor(GraphExecutor):
    """d5's reference executor: the graph interpreted with the numpy reference operators.

    Operators are created on first use for each combination of input shapes and dtypes
    and cached, so a network runs at any batch size. Construction checks that every
    node is supported and its attributes valid, raising a one-line
    :class:`~d5core.api.UsageError` naming the node otherwise.

    :param network: a ``d5core.api.Network`` or an ``onnx.ModelProto``.
    :param device: only ``"cpu"``.
    """

    name: ClassVar[str] = "numpy"
    trains: ClassVar[bool] = True
    #: The operator types d5's own numpy operators implement (forward and backward).
    native_ops: ClassVar[frozenset[str]] = frozenset(OPERATORS) | _CONSTANTS
    #: Every ONNX operator type (plus d5's ``MeanSquaredError``) the executor runs: its
    #: own, and those onnx.reference runs forward (see :meth:`supports`).
    supported_ops: ClassVar[frozenset[str]] = native_ops | reference_op_types()

    def __init__(self, network: Any, *, device: str = "cpu") -> None:
        super().__init__(network, device=device)
        if device != "cpu":
            raise UsageError(f"the numpy executor runs on 'cpu' only, not {device!r}")
        self._graph = graph_view(self.network)
        self.check_supported()
        #: The nodes run by onnx.reference, by node name (see :meth:`details`).
        self.fallback: dict[str, FallbackNode] = {}
        self._types: dict[str, onnx.TypeProto] | None = None
        #: Parameters by name (initializers), as the executor holds them.
        self.parameters: dict[str, np.ndarray] = dict(self._graph.parameters)
        #: Running statistics from the last training pass, by BatchNormalization input
        #: name (``input_mean`` / ``input_var``); see :meth:`apply_running_stats`.
        self.running_stats: dict[str, np.ndarray] = {}
        self._constants: dict[str, np.ndarray] = {}
        self._steps: dict[bool, list[_Step]] = {}
        self._fold_constants()
        for training in (False, True):
            self._steps[training] = self._plan(training)

    # -- construction ----------------------------------------------------------

    @classmethod
    def supports(cls, op_type: str, domain: str = "", opset: int | None = None) -> bool:
        """Whether the executor runs ``op_type`` of ``domain``: with d5's own operator,
        else forward with onnx.reference (at ``opset``, the newest when ``None``)."""
        if op_type in cls.native_ops and domain in _NATIVE_DOMAINS:
            return True
        return reference_supports(op_type, domain, opset)

    def check_supported(self) -> None:
        """Raise a one-line :class:`UsageError` naming the first node whose operator
        neither d5 nor onnx.reference runs, and the installed executors that do."""
        opsets = {o.domain or "": int(o.version) for o in self.model.opset_import}
        local = {(f.domain, f.name) for f in self.model.functions}
        for node in self._graph.nodes:
            if (node.domain, node.op_type) in local:
                continue
            opset = opsets.get(node.domain or "", opsets.get("ai.onnx"))
            if not self.supports(node.op_type, node.domain, opset):
                raise self.unsupported(node.op_type, node.name, node.domain, opset)

    def _is_native(self, node: onnx.NodeProto) -> bool:
        return node.op_type in OPERATORS and node.domain in _NATIVE_DOMAINS

    def _step(self, node: onnx.NodeProto, training: bool) -> _Step:
        """The step that runs ``node``: translated for d5's operator, or a fallback."""
        if self._is_native(node):
            step = _translate(node, self._graph.opset, training)
            step.node = node
            return step
        runner = self._fallback_for(node)
        feeds: list[str | np.ndarray | None] = list(runner.feeds)
        return _Step(node.name, node.op_type, {}, feeds, list(node.output), fallback=runner)

    def _fallback_for(self, node: onnx.NodeProto) -> FallbackNode:
        """The node's onnx.reference runner, built on first use and listed in
        :attr:`fallback`."""
        runner = self.fallback.get(node.name)
        if runner is None:
            if self._types is None:
                self._types = value_types(self.model)
            runner = FallbackNode(node, self.model, self._types)
            self.fallback[node.name] = runner
        return runner

    def _reference_runs(self, node: onnx.NodeProto) -> bool:
        opset = next(
            (int(o.version) for o in self.model.opset_import if o.domain == node.domain), None
        )
        return reference_supports(node.op_type, node.domain, opset)

    def details(self) -> dict[str, Any]:
        """How the network runs: the nodes onnx.reference runs forward (``fallback``:
        node name -> operator type), when there are any."""
        if not self.fallback:
            return {}
        return {
            "fallback_engine": ENGINE,
            "fallback": {name: op.op_type for name, op in self.fallback.items()},
        }

    def _fold_constants(self) -> None:
        """Evaluate constant nodes, and nodes whose inputs are all such constants."""
        graph = self._graph
        static = {n for n, a in graph.parameters.items() if not np.issubdtype(a.dtype, np.floating)}
        for node in graph.nodes:
            ins = [i for i in node.input if i]
            known = static | set(graph.parameters) if node.op_type == "Shape" else static
            if node.op_type not in _CONSTANTS and (not ins or not all(i in known for i in ins)):
                continue  # (Shape folds on any parameter: parameters keep their shapes)
            if not self._is_native(node) and not _foldable(node):
                continue
            found = [self._constants.get(i, graph.parameters.get(i)) for i in ins]
            values = [v for v in found if v is not None]
            if len(values) != len(ins):
                if self._reference_runs(node):
                    continue  # e.g. ConstantOfShape of a computed shape: a step runs it
                raise UsageError(
                    f"node {node.name!r} ({node.op_type}): its inputs must be constants"
                )
            try:
                if node.op_type in _CONSTANTS:
                    outs = [constant_value(node, values)]
                else:
                    step = self._step(node, False)
                    given = dict(zip(ins, values, strict=True))
                    args = [given[i] if isinstance(i, str) else i for i in step.inputs]
                    outs = self._run_step(step, args)  # type: ignore[arg-type]
            except UsageError as exc:
                if str(exc).startswith("node "):
                    raise
                raise UsageError(f"node {node.name!r} ({node.op_type}): {exc}") from None
            for name, value in zip(node.output, outs, strict=False):
                self._constants[name] = value
                static.add(name)

    def _plan(self, training: bool) -> list[_Step]:
        steps = []
        reads = {
            id(n): [*(i for i in n.input if i), *implicit_inputs(n)] for n in self._graph.nodes
        }
        used = {i for names in reads.values() for i in names} | set(self._graph.outputs)
        trained = set(self._graph.trainable)  # values that depend on a trainable parameter
        for node in self._graph.nodes:
            if any(i in trained for i in reads[id(node)]):
                trained.update(o for o in node.output if o)
            if all(o in self._constants for o in node.output if o):
                continue
            step = self._step(node, training)
            step.inputs = [
                self._constants[i] if isinstance(i, str) and i in self._constants else i
                for i in step.inputs
            ]
            try:  # check the attributes now: errors name the node before any run
                if step.fallback is None:
                    OPERATORS[step.op_type](step.attributes)
            except UsageError as exc:
                if not (self._reference_runs(node) and _schema_attributes(node, self.model)):
                    raise UsageError(f"node {node.name!r} ({node.op_type}): {exc}") from None
                # valid attribute values d5's operator does not take: onnx.reference runs it
                runner = self._fallback_for(node)
                step = _Step(
                    node.name, node.op_type, {}, list(runner.feeds), list(node.output),
                    fallback=runner, node=node,
                )  # fmt: skip
                step.inputs = [
                    self._constants[i] if isinstance(i, str) and i in self._constants else i
                    for i in step.inputs
                ]
            step.read = frozenset(k for k, o in enumerate(step.outputs) if o in used)
            if training:
                step.unneeded = frozenset(
                    k
                    for k, i in enumerate(step.inputs)
                    if not (isinstance(i, str) and i in trained)
                )
            steps.append(step)
        return steps

    # -- running ---------------------------------------------------------------

    def _operator(self, step: _Step, inputs: Sequence[np.ndarray]) -> Operator:
        if step.fallback is not None:
            return step.fallback
        absent = OPERATORS[step.op_type].absent_inputs
        try:  # an absent optional input (None) is passed on to operators that take one
            key = tuple(None if a is None and absent else (a.shape, a.dtype.str) for a in inputs)
        except AttributeError:  # a sequence (list) or an empty optional (None)
            why = UsageError("d5's operator takes tensors, not sequences or optionals")
            return self._refused(step, inputs, why)
        op = step.ops.get(key)
        if op is None:
            descs = [None if a is None else TensorDescriptor.of(a) for a in inputs]
            try:
                if step.coerce_axis is not None:
                    x = inputs[0]
                    axis = step.coerce_axis % max(x.ndim, 1)
                    rows = int(np.prod(x.shape[:axis], dtype=np.int64))
                    flat = TensorDescriptor((rows, x.size // max(rows, 1)), str(x.dtype))
                    inner = self._create(step.op_type, step.attributes, [flat])
                    op = _Coerced2D(inner, step.coerce_axis)
                elif step.legacy is not None and len(inputs) == 2:
                    op = self._legacy_broadcast(step, step.legacy, inputs)
                else:
                    op = self._create(step.op_type, step.attributes, descs)
                    if isinstance(op, ReferenceOperator):
                        op.read = step.read
                    if step.unneeded is not None and isinstance(op, ReferenceOperator):
                        # a training pass: backward follows on the same arrays
                        op.retain, op.unneeded = True, step.unneeded
            except UsageError as exc:
                op = self._refused(step, inputs, exc)
            step.ops[key] = op
        return op

    def _refused(self, step: _Step, inputs: Sequence[Any], exc: UsageError) -> Operator:
        """d5's operator refused these inputs (an element type it lacks): the node on
        onnx.reference instead, fed from the translated step's inputs, where it runs the
        operator; else the refusal, naming the node."""
        node = step.node
        usable = node is not None and not all(
            isinstance(a, np.ndarray) and a.dtype in (np.float32, np.float64) for a in inputs
        )
        if node is not None and usable and self._reference_runs(node):
            runner = self._fallback_for(node)
            positions = [list(node.input).index(f) for f in runner.feeds]
            if all(i < len(inputs) for i in positions):
                return _Rerouted(runner, positions)
        raise UsageError(f"node {step.name!r} ({step.op_type}): {exc}") from None

    def _legacy_broadcast(
        self, step: _Step, legacy: tuple[bool, int | None], inputs: Sequence[np.ndarray]
    ) -> Operator:
        a, b = inputs
        shape = legacy_broadcast_shape(a.shape, b.shape, broadcast=legacy[0], axis=legacy[1])
        descs = [TensorDescriptor.of(a), TensorDescriptor(shape, str(b.dtype))]
        return _LegacyBroadcast(self._create(step.op_type, step.attributes, descs), shape)

    @staticmethod
    def _create(
        op_type: str, attributes: Mapping[str, Any], descs: Sequence[TensorDescriptor | None]
    ) -> Operator:
        """Like ``NumpyBackend.create``, from :data:`OPERATORS` (which adds LRN). ``None``
        (an absent input) is in ``descs`` only for operators with ``absent_inputs``."""
        op = OPERATORS[op_type](attributes)
        op.check_inputs(cast(Sequence[TensorDescriptor], descs))
        return op

    def _run_step(
        self, step: _Step, inputs: list[np.ndarray], op: Operator | None = None
    ) -> list[np.ndarray]:
        if op is None:
            op = self._operator(step, inputs)
        try:
            return op.forward(inputs)
        except UsageError as exc:
            raise UsageError(f"node {step.name!r} ({step.op_type}): {exc}") from None

    def _forward(
        self, feeds: Mapping[str, np.ndarray], training: bool, records: list[_Record] | None
    ) -> dict[str, np.ndarray]:
        missing = [n for n in self._graph.inputs if n not in feeds]
        if missing:
            raise UsageError(
                f"the network needs input {missing[0]!r}; feeds have: "
                f"{', '.join(sorted(feeds)) or 'none'}"
            )
        env: dict[str, np.ndarray] = {**self.parameters, **self._constants}
        # sequences (lists) and empty optionals (None) feed onnx.reference nodes as they are
        env.update(
            (k, v if v is None or isinstance(v, list) else np.asarray(v)) for k, v in feeds.items()
        )
        bus = get_bus()
        traced = bus.wants(GRAPH_NODE + ".end")
        for step in self._steps[training]:
            args = [env[i] if isinstance(i, str) else i for i in step.inputs]
            op = self._operator(step, args)  # type: ignore[arg-type]
            if traced:
                with bus.span(GRAPH_NODE, level=1, node=step.name, op_type=step.op_type):
                    outs = self._run_step(step, args, op)  # type: ignore[arg-type]
            else:
                outs = self._run_step(step, args, op)  # type: ignore[arg-type]
            for name, value in zip(step.outputs, outs, strict=False):
                if name:
                    env[name] = value
            if records is not None:
                records.append(_Record(step, op, args, outs))  # type: ignore[arg-type]
            if training and step.op_type == "BatchNormalization" and len(outs) == 3:
                for src, value in zip(step.inputs[3:5], outs[1:3], strict=True):
                    if isinstance(src, str):
                        self.running_stats[src] = value
        return env

    @staticmethod
    def _key(inputs: Sequence[np.ndarray]) -> tuple[Any, ...]:
        return tuple((a.shape, a.dtype.str) for a in inputs)

    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run the graph in inference mode; every graph output by name."""
        env = self._forward(feeds, False, None)
        return {name: env[name] for name in self._graph.outputs}

    def inference_and_backprop(
        self, feeds: Mapping[str, np.ndarray], loss: str
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Run in training mode, then backward from ``loss`` (seeded with ones).

        :return: every graph output, and the gradient of ``loss`` for every trainable
            parameter (zeros for one the loss does not depend on).
        """
        records: list[_Record] = []
        env = self._forward(feeds, True, records)
        if loss not in env:
            raise UsageError(f"{loss!r} is not a tensor of the network")
        grads: dict[str, np.ndarray] = {loss: np.ones_like(env[loss])}
        bus = get_bus()
        traced = bus.wants(GRAPH_NODE + ".end")
        for rec in reversed(records):
            step = rec.step
            if not any(o in grads for o in step.outputs):
                continue
            if rec.op.no_gradient and not rec.op.differentiable:
                continue  # no gradient by design and no backward (ConstantOfShape)
            douts = [
                grads[name]
                if i < len(step.outputs) and (name := step.outputs[i]) in grads
                else np.zeros_like(out)
                for i, out in enumerate(rec.outputs)
            ]
            if traced:
                with bus.span(
                    GRAPH_NODE, level=1, node=step.name, op_type=step.op_type, direction="backward"
                ):
                    dins = rec.op.backward(douts, rec.inputs, rec.outputs)
            else:
                dins = rec.op.backward(douts, rec.inputs, rec.outputs)
            for src, g in zip(step.inputs, dins, strict=False):
                if g is None or not isinstance(src, str):
                    continue
                grads[src] = grads[src] + g if src in grads else g
        outputs = {name: env[name] for name in self._graph.outputs}
        params = {
            name: grads.get(name, np.zeros_like(self.parameters[name]))
            for name in self._graph.trainable
        }
        return outputs, params

    def prepare_inference(self, feeds: Mapping[str, np.ndarray]) -> Callable[[], object]:
        """A callable that runs :meth:`inference` on ``feeds`` (already numpy arrays)."""
        arrays = {k: np.asarray(v) for k, v in feeds.items()}
        return lambda: self.inference(arrays)

    def prepare_train_step(
        self, feeds: Mapping[str, np.ndarray], loss: str
    ) -> Callable[[], object]:
        """A callable that runs :meth:`inference_and_backprop` on ``feeds``."""
        arrays = {k: np.asarray(v) for k, v in feeds.items()}
        return lambda: self.inference_and_backprop(arrays, loss)

    # -- parameters ------------------------------------------------------------

    def get_parameters(self) -> dict[str, np.ndarray]:
        """Copies of every parameter (initializer) by name."""
        return {k: v.copy() for k, v in self.parameters.items()}

    def set_parameters(self, params: Mapping[str, np.ndarray]) -> None:
        """Replace parameters by name; each must exist and keep its shape."""
        for name, value in params.items():
            old = self.parameters.get(name)
            if old is None:
                raise UsageError(f"the network has no parameter {name!r}")
            value = np.asarray(value)
            if value.shape != old.shape:
                raise UsageError(f"parameter {name!r} has shape {old.shape}, not {value.shape}")
            self.parameters[name] = value.astype(old.dtype, copy=True)

    def apply_running_stats(self) -> None:
        """Write the running statistics of the last training pass into the parameters."""
        for name, value in self.running_stats.items():
            if name in self.parameters:
                self.parameters[name] = value.copy()
