"""From ONNX nodes to node functions: the translator, and the operator types it knows.

The translation of each operator type lives in the module of its family
(:mod:`.arithmetic`, :mod:`.layers`, :mod:`.windows`, :mod:`.shaping`, :mod:`.losses`).
The translator resolves every attribute and static input once, per mode (inference or
training), and names the node in any error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy.typing as npt
import onnx

from d5_plugin_mxnet.graph import arithmetic, layers, losses, shaping, windows
from d5_plugin_mxnet.graph.base import Step, Translation
from d5core.api import UsageError, constant_value, node_attributes

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
}
#: Every operator type the mxnet executor runs.
SUPPORTED_OPS = frozenset(OPS) | CONSTANT_OPS


def fold_constants(
    nodes: Sequence[onnx.NodeProto], parameters: Mapping[str, npt.NDArray[Any]]
) -> dict[str, npt.NDArray[Any]]:
    """The value of every Constant and ConstantOfShape node (whose inputs are constant)."""
    constants: dict[str, npt.NDArray[Any]] = {}
    for node in nodes:
        if node.op_type not in CONSTANT_OPS:
            continue
        values = []
        for name in (i for i in node.input if i):
            value = constants.get(name, parameters.get(name))
            if value is None:
                raise UsageError(
                    f"node {node.name!r} ({node.op_type}): input {name!r} must be a constant "
                    "for the mxnet executor"
                )
            values.append(value)
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

    def static(self, node: onnx.NodeProto, index: int) -> npt.NDArray[Any] | None:
        if index >= len(node.input) or not node.input[index]:
            return None
        name = node.input[index]
        value = self._statics.get(name)
        if value is None or name in self._trainable:
            raise UsageError(
                f"node {node.name!r} ({node.op_type}): input {index} ({name!r}) must be a "
                "constant for the mxnet executor"
            )
        self.read.add(name)
        return value

    def translate(self, nodes: Sequence[onnx.NodeProto]) -> list[Step]:
        """The steps of every node that is not a constant, in graph order."""
        steps = []
        for node in nodes:
            if node.op_type in CONSTANT_OPS:
                continue
            translation = OPS.get(node.op_type)
            if translation is None:
                raise UsageError(
                    f"the mxnet executor does not support operator {node.op_type!r} (node "
                    f"{node.name!r}); choose another executor"
                )
            attributes: dict[str, Any] = node_attributes(node)
            try:
                done = translation(node, attributes, self)
            except UsageError as exc:
                if str(exc).startswith("node "):
                    raise
                raise UsageError(f"node {node.name!r} ({node.op_type}): {exc}") from None
            except (KeyError, TypeError, ValueError) as exc:
                raise UsageError(
                    f"node {node.name!r} ({node.op_type}): bad attributes ({exc})"
                ) from None
            steps.append(
                Step(node.name, node.op_type, done.fn, done.inputs, list(node.output), done.aux)
            )
        return steps
