"""From ONNX nodes to node functions: the translator, and the operator types it knows.

The translation of each operator type lives in the module of its family
(:mod:`.arithmetic`, :mod:`.layers`, :mod:`.windows`, :mod:`.shaping`, :mod:`.losses`).
The translator resolves every attribute and static input once, per mode (inference or
training), and names the node in any error.

A static input (a Reshape's shape, Slice's starts, reduction axes) that is not a constant
or an initializer when the graph is translated (it is fed, or computed by nodes such as
Shape, Gather and Concat) is resolved later: the node is translated again for each set
of known values it meets (see :class:`~.base.Context`'s ``values``), and the executor
learns from :attr:`Translator.wanted` which feeds it must read as values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy.typing as npt
import onnx

from d5_plugin_mxnet.graph import (
    arithmetic,
    layers,
    losses,
    recurrent,
    reductions,
    shaping,
    tensors,
    windows,
)
from d5_plugin_mxnet.graph.base import Context, NodeFn, Step, Translated, Translation
from d5core.api import UsageError
from d5core.onnx import constant_value, node_attributes, node_errors

__all__ = ["CONSTANT_OPS", "OPS", "SUPPORTED_OPS", "Translator", "fold_constants"]

#: Operators evaluated once, when the graph is translated.
CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape"})
#: The translation of every operator type, by name.
OPS: dict[str, Translation] = {
    **arithmetic.OPS,
    **layers.OPS,
    **windows.OPS,
    **shaping.OPS,
    **losses.OPS,
    **tensors.OPS,
    **reductions.OPS,
    **recurrent.OPS,
}
#: Every operator type the mxnet executor runs.
SUPPORTED_OPS = frozenset(OPS) | CONSTANT_OPS
#: The inputs of each operator read as static values (when given).
STATIC_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Tile": (1,),
    "Slice": (1, 2, 3, 4),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "ConstantOfShape": (0,),
    "Range": (0, 1, 2),
    "Split": (1,),
    "Trilu": (1,),
    "Dropout": (1, 2),
    **{op: (1,) for op in reductions.OPS},
}


class _NotKnown(Exception):
    """A static input is not known yet (raised by :meth:`Translator.static`)."""


def fold_constants(
    nodes: Sequence[onnx.NodeProto], parameters: Mapping[str, npt.NDArray[Any]]
) -> dict[str, npt.NDArray[Any]]:
    """The value of every Constant node, and of every ConstantOfShape node whose input is
    constant (one whose shape is fed or computed is folded when the graph is compiled)."""
    constants: dict[str, npt.NDArray[Any]] = {}
    for node in nodes:
        if node.op_type not in CONSTANT_OPS:
            continue
        values = []
        for name in (i for i in node.input if i):
            value = constants.get(name, parameters.get(name))
            if value is None:
                break
            values.append(value)
        else:
            constants[node.output[0]] = constant_value(node, values)
    return constants


class Translator:
    """Translates the nodes of one graph for one mode.

    :param opset: the graph's opset.
    :param training: translate for training.
    :param statics: values known when the graph is built: constants and initializers.
    :param trainable: the trainable initializers, which may not be read as static values.
    """

    def __init__(
        self,
        opset: int,
        training: bool,
        statics: Mapping[str, npt.NDArray[Any]],
        trainable: frozenset[str],
    ) -> None:
        self.opset, self.training = opset, training
        self._statics, self._trainable = statics, trainable
        #: The initializers read as static values (a change needs a new translation).
        self.read: set[str] = set()
        #: The values read as static inputs that are not known when the graph is
        #: translated: fed, or computed from feeds and shapes.
        self.wanted: set[str] = set()

    def static(self, node: onnx.NodeProto, index: int) -> npt.NDArray[Any] | None:
        if index >= len(node.input) or not node.input[index]:
            return None
        name = node.input[index]
        if name in self._trainable:
            raise UsageError(
                f"node {node.name!r} ({node.op_type}): input {index} ({name!r}) is a trained "
                "parameter; the mxnet executor needs it fixed (mark it not trainable)"
            )
        value = self._statics.get(name)
        if value is None:
            raise _NotKnown(name)
        self.read.add(name)
        return value

    def _translate_node(self, node: onnx.NodeProto, translation: Translation) -> Translated:
        attributes: dict[str, Any] = node_attributes(node)
        with node_errors(node):
            return translation(node, attributes, self)

    def _late(self, node: onnx.NodeProto, translation: Translation, missing: str) -> Step:
        """The step of a node whose static inputs are known only when the graph is
        compiled: translated again for each set of their values."""
        inputs = [n for n in node.input if n]
        positions = STATIC_INPUTS.get(node.op_type, ())
        static_names = {node.input[p] for p in positions if p < len(node.input)} - {""}
        static_names = {n for n in static_names if n not in self._statics} | {missing}
        self.wanted |= static_names
        done: dict[tuple[Any, ...], Translated] = {}
        opset, training, statics, trainable = (
            self.opset,
            self.training,
            self._statics,
            self._trainable,
        )

        def late(ctx: Context, xs: Sequence[Any]) -> Sequence[Any]:
            values = {n: v for n, v in zip(inputs, ctx.values, strict=False) if v is not None}
            absent = sorted(static_names - set(values))
            if absent:
                raise UsageError(
                    f"node {node.name!r} ({node.op_type}): input {absent[0]!r} must be known "
                    "when the graph is compiled (a constant, a fixed initializer, a feed, or "
                    "computed from those and shapes) for the mxnet executor"
                )
            key = tuple(
                (n, values[n].dtype.str, values[n].shape, values[n].tobytes())
                for n in sorted(static_names)
            )
            found = done.get(key)
            if found is None:
                sub = Translator(opset, training, {**statics, **values}, trainable)
                found = done[key] = sub._translate_node(node, translation)
            at = {n: i for i, n in enumerate(inputs)}
            picked = [at[n] for n in found.inputs]
            inner = Context(
                ctx.F,
                [ctx.shapes[i] for i in picked],
                [ctx.dtypes[i] for i in picked],
                ctx.constant,
                [ctx.value(i) for i in picked],
            )
            return found.fn(inner, [xs[i] for i in picked])

        fn: NodeFn = late
        return Step(node.name, node.op_type, fn, inputs, list(node.output), (), node)

    def translate(self, nodes: Sequence[onnx.NodeProto]) -> list[Step]:
        """The steps of every node that is not a constant, in graph order."""
        steps = []
        for node in nodes:
            if node.op_type in CONSTANT_OPS and node.output[0] in self._statics:
                continue
            translation = OPS.get(node.op_type)
            if translation is None:
                raise UsageError(
                    f"the mxnet executor does not support operator {node.op_type!r} (node "
                    f"{node.name!r}); choose another executor"
                )
            try:
                done = self._translate_node(node, translation)
            except _NotKnown as exc:
                steps.append(self._late(node, translation, str(exc.args[0])))
                continue
            steps.append(
                Step(
                    node.name,
                    node.op_type,
                    done.fn,
                    done.inputs,
                    list(node.output),
                    done.aux,
                    node,
                )
            )
        return steps
