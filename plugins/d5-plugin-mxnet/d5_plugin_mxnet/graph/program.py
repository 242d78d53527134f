"""Running translated steps: imperatively with ``mx.nd``, or built into one symbol that
MXNet compiles into a ``CachedOp`` (what a hybridized Gluon block runs).

:func:`run_steps` runs the steps one by one on ``NDArray``s; it tells each node's input
shapes, and it is what ``--breakdown`` times node by node (``each`` wraps every node).
:func:`build_symbol` builds the symbol from the shapes such a run found, and
:func:`compile_symbol` makes the ``CachedOp``: static memory and static shapes, the
flags of ``HybridBlock.hybridize(static_alloc=True, static_shape=True)``, and the feeds
told apart from the parameters, as Gluon tells them.

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
from typing import Any

import numpy as np
import numpy.typing as npt
import onnx

from d5_plugin_mxnet._mx import mxnet
from d5_plugin_mxnet.graph.base import Context, Shape, Step
from d5core.api import UsageError

__all__ = [
    "NEVER_FOLDED",
    "CompiledGraph",
    "build_symbol",
    "compile_symbol",
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
            found = constants.get((node, key))
            if found is None:
                found = constants[(node, key)] = mx.nd.array(value, dtype=value.dtype)
            return found

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


def build_symbol(
    steps: Sequence[Step],
    shapes: Mapping[str, Shape],
    dtypes: Mapping[str, np.dtype[Any]],
    outputs: Sequence[str],
    node_constants: Mapping[tuple[str, str], Any],
    known: Mapping[str, npt.NDArray[Any]] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """The symbol computing ``outputs`` and the arrays of the node constants it reads.

    ``shapes`` and ``dtypes`` are those of every value, from :func:`run_steps` on the
    same feeds; ``node_constants`` the constants that run made, and ``known`` the values
    it knew (steps it folded read their outputs from its constants).
    """
    known = known or {}
    mx = mxnet()
    env: dict[str, Any] = {}
    variables: set[int] = set()
    fed: dict[str, Any] = {}

    def value(name: str) -> Any:
        found = env.get(name)
        if found is None:
            found = env[name] = mx.sym.var(name)
            variables.add(id(found))
        return found

    with mx.name.Prefix("d5_"):
        for step in steps:
            if step.node is not None and all(o in known for o in step.outputs if o):
                for name in (o for o in step.outputs if o and known[o].size):
                    key = _fold_key(name, known[name])
                    fed[f"{step.name}/{key}"] = node_constants[(step.name, key)]
                    env[name] = value(f"{step.name}/{key}")
                continue

            def constant(key: str, array: npt.NDArray[Any], node: str = step.name) -> Any:
                name = f"{node}/{key}"
                fed[name] = node_constants[(node, key)]
                return value(name)

            ctx = Context(
                mx.sym,
                [tuple(shapes[n]) for n in step.inputs],
                [dtypes[n] for n in step.inputs],
                constant,
                [known.get(n) for n in step.inputs],
            )
            outs = step.fn(ctx, [value(n) for n in step.inputs])
            env.update((name, v) for name, v in zip(step.outputs, outs, strict=False) if name)
        heads = []
        seen: set[int] = set()
        for name in outputs:
            head = value(name)  # a node's output, or a parameter or constant fed as is
            if id(head) in variables or id(head) in seen:  # a head must be an op's output
                head = mx.sym.identity(head)
            seen.add(id(head))
            heads.append(head)
        return mx.sym.Group(heads), fed


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
