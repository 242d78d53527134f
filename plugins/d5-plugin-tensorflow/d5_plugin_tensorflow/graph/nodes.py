"""ONNX nodes as TensorFlow functions: :class:`Translator` turns each node into a
:class:`~.translation.NodeFn` (see :mod:`.translation` for what one is), from the
families of nodes it knows: layers (:mod:`.layers`), element-wise arithmetic
(:mod:`.arithmetic`), data movement (:mod:`.shaping`), reductions
(:mod:`.reductions`) and recurrent layers (:mod:`.recurrent`)."""

from __future__ import annotations

from d5_plugin_tensorflow.graph.arithmetic import ArithmeticNodes
from d5_plugin_tensorflow.graph.layers import LayerNodes, reference_mask
from d5_plugin_tensorflow.graph.recurrent import RecurrentNodes
from d5_plugin_tensorflow.graph.reductions import ReductionNodes
from d5_plugin_tensorflow.graph.shaping import ShapingNodes
from d5_plugin_tensorflow.graph.translation import ChannelsLast, NodeFn

__all__ = ["CONSTANT_OPS", "ChannelsLast", "NodeFn", "Translator", "reference_mask"]

#: Operators folded into constants when the executor is built.
CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape"})


class Translator(LayerNodes, ArithmeticNodes, ShapingNodes, ReductionNodes, RecurrentNodes):
    """Builds the :class:`~.translation.NodeFn` of each node, for inference or
    training mode; ``op_<OpType>`` methods translate the nodes of one type."""
