"""The numpy executor's fallback: onnx's reference evaluator, for operators d5 lacks.

The reference executor runs a node with d5's own numpy operators where one exists. A
node of any other operator that the ``onnx`` package's reference implementation
(``onnx.reference``) knows is run by it instead: its forward only, and reported as such
(:meth:`NumpyExecutor.details <d5_plugin_numpy.executor.NumpyExecutor.details>`, the notes
of ``d5 validate net``, the fallback count of ``d5 conformance numpy``).

Each such node gets one :class:`FallbackNode`, built when the executor is: a one-node
model (the node, its opset imports, the model's local functions, and as inputs the
node's own plus any outer-scope names its subgraphs read) loaded once into an
``onnx.reference.ReferenceEvaluator``. A call feeds that evaluator and returns the node's
outputs in the node's order, so control flow (``If``, ``Loop``, ``Scan``), sequences,
optionals and function operators work as far as onnx's evaluator runs them.

Gradients are not available: :meth:`FallbackNode.backward` raises a one-line
:class:`~d5core.api.UsageError` naming the operator.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

import onnx
from onnx import helper

from d5core.api import Operator, UsageError

__all__ = [
    "ENGINE",
    "FallbackNode",
    "implicit_inputs",
    "reference_op_types",
    "reference_supports",
    "value_types",
]

#: How reports name the engine that runs fallback nodes.
ENGINE = "onnx.reference"

#: The onnx.reference loaders of each operator domain (module, function).
_LOADERS: dict[str, str] = {
    "": "onnx.reference.ops",
    "ai.onnx": "onnx.reference.ops",
    "ai.onnx.ml": "onnx.reference.ops.aionnxml",
    "ai.onnx.preview": "onnx.reference.ops.aionnx_preview",
    "ai.onnx.preview.training": "onnx.reference.ops.aionnx_preview_training",
    "experimental": "onnx.reference.ops.experimental",
}


@functools.lru_cache(maxsize=1024)
def reference_supports(op_type: str, domain: str = "", opset: int | None = None) -> bool:
    """Whether ``onnx.reference`` has an implementation of ``op_type`` in ``domain``
    (at ``opset``; ``None`` means the newest). Operators defined by a function body,
    including those whose body depends on the input types, count as implemented."""
    import importlib

    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import RuntimeContextError

    module = _LOADERS.get(domain)
    if module is None:
        return False
    load_op = importlib.import_module(module).load_op
    try:
        if domain in ("", "ai.onnx"):
            load_op("", op_type, opset, evaluator_cls=ReferenceEvaluator)
        else:
            load_op(domain, op_type, opset)
    except RuntimeContextError:
        return True  # a function whose body depends on the input types
    except Exception:  # the loaders raise several types for "unknown"
        return False
    return True


@functools.lru_cache(maxsize=1)
def reference_op_types() -> frozenset[str]:
    """Every default-domain operator type (of the installed onnx's newest opset) that
    ``onnx.reference`` runs."""
    from onnx import defs

    return frozenset(
        s.name for s in defs.get_all_schemas() if s.domain == "" and reference_supports(s.name)
    )


def implicit_inputs(node: onnx.NodeProto) -> list[str]:
    """Names that ``node``'s subgraphs (If branches, Loop and Scan bodies, at any depth)
    read from the enclosing graph, in order of first use."""
    found: list[str] = []
    for attr in node.attribute:
        graphs = [attr.g] if attr.HasField("g") else list(attr.graphs)
        for graph in graphs:
            for name in _free_names(graph):
                if name not in found:
                    found.append(name)
    return found


def _free_names(graph: onnx.GraphProto) -> list[str]:
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {t.values.name for t in graph.sparse_initializer}
    free: list[str] = []
    for node in graph.node:
        for name in [*node.input, *implicit_inputs(node)]:
            if name and name not in defined and name not in free:
                free.append(name)
        defined.update(o for o in node.output if o)
    return free


def value_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    """The type of every value of ``model``'s main graph that is declared or that onnx's
    shape inference finds (the model as it is when inference fails)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # an exotic model: keep what it declares
        inferred = model
    graph = inferred.graph
    types: dict[str, onnx.TypeProto] = {}
    for info in [*graph.input, *graph.value_info, *graph.output]:
        if info.HasField("type"):
            types.setdefault(info.name, info.type)
    for tensor in graph.initializer:
        types.setdefault(
            tensor.name, helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))
        )
    return types


