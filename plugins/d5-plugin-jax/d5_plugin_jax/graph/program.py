"""An ONNX graph lowered to one pure JAX function.

:class:`Program` walks the graph's nodes in order and calls each node's translation
from :data:`~d5_plugin_jax.graph.registry.REGISTRY`. :meth:`Program.apply` is a pure
function of the parameters and the feeds, so ``jax.jit`` traces it once per signature
of its arguments into one XLA computation, and ``jax.vjp`` differentiates it.

Static values. Constants, integer initializers, the parameters read where a node needs
a value while tracing (a Reshape's shape, a Dropout ratio: :data:`STATIC_INPUTS`) and
the feeds read there are numpy arrays inside the trace. A node whose inputs are all
numpy arrays is evaluated right away (under ``jax.ensure_compile_time_eval``) and its
outputs kept as numpy arrays, so shape arithmetic (Shape, Gather, Concat, then
Reshape) stays static under ``jit``. Nodes computed from constants alone are folded
once, when the program is built; the large values they give (:attr:`Program.hoisted`)
are passed in with the parameters rather than embedded in the compiled function.

Training. With ``training`` set, Dropout applies the reference's mask and
BatchNormalization normalizes with the batch statistics; the running statistics it
computes come back in the second result of :meth:`Program.apply`, by the name of the
parameter they replace.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import numpy as np
import onnx

from d5_plugin_jax.graph.registry import CHECKS, REGISTRY, NodeContext, OpFn, is_static
from d5core.api import UsageError
from d5core.onnx import GraphView, node_attributes

__all__ = ["HOISTED_SIZE", "STATIC_INPUTS", "Program", "jax_module", "static_input_names"]

#: The inputs (by position) an operator needs while tracing: shapes, axes, ratios, sizes.
STATIC_INPUTS: Mapping[str, frozenset[int]] = {
    "Reshape": frozenset({1}),
    "Expand": frozenset({1}),
    "Tile": frozenset({1}),
    "Slice": frozenset({1, 2, 3, 4}),
    "Squeeze": frozenset({1}),
    "Unsqueeze": frozenset({1}),
    "Split": frozenset({1}),
    "Dropout": frozenset({1, 2}),
    "ConstantOfShape": frozenset({0}),
    "Range": frozenset({0, 1, 2}),
    "TopK": frozenset({1}),
    "OneHot": frozenset({1}),
    "Pad": frozenset({1, 3}),
    "Resize": frozenset({1, 2, 3}),
    "Upsample": frozenset({1}),
    "ReduceSum": frozenset({1}),
    "ReduceMean": frozenset({1}),
    "ReduceMax": frozenset({1}),
    "ReduceMin": frozenset({1}),
    "ReduceProd": frozenset({1}),
    "ReduceL1": frozenset({1}),
    "ReduceL2": frozenset({1}),
    "ReduceLogSum": frozenset({1}),
    "ReduceLogSumExp": frozenset({1}),
    "ReduceSumSquare": frozenset({1}),
    "CumSum": frozenset({1}),
    "Trilu": frozenset({1}),
    "CenterCropPad": frozenset({1, 2}),
    "Col2Im": frozenset({1, 2}),
    "MaxUnpool": frozenset({2}),
    "CumProd": frozenset({1}),
    "DFT": frozenset({1, 2}),
    "HannWindow": frozenset({0}),
    "HammingWindow": frozenset({0}),
    "BlackmanWindow": frozenset({0}),
    "Compress": frozenset({1}),
    "NonZero": frozenset({0}),
    "AffineGrid": frozenset({1}),
    "Loop": frozenset({0, 1}),
}


#: Operators that read only the shape of their input.
_SHAPE_READERS = frozenset({"Shape", "Size"})
#: Folded values with more elements than this are arguments of the compiled function.
HOISTED_SIZE = 1024
#: Operators never folded when the program is built: their result depends on the mode.
_NOT_FOLDED = frozenset({"Dropout", "BatchNormalization"})


def jax_module() -> Any:
    """The ``jax`` module, imported and set up by :func:`d5_plugin_jax._jax.jax`."""
    from d5_plugin_jax._jax import jax

    return jax()


def static_input_names(graph: GraphView) -> frozenset[str]:
    """The names whose values a node needs while tracing: those read at a position of
    :data:`STATIC_INPUTS`, and, through the nodes that compute them, the names those
    are computed from (a fed shape turned into pads by Sub and Concat, say). Shape and
    Size stop the walk: they read only the shape of their input."""
    wanted: set[str] = set()
    for node in graph.nodes:
        for position in STATIC_INPUTS.get(node.op_type, ()):
            if position < len(node.input) and node.input[position]:
                wanted.add(node.input[position])
    producers = {name: node for node in graph.nodes for name in node.output if name}
    pending = list(wanted)
    while pending:
        producer = producers.get(pending.pop())
        if producer is None or producer.op_type in _SHAPE_READERS:
            continue
        for name in producer.input:
            if name and name not in wanted:
                wanted.add(name)
                pending.append(name)
    return frozenset(wanted)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


@dataclass(frozen=True)
class _Step:
    """One node with its translation and decoded attributes."""

    node: onnx.NodeProto
    fn: OpFn
    attrs: Mapping[str, Any]


class Program:
    """The graph of ``graph`` as one pure function, :meth:`apply`.

    :param graph: the network's :class:`~d5core.onnx.GraphView`.
    :param statics: values read as numpy arrays while tracing, by name: integer
        initializers and the parameters read where a static value is needed.
    :raises UsageError: naming the first node whose operator has no translation.
    """

    def __init__(self, graph: GraphView, statics: Mapping[str, np.ndarray]) -> None:
        self.graph = graph
        self.statics = dict(statics)
        self.outputs = list(graph.outputs)
        steps = []
        for node in graph.nodes:
            fn = REGISTRY.get(node.op_type) if node.domain in ("", "ai.onnx", "ai.d5") else None
            if fn is None:
                raise UsageError(
                    f"the jax executor does not support operator {node.op_type!r} "
                    f"(node {node.name!r})"
                )
            try:
                attrs = node_attributes(node)
            except Exception as exc:
                raise UsageError(
                    f"node {node.name!r} ({node.op_type}): unreadable attributes: "
                    f"{_first_line(exc)}"
                ) from None
            steps.append(_Step(node, fn, attrs))
            found = CHECKS.get(node.op_type)
            if found is not None:
                self._check(found, NodeContext(node, attrs, False, None, graph.opset))
        self.steps = steps
        self._check_dropout_ratios()
        #: Values computed from constants alone when the program is built, by name: the
        #: small ones are read as numpy arrays while tracing, the others (:attr:`hoisted`)
        #: are arguments of the compiled function (see :meth:`_fold`).
        self.folded: dict[str, np.ndarray] = {}
        #: The large folded values, which callers pass in ``params`` (as arrays).
        self.hoisted: dict[str, np.ndarray] = {}
        self._fold()

    def _fold(self) -> None:
        """Compute the nodes whose inputs are all constants now, once, in numpy.

        Values of more than :data:`HOISTED_SIZE` elements (the weights the onnx package's
        light models make with ConstantOfShape) go to :attr:`hoisted`: embedded in the
        XLA computation as literals they slow compilation down, and XLA's CPU compiler
        was seen to compute a convolution of such literal weights wrongly (squeezenet's
        logits came out 0 or inf, not 9.5e9).
        """
        known: dict[str, Any] = dict(self.statics)
        kept = []
        for step in self.steps:
            node = step.node
            names = [n for n in node.input if n]
            if node.op_type in _NOT_FOLDED or not all(n in known for n in names):
                kept.append(step)
                continue
            args = [known[n] if n else None for n in node.input]
            results = self._run(
                step, args, NodeContext(node, step.attrs, False, None, self.graph.opset)
            )
            for name, value in zip(node.output, results, strict=False):
                if name and value is not None:
                    known[name] = self.folded[name] = np.asarray(value)
        self.steps = kept
        self.hoisted = {k: v for k, v in self.folded.items() if v.size > HOISTED_SIZE}
        self.folded = {k: v for k, v in self.folded.items() if k not in self.hoisted}

    def _check_dropout_ratios(self) -> None:
        """Refuse, naming the node, a Dropout whose known ratio is outside [0, 1)."""
        constants = {
            step.node.output[0]: step.attrs.get("value")
            for step in self.steps
            if step.node.op_type == "Constant" and step.node.output
        }
        for step in self.steps:
            node = step.node
            if node.op_type != "Dropout":
                continue
            given: Any = step.attrs.get("ratio")
            if len(node.input) > 1 and node.input[1] and self.graph.opset >= 12:
                name = node.input[1]
                given = constants.get(name, self.statics.get(name))
            if given is None:
                continue
            ratio = float(np.asarray(given).reshape(-1)[0])
            if not 0.0 <= ratio < 1.0:
                raise UsageError(
                    f"node {node.name!r} (Dropout): ratio must lie in [0, 1), not {ratio}"
                )

    def apply(
        self,
        params: Mapping[str, Any],
        feeds: Mapping[str, Any],
        training: bool,
        rng: Any | None,
        fetch: Sequence[str] = (),
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Every graph output (and the tensors named in ``fetch``) and, in training,
        BatchNormalization's new running statistics (by the name of the mean or
        variance parameter they replace)."""
        jax = jax_module()
        env: dict[str, Any] = {**self.hoisted, **params, **feeds, **self.statics, **self.folded}
        stats: dict[str, Any] = {}
        opset = self.graph.opset
        for index, step in enumerate(self.steps):
            node = step.node
            args = [env[name] if name else None for name in node.input]
            key = jax.random.fold_in(rng, index) if training and rng is not None else None
            ctx = NodeContext(node, step.attrs, training, key, opset, MappingProxyType(env))
            results = self._run(step, args, ctx)
            for name, value in zip(node.output, results, strict=False):
                if name:
                    env[name] = value
            if training and node.op_type == "BatchNormalization" and len(results) >= 3:
                for source, value in zip(node.input[3:5], results[1:3], strict=False):
                    if source in self.graph.parameters:
                        stats[source] = value
        missing = [name for name in self.outputs if name not in env]
        if missing:
            raise UsageError(f"graph output {missing[0]!r} is computed by no node")
        for name in fetch:
            if name not in env:
                raise UsageError(f"{name!r} is not a tensor of the network")
        return {name: env[name] for name in [*self.outputs, *fetch]}, stats

    @staticmethod
    def _check(fn: Callable[[NodeContext], None], ctx: NodeContext) -> None:
        """Run a build-time check; its refusal is one line naming the node."""
        node = ctx.node
        try:
            fn(ctx)
        except UsageError as exc:
            message = _first_line(exc)
            if f"node {node.name!r}" not in message:
                message = f"node {node.name!r} ({node.op_type}): {message}"
            raise UsageError(message) from None
        except (KeyError, TypeError, ValueError) as exc:
            raise UsageError(
                f"node {node.name!r} ({node.op_type}): bad attributes: {_first_line(exc)}"
            ) from None

    @staticmethod
    def _run(step: _Step, args: list[Any], ctx: NodeContext) -> list[Any]:
        """One node's outputs; numpy arrays when its inputs all are (evaluated at once,
        also inside a trace). Errors become one-line UsageErrors naming the node."""
        node = step.node
        try:
            if all(a is None or is_static(a) for a in args):
                with jax_module().ensure_compile_time_eval():
                    return [None if r is None else np.asarray(r) for r in step.fn(ctx, args)]
            return list(step.fn(ctx, args))
        except UsageError as exc:
            message = _first_line(exc)
            if f"node {node.name!r}" not in message:
                message = f"node {node.name!r} ({node.op_type}): {message}"
            raise UsageError(message) from None
        except Exception as exc:
            raise UsageError(
                f"node {node.name!r} ({node.op_type}): JAX cannot run it: {_first_line(exc)}"
            ) from None

    def has_tensor(self, name: str) -> bool:
        """Whether ``name`` is a tensor of the graph (an input, parameter or node output)."""
        return (
            name in self.graph.inputs
            or name in self.graph.parameters
            or name in self.folded
            or name in self.hoisted
            or any(name in step.node.output for step in self.steps)
        )
