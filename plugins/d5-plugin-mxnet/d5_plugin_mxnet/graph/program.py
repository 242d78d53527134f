"""Running translated steps: imperatively with ``mx.nd``, or built into one symbol that
MXNet compiles into a ``CachedOp`` (what a hybridized Gluon block runs).

:func:`run_steps` runs the steps one by one on ``NDArray``s; it tells each node's input
shapes, and it is what ``--breakdown`` times node by node (``each`` wraps every node).
:func:`build_symbol` builds the symbol from the shapes such a run found;
:func:`derive_symbol` builds the same symbol without a run, from shapes that MXNet's
shape and type inference confirms (for a new batch size of a graph already compiled,
what a ``CachedOp`` does for a new shape); and :func:`compile_symbol` makes the
``CachedOp``: static memory and static shapes, the flags of
``HybridBlock.hybridize(static_alloc=True, static_shape=True)``, and the feeds told
apart from the parameters, as Gluon tells them.

Node constants (the arrays a node function makes, such as an LSTM's zero state) are
kept by node, key, type and shape: a graph compiled for another batch size makes its own.

Folding: values known when the graph is compiled (constants, fixed integer initializers,
feeds read as static values, and the shapes Shape and Size read) are kept as numpy
arrays with ONNX's shapes. A node whose inputs are all known is computed once, by the
onnx package's reference evaluator, and its outputs become constants of the graph; so a
shape computed by Shape, Gather and Concat nodes (as exporters write one) is known to
the Reshape that needs it, and a causal mask built from Range and Less is a constant.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any, overload

import numpy as np
import numpy.typing as npt
import onnx

from d5_plugin_mxnet._mx import mxnet
from d5_plugin_mxnet.graph.base import Context, Shape, Step
from d5core.api import UsageError

__all__ = [
    "NEVER_FOLDED",
    "CompiledGraph",
    "Derived",
    "build_symbol",
    "compile_symbol",
    "derive_symbol",
    "fold_node",
    "run_steps",
]

#: Operators never folded: what they compute depends on the mode or on chance.
NEVER_FOLDED = frozenset(
    {
        "Dropout",
        "BatchNormalization",
        "RandomNormal",
        "RandomUniform",
        "RandomNormalLike",
        "RandomUniformLike",
        "Bernoulli",
        "Multinomial",
    }
)
#: Operators folded from the shape of their input alone.
_SHAPE_READERS = frozenset({"Shape", "Size"})

#: Flags of every CachedOp the executor makes.
CACHED_OP_FLAGS = (("static_alloc", True), ("static_shape", True))


def _first_line(exc: BaseException) -> str:
    """The line of an MXNet error that says what went wrong."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "Check failed" in line or line.startswith("MXNetError"):
            return line.removeprefix("MXNetError: ")
    return lines[-1] if lines else type(exc).__name__