class FallbackNode(Operator):
    """One ONNX node run forward by ``onnx.reference``: built once, called per step.

    :param node: the node, as the model has it (not translated to another opset).
    :param model: the model it belongs to (opset imports, IR version, local functions).
    :param types: known value types by name (:func:`value_types`), which operators
        whose implementation depends on their input types need.
    :raises UsageError: one line naming the node when onnx.reference cannot load it.

    :attr:`feeds` lists the values a call takes, in order: the node's distinct non-empty
    inputs, then the outer-scope names its subgraphs read.
    """

    def __init__(
        self,
        node: onnx.NodeProto,
        model: onnx.ModelProto,
        types: Mapping[str, onnx.TypeProto] | None = None,
    ) -> None:
        super().__init__({})
        from onnx.reference import ReferenceEvaluator

        self.op_type = node.op_type  # type: ignore[misc]
        self.node_name = node.name
        self.domain = node.domain
        known = types or {}
        feeds: list[str] = []
        for name in [*node.input, *implicit_inputs(node)]:
            if name and name not in feeds:
                feeds.append(name)
        #: The names of the values each call takes, in order.
        self.feeds: list[str] = feeds
        #: The node's outputs, in order ("" for an output it does not produce).
        self.outputs: list[str] = list(node.output)
        produced = [o for o in node.output if o]

        def info(name: str) -> onnx.ValueInfoProto:
            return helper.make_value_info(name, known.get(name, onnx.TypeProto()))

        graph = helper.make_graph(
            [node], f"{ENGINE} {node.name}", [info(n) for n in feeds], [info(n) for n in produced]
        )
        one = helper.make_model(
            graph, opset_imports=list(model.opset_import), functions=list(model.functions)
        )
        one.ir_version = model.ir_version
        try:
            self._evaluator = ReferenceEvaluator(one)
        except Exception as exc:
            raise UsageError(
                f"node {node.name!r} ({node.op_type}): {ENGINE} cannot run it: {_line(exc)}"
            ) from None
        self._produced = produced
        # The node's implementation, called directly: what the evaluator's run() does for
        # it, less building and checking a dictionary of every value on each call.
        impls = getattr(self._evaluator, "rt_nodes_", None)
        impl = impls[0] if isinstance(impls, list) and len(impls) == 1 else None
        if impl is not None and getattr(impl, "has_linked_attribute", False):
            impl = None
        self._impl = impl
        self._context = bool(impl is not None and impl.need_context())
        #: Per node input, its position in :attr:`feeds` (-1: an omitted optional input).
        self._positions = [feeds.index(n) if n else -1 for n in node.input]

    def forward(self, inputs: Sequence[Any]) -> list[Any]:
        """Run the node on ``inputs`` (one per :attr:`feeds`); its outputs in the node's
        order, ``None`` for an output it does not produce."""
        try:
            if self._impl is None:
                results = self._evaluator.run(None, dict(zip(self.feeds, inputs, strict=True)))
                by_name = dict(zip(self._produced, results, strict=True))
                return [by_name[o] if o else None for o in self.outputs]
            args = [inputs[i] if i >= 0 else None for i in self._positions]
            if self._context:
                outs = self._impl.run(*args, context=dict(zip(self.feeds, inputs, strict=True)))
            else:
                outs = self._impl.run(*args)
        except UsageError:
            raise
        except Exception as exc:
            raise UsageError(f"{ENGINE} failed: {_line(exc)}") from None
        found = list(outs)
        found += [None] * (len(self.outputs) - len(found))
        return [v if o else None for o, v in zip(self.outputs, found, strict=False)]

    def backward(
        self,
        grad_outputs: Sequence[Any],
        inputs: Sequence[Any],
        outputs: Sequence[Any],
    ) -> list[Any]:
        """Refuse: onnx.reference gives the forward only."""
        raise UsageError(
            f"node {self.node_name!r} ({self.op_type}) runs on {ENGINE}, which gives its "
            f"forward only: the numpy executor has no gradient of {self.op_type!r}; "
            "train with an executor that implements it"
        )


def _line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else ""
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__
