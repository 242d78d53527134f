"""The translated form of an ONNX node, and what building one needs.

A :class:`NodeFn` is a Python function of the node's inputs that calls TensorFlow ops;
it runs while the executor's ``tf.function`` is traced (see :mod:`.program`). Attributes
and opset differences are read once, when the node is translated.

Inputs that must be known when the graph is built (a Reshape's shape, Squeeze axes, a
Dropout ratio) are *static*: the function gets them as numpy arrays, from a constant, an
initializer, or, when the graph feeds them, from the values of the feeds the function
was traced for.

Nodes that convolve or pool, and nodes that do not care about the layout, also have a
channels-last form (:class:`ChannelsLast`, see :mod:`.layout`); the program runs that
form whenever an input is already channels-last, so that a chain of convolutions,
normalizations, activations and pooling keeps TensorFlow's CPU layout throughout.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from d5_plugin_tensorflow.graph.layout import from_channels_last, to_channels_last
from d5core.onnx import node_attributes, node_errors

__all__ = ["ChannelsLast", "Fn", "NodeBuilder", "NodeFn", "ints", "rank_of"]

#: A node's function: its inputs (tensors, numpy arrays at static positions, ``None``
#: for absent optional inputs) to its outputs (and, for BatchNormalization in training
#: mode, the new running statistics after them).
Fn = Callable[..., Sequence[Any]]


@dataclass
class ChannelsLast:
    """The channels-last form of a node.

    :param fn: the function, taking the inputs at ``acts`` channels-last (a lower-rank
        input there is given leading unit axes first, see
        :func:`~.layout.to_channels_last`) and returning channels-last outputs.
    :param acts: the input positions laid out channels-last.
    :param always: run this form even when no input is channels-last yet (convolution
        and pooling, which TensorFlow's CPU kernels run in this layout only).
    """

    fn: Fn
    acts: tuple[int, ...]
    always: bool = False


@dataclass
class NodeFn:
    """One ONNX node, translated."""

    name: str
    op_type: str
    fn: Fn
    #: Input names by position, ``""`` for an absent optional input.
    inputs: list[str]
    outputs: list[str]
    #: Positions given as numpy arrays (known when the graph is traced).
    static: frozenset[int] = frozenset()
    cl: ChannelsLast | None = None
    #: Running-statistic names of the extra results ``fn`` returns after the outputs.
    stats: tuple[str, ...] = ()
    #: Outputs of the channels-last form that are not activations (kept as they are).
    flat_outputs: frozenset[int] = field(default_factory=frozenset)
    #: For nodes whose outputs follow from their inputs' shapes alone (Shape, Size): the
    #: outputs as numpy arrays, from the traced inputs.
    fold: Callable[..., Sequence[np.ndarray]] | None = None
    #: Whether outputs may be computed when the graph is traced, once every input is
    #: known then (false for nodes with side results, such as running statistics).
    foldable: bool = True


def ints(value: Any) -> list[int]:
    """An attribute or static input as a list of Python ints."""
    return [int(v) for v in np.asarray(value).reshape(-1)]


def rank_of(x: Any) -> int:
    return len(x.shape)


class NodeBuilder:
    """What every family of node translations shares: the graph's opset and mode,
    the values known before tracing, and helpers building :class:`NodeFn`s.

    :param opset: the default domain's opset of the graph.
    :param training: training mode (BatchNormalization on batch statistics, Dropout
        applied) or inference mode.
    :param constants: the values known now (constants, initializers), for checks that
        need not wait for the trace.
    :param xla: the graph is compiled with XLA (training-mode MaxPool then takes a
        gradient XLA compiles, see :func:`~.windows.max_pool`).
    :param value_types: the graph's declared values (inputs, outputs, value_info), for
        checks of element types that need not wait for the trace.
    :param tf_kernels: the convolution weights (Conv and ConvTranspose input 1) the
        executor keeps in TensorFlow's kernel layout (see :func:`~.layout.kernel_perm`);
        the others are in ONNX's layout and transposed in the graph.
    :param cl_flattens: the outputs of Flatten nodes that flatten the channels-last form
        of their input as it is, for Gemm weights kept in that order (see
        :func:`~.layout.flat_weight_layout`).
    """

    def __init__(
        self,
        opset: int,
        training: bool,
        constants: Mapping[str, np.ndarray] | None = None,
        *,
        xla: bool = False,
        value_types: Sequence[onnx.ValueInfoProto] = (),
        tf_kernels: frozenset[str] = frozenset(),
        cl_flattens: frozenset[str] = frozenset(),
    ) -> None:
        self.opset, self.training, self.xla = opset, training, xla
        self.constants = constants or {}
        self.value_types = list(value_types)
        self.tf_kernels = tf_kernels
        self.cl_flattens = cl_flattens

    def supports(self, op_type: str) -> bool:
        """Whether a node of ``op_type`` can be translated."""
        return hasattr(self, "op_" + op_type)

    def translate(self, node: onnx.NodeProto) -> NodeFn:
        """The node's function.

        :raises UsageError: one line naming the node, for attributes it cannot run.
        """
        method: Callable[[onnx.NodeProto, dict[str, Any]], NodeFn] = getattr(
            self, "op_" + node.op_type
        )
        with node_errors(node):
            return method(node, node_attributes(node))

    # -- helpers -------------------------------------------------------------------

    @staticmethod
    def _node(
        node: onnx.NodeProto, fn: Fn, inputs: Sequence[str] | None = None, **kw: Any
    ) -> NodeFn:
        names = list(node.input) if inputs is None else list(inputs)
        if "static" in kw:  # positions of optional inputs the node leaves out do not count
            kw["static"] = frozenset(p for p in kw["static"] if p < len(names))
        return NodeFn(node.name, node.op_type, fn, names, list(node.output), **kw)

    def _elementwise(
        self, node: onnx.NodeProto, one: Callable[..., Any], arity: int | None = None
    ) -> NodeFn:
        """A node computing ``one(*inputs)`` element-wise: it runs in either layout."""
        names = list(node.input) if arity is None else list(node.input[:arity])

        def fn(*xs: Any) -> tuple[Any]:
            return (one(*xs),)

        acts = tuple(i for i, n in enumerate(names) if n)
        return self._node(node, fn, names, cl=ChannelsLast(fn, acts))

    def _layout_bound(self, node: onnx.NodeProto, cl_fn: Fn, inputs: list[str]) -> NodeFn:
        """A node that runs channels-last only; its ONNX form transposes around it."""

        def onnx_fn(x: Any, *rest: Any) -> tuple[Any, ...]:
            outs = cl_fn(to_channels_last(x, rank_of(x)), *rest)
            return tuple(from_channels_last(y) for y in outs)

        return self._node(node, onnx_fn, inputs, cl=ChannelsLast(cl_fn, (0,), always=True))

    def _axes(self, node: onnx.NodeProto, a: dict[str, Any]) -> tuple[list[int] | None, bool]:
        """The axes of Squeeze/Unsqueeze: from the attribute (before opset 13), else
        from the static second input (``None`` when absent); and whether it is an input."""
        if "axes" in a:
            return ints(a["axes"]), False
        return None, len(node.input) > 1 and bool(node.input[1])