def _mx_array(value: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """A known value as MXNet holds it: bool as uint8, a scalar as a vector of one."""
    if value.dtype == np.bool_:
        value = value.astype(np.uint8)
    return value.reshape(1) if value.ndim == 0 else value


def _fold_key(output: str, value: npt.NDArray[Any]) -> str:
    """The node-constant key of a folded output with this value."""
    digest = hashlib.sha1(value.tobytes()).hexdigest()[:16]
    return f"fold:{output}:{value.dtype.str}{value.shape}:{digest}"


def _constant_key(key: str, value: npt.NDArray[Any]) -> str:
    """The node-constant key of a constant a node function made under ``key``: with its
    type and shape, which may depend on the feeds' (an LSTM's zero state has the
    batch's), so that a graph compiled for other feeds never reads another's."""
    return f"{key}:{value.dtype.str}{value.shape}"


def _gather_elements_value(node: onnx.NodeProto, inputs: Sequence[Any]) -> list[npt.NDArray[Any]]:
    """ONNX GatherElements computed with numpy. The onnx reference evaluator's own (onnx
    1.23) goes through ``np.choose``, which numpy 1.x limits to 32 choices; its fallback
    for more is wrong (BERT's exported ``token_type_ids`` buffer gathers 16 of 64)."""
    data, indices = np.asarray(inputs[0]), np.asarray(inputs[1]).astype(np.int64)
    axis = next((int(a.i) for a in node.attribute if a.name == "axis"), 0)
    rank = data.ndim
    ax = axis + rank if axis < 0 else axis
    if indices.ndim != rank or not 0 <= ax < rank:
        raise ValueError(f"indices {indices.shape} and data {data.shape} need the same rank")
    size = data.shape[ax]
    if indices.size and (indices.min() < -size or indices.max() >= size):
        raise ValueError(f"an index is out of range for axis {axis} of size {size}")
    indices = np.where(indices < 0, indices + size, indices)
    return [np.take_along_axis(data, indices, axis=ax)]


#: Operators folded with numpy rather than the onnx reference evaluator (whose
#: implementation of them fails with the numpy of some environments).
_NUMPY_FOLDS: dict[str, Callable[[onnx.NodeProto, Sequence[Any]], list[npt.NDArray[Any]]]] = {
    "GatherElements": _gather_elements_value,
}


def fold_node(node: onnx.NodeProto, inputs: Sequence[Any], opset: int) -> list[npt.NDArray[Any]]:
    """The outputs of ``node`` computed from ``inputs`` (numpy arrays, ``None`` for absent
    optional inputs) by the onnx reference evaluator, or by numpy for the operators the
    evaluator gets wrong (``_NUMPY_FOLDS``).

    :raises UsageError: naming the node, when the computation fails.
    """
    from onnx.reference import ReferenceEvaluator

    own = _NUMPY_FOLDS.get(node.op_type)
    if own is not None:
        try:
            return own(node, inputs)
        except ValueError as exc:
            raise UsageError(
                f"node {node.name!r} ({node.op_type}): cannot compute it from known values: {exc}"
            ) from None

    names = [n for n in node.input if n]
    graph = onnx.helper.make_graph(
        [node],
        "fold",
        [onnx.helper.make_tensor_value_info(n, 0, None) for n in names],
        [onnx.helper.make_tensor_value_info(n, 0, None) for n in node.output if n],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    feeds = {n: v for n, v in zip(node.input, inputs, strict=False) if n}
    try:
        outs = ReferenceEvaluator(model).run(None, feeds)
    except Exception as exc:  # the evaluator's errors have no common type
        raise UsageError(
            f"node {node.name!r} ({node.op_type}): cannot compute it from known values: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
        ) from None
    return [np.asarray(o) for o in outs]


def _folded(
    step: Step, known: Mapping[str, npt.NDArray[Any]], shapes: Sequence[Shape], opset: int
) -> list[npt.NDArray[Any]] | None:
    """The outputs of ``step`` when it can be folded (``None`` when it cannot)."""
    node = step.node
    if node is None or step.op_type in NEVER_FOLDED:
        return None
    given = [n for n in node.input if n]
    if step.op_type in _SHAPE_READERS and given and given[0] not in known:
        # only the shape is read: a vector of the dimensions (MXNet's shape)
        source = np.zeros(tuple(shapes[step.inputs.index(given[0])]), np.int8)
        return fold_node(node, [source], opset)
    if not all(n in known for n in given):
        return None
    return fold_node(node, [known[n] if n else None for n in node.input], opset)


def run_steps(
    steps: Sequence[Step],
    env: dict[str, Any],
    constants: dict[tuple[str, str], Any],
    *,
    each: Callable[[Step], AbstractContextManager[Any]] | None = None,
    known: dict[str, npt.NDArray[Any]] | None = None,
    opset: int = 0,
) -> dict[str, Any]:
    """Run ``steps`` on the ``NDArray``s of ``env`` (updated in place and returned).

    :param constants: the node constants made so far, by (node, key); new ones are added.
    :param each: a context manager entered around every node (``--breakdown``'s span).
    :param known: the values known now, by name (updated in place with the outputs of
        the steps folded); ``None`` folds nothing.
    :param opset: the graph's opset, for folding.
    :raises UsageError: naming the node MXNet refused.
    """
    mx = mxnet()
    for step in steps:
        missing = [n for n in step.inputs if n not in env]
        if missing and known is not None and all(n in known for n in missing):
            if _folded(step, known, [], opset) is None:  # as a tensor: MXNet cannot
                raise UsageError(
                    f"node {step.name!r} ({step.op_type}): its input {missing[0]!r} is "
                    "empty, and MXNet 1.9.1 has no zero-size tensors"
                )
            xs = []
        else:
            xs = [env[n] for n in step.inputs]
        shapes = [tuple(x.shape) for x in xs]
        if known is not None:
            outs_known = _folded(step, known, shapes, opset)
            if outs_known is not None:
                for name, value in zip(step.outputs, outs_known, strict=False):
                    if not name:
                        continue
                    known[name] = value
                    if value.size == 0:  # known, but MXNet has no zero-size tensors
                        continue
                    key = (step.name, _fold_key(name, value))
                    found = constants.get(key)
                    if found is None:
                        array = _mx_array(value)
                        found = constants[key] = mx.nd.array(array, dtype=array.dtype)
                    env[name] = found
                continue

        def constant(key: str, value: npt.NDArray[Any], node: str = step.name) -> Any:
            return _node_constant(constants, (node, _constant_key(key, value)), value)

        values = [None if known is None else known.get(n) for n in step.inputs]
        ctx = Context(mx.nd, shapes, [np.dtype(x.dtype) for x in xs], constant, values)
        with each(step) if each is not None else nullcontext():
            try:
                outs = step.fn(ctx, xs)
            except mx.base.MXNetError as exc:
                raise UsageError(
                    f"node {step.name!r} ({step.op_type}): MXNet failed: {_first_line(exc)}"
                ) from None
        env.update((name, value) for name, value in zip(step.outputs, outs, strict=False) if name)
    return env


@dataclass
class CompiledGraph:
    """A graph compiled for one signature of feeds.

    :param op: the ``CachedOp``.
    :param inputs: the names of its inputs, in the order it takes them.
    :param outputs: the names of its outputs, in order.
    :param constants: the arrays of the node constants among ``inputs``.
    :param known: the values known when it was compiled (folding runs node by node
        start from them).
    """

    op: Any
    inputs: list[str]
    outputs: list[str]
    constants: dict[str, Any]
    known: dict[str, npt.NDArray[Any]] = field(default_factory=dict)
    #: The op's arguments, feeds left ``None`` (filled by the executor once).
    args: list[Any] = field(default_factory=list)
    #: Where the feeds go among the arguments: (position, feed name).
    feeds: list[tuple[int, str]] = field(default_factory=list)
    #: When the op has one more output after ``outputs``, counting the correct
    #: predictions: (the index of the scores among ``outputs``, the labels' feed).
    counts: tuple[int, str] | None = None
    #: The shape and type of every value, by name (a guess for the next signature).
    shapes: dict[str, Shape] = field(default_factory=dict)
    dtypes: dict[str, np.dtype[Any]] = field(default_factory=dict)


def build_symbol(
    steps: Sequence[Step],
    shapes: Mapping[str, Shape],
    dtypes: Mapping[str, np.dtype[Any]],
    outputs: Sequence[str],
    node_constants: dict[tuple[str, str], Any],
    known: Mapping[str, npt.NDArray[Any]] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """The symbol computing ``outputs`` and the arrays of the node constants it reads.

    ``shapes`` and ``dtypes`` are those of every value, from :func:`run_steps` on the
    same feeds; ``node_constants`` the constants that run made, and ``known`` the values
    it knew (steps it folded read their outputs from its constants).
    """
    built = _Build(shapes, dtypes, node_constants, dict(known or {}))
    return built.symbol(steps, outputs), built.fed


def _node_constant(
    node_constants: dict[tuple[str, str], Any], key: tuple[str, str], array: npt.NDArray[Any]
) -> Any:
    """The node constant ``key``, made from ``array`` as :func:`run_steps` makes it when
    no run made it yet."""
    found = node_constants.get(key)
    if found is None:
        found = node_constants[key] = mxnet().nd.array(array, dtype=array.dtype)
    return found


class _Build:
    """One symbol being built: the symbol of every value it reads or computes
    (:attr:`env`), the arrays of its node constants (:attr:`fed`), and what is known.

    :param shapes: the shape of every value (may be a :class:`_Inferring`).
    :param opset: the graph's opset, to fold the nodes whose inputs become known while
        the symbol is built; ``None`` when ``known`` already holds every folded value.
    """

    def __init__(
        self,
        shapes: Mapping[str, Shape],
        dtypes: Mapping[str, np.dtype[Any]],
        node_constants: dict[tuple[str, str], Any],
        known: dict[str, npt.NDArray[Any]],
        opset: int | None = None,
    ) -> None:
        self.shapes, self.dtypes, self.known, self.opset = shapes, dtypes, known, opset
        self.node_constants = node_constants
        self.env: dict[str, Any] = {}
        self.fed: dict[str, Any] = {}
        self._variables: set[int] = set()

    def value(self, name: str) -> Any:
        """The symbol of ``name``; a new variable for one no node computed."""
        found = self.env.get(name)
        if found is None:
            found = self.env[name] = mxnet().sym.var(name)
            self._variables.add(id(found))
        return found

    def _fold(self, step: Step) -> None:
        """Fold ``step`` as :func:`run_steps` folds it, from the shapes told (updated
        with those of its outputs, as MXNet holds them)."""
        known, node = self.known, step.node
        given = [n for n in (node.input if node is not None else ()) if n]
        if step.op_type in _SHAPE_READERS and given and given[0] not in known:
            shapes = [tuple(self.shapes[n]) for n in step.inputs]
        elif all(n in known for n in given):
            shapes = []
        else:
            return
        outs = _folded(step, known, shapes, self.opset or 0)
        for name, value in zip(step.outputs, outs or [], strict=False):
            if name:
                known[name] = value
                if value.size:
                    array = _mx_array(value)
                    key = (step.name, _fold_key(name, value))
                    _node_constant(self.node_constants, key, array)

    def symbol(self, steps: Sequence[Step], outputs: Sequence[str]) -> Any:
        """The symbol of ``steps`` computing ``outputs``."""
        mx = mxnet()
        known, value = self.known, self.value
        with mx.name.Prefix("d5_"):
            for step in steps:
                if self.opset is not None:
                    self._fold(step)
                if step.node is not None and all(o in known for o in step.outputs if o):
                    for name in (o for o in step.outputs if o and known[o].size):
                        key = _fold_key(name, known[name])
                        self.fed[f"{step.name}/{key}"] = self.node_constants[(step.name, key)]
                        self.env[name] = value(f"{step.name}/{key}")
                    continue
                ctx = Context(
                    mx.sym,
                    self._described(step.inputs, self.shapes, tuple),
                    self._described(step.inputs, self.dtypes, None),
                    self._constant_maker(step.name),
                    [known.get(n) for n in step.inputs],
                )
                outs = step.fn(ctx, [value(n) for n in step.inputs])
                self.env.update((n, v) for n, v in zip(step.outputs, outs, strict=False) if n)
            heads = []
            seen: set[int] = set()
            for name in outputs:
                head = value(name)  # a node's output, or a parameter or constant fed as is
                if id(head) in self._variables or id(head) in seen:  # an op's output
                    head = mx.sym.identity(head)
                seen.add(id(head))
                heads.append(head)
            return mx.sym.Group(heads)

    @staticmethod
    def _described(
        names: Sequence[str], table: Mapping[str, Any], convert: Callable[[Any], Any] | None
    ) -> Sequence[Any]:
        """The shapes or types of the inputs ``names`` from ``table`` (``convert``-ed):
        read now when ``table`` holds them all; looked up as the node reads them when it
        infers them (an :class:`_Inferring`), so that a node reading none costs no
        inference."""
        if isinstance(table, _Inferring):
            return _Looked(names, table, convert)
        return [table[n] if convert is None else convert(table[n]) for n in names]

    def _constant_maker(self, node: str) -> Callable[[str, npt.NDArray[Any]], Any]:
        def constant(key: str, array: npt.NDArray[Any]) -> Any:
            mark = _constant_key(key, array)
            self.fed[f"{node}/{mark}"] = _node_constant(self.node_constants, (node, mark), array)
            return self.value(f"{node}/{mark}")

        return constant


class _ArgumentShapes:
    """The shape and type of every array a symbol reads, by name, each read from its
    ``NDArray`` once (a read is a call into MXNet; an inference per node reads them all
    again otherwise).

    :param arrays: the arrays by name; more may be added while the symbol is built.
    """

    def __init__(self, arrays: Mapping[str, Any]) -> None:
        self.arrays = dict(arrays)
        self._seen: dict[str, tuple[Shape, np.dtype[Any]]] = {}

    def add(self, arrays: Mapping[str, Any]) -> None:
        """Tell the arrays ``arrays`` too (node constants made since)."""
        self.arrays.update(arrays)

    def of(self, name: str) -> tuple[Shape, np.dtype[Any]]:
        """The shape and type of the array ``name``."""
        found = self._seen.get(name)
        if found is None:
            array = self.arrays[name]
            found = self._seen[name] = (tuple(array.shape), np.dtype(array.dtype))
        return found


def _inferred(
    symbols: Mapping[str, Any], args: _ArgumentShapes
) -> tuple[list[Shape], list[np.dtype[Any]]] | None:
    """The shape and type MXNet infers for every one of ``symbols`` from the arrays
    ``args`` tells (their inputs by name), in one pass; ``None`` when it cannot infer
    all."""
    mx = mxnet()
    group = mx.sym.Group(list(symbols.values()))
    described = {n: args.of(n) for n in group.list_arguments()}
    # the methods infer_shape and infer_type wrap: those print their arguments on failure
    _, shapes, _ = group._infer_shape_impl(False, **{n: d[0] for n, d in described.items()})
    _, types, _ = group._infer_type_impl(False, **{n: d[1] for n, d in described.items()})
    if shapes is None or types is None or any(0 in s for s in shapes):
        return None
    return [tuple(int(d) for d in s) for s in shapes], [np.dtype(t) for t in types]


class _Inferring(dict[str, Any]):
    """Shapes (or types) by value name; one missing is inferred by MXNet, with those of
    every value built since the last inference (see :meth:`_Inference.inferring` and
    :meth:`_Inference.guessed`)."""

    def __init__(self, given: Mapping[str, Any], infer: Callable[[], None]) -> None:
        super().__init__(given)
        self._infer = infer

    def __missing__(self, name: str) -> Any:
        self._infer()
        return dict.__getitem__(self, name)  # a KeyError when MXNet could not tell


class _Looked(Sequence[Any]):
    """The shapes or types of a node's inputs, each looked up in ``table`` (and
    ``convert``-ed) when the node reads it."""

    def __init__(
        self, names: Sequence[str], table: Mapping[str, Any], convert: Callable[[Any], Any] | None
    ) -> None:
        self._names, self._table, self._convert = list(names), table, convert

    def __len__(self) -> int:
        return len(self._names)

    def _one(self, name: str) -> Any:
        found = self._table[name]
        return found if self._convert is None else self._convert(found)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self._one(n) for n in self._names[index]]
        return self._one(self._names[index])

    def __repr__(self) -> str:
        return repr(list(self))


@dataclass
class Derived:
    """A symbol :func:`derive_symbol` built, with the shape and type of every value."""

    symbol: Any
    fed: dict[str, Any]
    shapes: dict[str, Shape]
    dtypes: dict[str, np.dtype[Any]]


class _Inference:
    """What :func:`derive_symbol` builds from: the steps, the arrays the symbol reads,
    and what is known before any node is folded."""

    def __init__(
        self,
        steps: Sequence[Step],
        outputs: Sequence[str],
        node_constants: dict[tuple[str, str], Any],
        known: Mapping[str, npt.NDArray[Any]],
        inputs: Mapping[str, Any],
        opset: int,
    ) -> None:
        self.steps, self.outputs, self.known, self.inputs = steps, outputs, known, inputs
        self.node_constants, self.opset = node_constants, opset

    def guessed(
        self, shapes: Mapping[str, Shape], dtypes: Mapping[str, np.dtype[Any]]
    ) -> tuple[Derived | None, dict[str, tuple[Shape, np.dtype[Any]]]]:
        """The symbol built from ``shapes`` and ``dtypes`` when MXNet infers the same for
        every value a node was told; else ``None`` and what MXNet inferred instead.

        The guess may leave values out: one a node reads is inferred by MXNet when it is
        read (with every value built since, as :meth:`inferring` does), one no node reads
        is taken from the last inference. Every shape and type a node was told, guessed
        or inferred, is checked by that last inference of every value the symbol reads
        or computes, so a wrong guess costs a round, never a wrong symbol.

        :raises MXNetError: when the inference fails (a guess made a symbol MXNet refuses).
        :raises KeyError: when MXNet cannot infer every shape.
        """
        built, told, types, args, _ = self._lazily(shapes, dtypes)
        symbol = built.symbol(self.steps, self.outputs)
        args.add(built.fed)
        found = _inferred(built.env, args)
        if found is None:
            raise KeyError("MXNet could not infer every shape")
        described = {
            name: (shape, dtype) for name, shape, dtype in zip(built.env, *found, strict=True)
        }
        wrong = {
            n: d
            for n, d in described.items()
            if (dict.get(told, n), dict.get(types, n)) != d
            and (dict.__contains__(told, n) or dict.__contains__(types, n))
        }
        if wrong:
            return None, wrong
        every = {**dict(told), **{n: d[0] for n, d in described.items()}}
        every_type = {**dict(types), **{n: d[1] for n, d in described.items()}}
        return Derived(symbol, built.fed, every, every_type), {}

    def inferring(self) -> Derived:
        """The symbol built node by node, each shape and type a node reads inferred by
        MXNet when it is first read (every value built since the last inference with it).

        :raises KeyError: when MXNet cannot infer a shape a node reads.
        """
        given = {n: tuple(a.shape) for n, a in self.inputs.items()}
        types = {n: np.dtype(a.dtype) for n, a in self.inputs.items()}
        built, shapes, dtypes, _, infer = self._lazily(given, types)
        symbol = built.symbol(self.steps, self.outputs)
        infer()  # the values no node read
        return Derived(symbol, built.fed, dict(shapes), dict(dtypes))

    def _lazily(
        self, shapes: Mapping[str, Shape], dtypes: Mapping[str, np.dtype[Any]]
    ) -> tuple[_Build, _Inferring, _Inferring, _ArgumentShapes, Callable[[], None]]:
        """A build told ``shapes`` and ``dtypes``, in which a node that reads a value
        neither tells has MXNet infer it, with every value built since the last such
        inference; the shapes and types it was told or inferred, the argument shapes of
        the inferences, and the inference of every value built and not yet known."""
        args = _ArgumentShapes(self.inputs)
        built: _Build

        def infer() -> None:
            pending = {
                n: v
                for n, v in built.env.items()
                if not (dict.__contains__(told, n) and dict.__contains__(types, n))
            }
            args.add(built.fed)
            found = _inferred(pending, args) if pending else None
            for name, shape, dtype in zip(pending, *(found or ([], [])), strict=True):
                dict.__setitem__(told, name, shape)
                dict.__setitem__(types, name, dtype)

        told, types = _Inferring(shapes, infer), _Inferring(dtypes, infer)
        built = _Build(told, types, self.node_constants, dict(self.known), self.opset)
        return built, told, types, args, infer


def derive_symbol(
    steps: Sequence[Step],
    guess: Mapping[str, Shape],
    dtypes: Mapping[str, np.dtype[Any]],
    outputs: Sequence[str],
    node_constants: dict[tuple[str, str], Any],
    known: Mapping[str, npt.NDArray[Any]],
    inputs: Mapping[str, Any],
    opset: int,
    rounds: int = 3,
) -> Derived | None:
    """The symbol :func:`build_symbol` makes after :func:`run_steps` on the feeds among
    ``inputs``, built without running the graph, as a ``CachedOp`` handles a new shape:
    from MXNet's shape and type inference.

    First from ``guess`` and ``dtypes`` (a shape and a type for the values, those of
    ``inputs`` exact; a value left out is inferred by MXNet when a node reads it): the
    nodes are folded and the symbol built from them, and one inference of every value
    the symbol reads or computes checks every shape and type a node was told; where
    MXNet infers others, they are the next round's guess. When no round holds, the
    symbol is built node by node, MXNet inferring each shape a node reads (an inference
    for each node that reads a shape or type not yet inferred, instead of one).

    :param inputs: the arrays the symbol reads, by name: feeds, parameters, constants.
    :return: ``None`` when a node or MXNet refuses (the caller then runs the graph, which
        names what is wrong).
    """
    mx = mxnet()
    inference = _Inference(steps, outputs, node_constants, known, inputs, opset)
    shapes, types = dict(guess), dict(dtypes)
    refused = (UsageError, mx.base.MXNetError, KeyError, IndexError, ValueError)
    for _ in range(rounds):
        try:
            derived, wrong = inference.guessed(shapes, types)
        except refused:
            break
        if derived is not None:
            return derived
        for name, (shape, dtype) in wrong.items():
            shapes[name], types[name] = shape, dtype
    try:
        return inference.inferring()
    except refused:
        return None


def compile_symbol(
    symbol: Any, outputs: Sequence[str], constants: dict[str, Any], data: Iterable[str]
) -> CompiledGraph:
    """The ``CachedOp`` of ``symbol`` (see the module docstring).

    :param data: the names of the inputs fed anew with each call (the graph's feeds);
        every other input (parameters, constants, statistics buffers) is marked a
        parameter, as Gluon marks its parameters. MXNet's oneDNN convolutions keep the
        reordered copy of a parameter's weights between calls; without the mark they
        reorder them on every call (+170 µs per resnet20 inference at batch 1 here).
    """
    mx = mxnet()
    inputs = list(symbol.list_inputs())
    fed = set(data)
    flags = [
        *CACHED_OP_FLAGS,
        ("data_indices", [i for i, n in enumerate(inputs) if n in fed]),
        ("param_indices", [i for i, n in enumerate(inputs) if n not in fed]),
    ]
    return CompiledGraph(mx.nd.CachedOp(symbol, flags=flags), inputs, list(outputs), constants)
