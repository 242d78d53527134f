"""What every node translation shares: the context a node function runs in, and the
helpers that read static inputs and attributes.

A translated node is a function ``fn(ctx, inputs) -> outputs``. It is written once for
both of MXNet's front ends: ``ctx.F`` is ``mx.nd`` when the graph runs imperatively
(the shape pass, and ``--breakdown`` runs node by node) and ``mx.sym`` when the
executor builds the symbol it compiles into a ``CachedOp``. Decisions that depend on
shapes read ``ctx.shapes`` (known in both cases: the symbol is built after an
imperative pass on the same feeds, or from shapes MXNet's shape inference confirms),
never ``x.shape``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import onnx

from d5core.api import UsageError

__all__ = [
    "Context",
    "NodeFn",
    "Reader",
    "Shape",
    "Step",
    "Translated",
    "Translation",
    "ints",
    "node_error",
]

#: A concrete tensor shape.
Shape = tuple[int, ...]


@dataclass
class Context:
    """What a node function may read besides its input values.

    :param F: ``mx.nd`` or ``mx.sym``.
    :param shapes: the shape of every input (``()`` for an absent optional one).
    :param dtypes: the numpy dtype of every input (``None`` for an absent one).
    :param constant: makes a constant tensor from a key (unique within the node) and a
        numpy array: an ``NDArray`` imperatively, a variable fed with the array in a
        symbol.
    :param values: the value of every input known when the graph is built (constants,
        initializers that are not trained, feeds read as static values, and what is
        computed from those and from shapes), with ONNX's own shape (MXNet has no
        rank-0 tensors; these arrays tell a scalar from a vector of one); ``None`` where
        the value is not known. Empty when the caller tells none.
    """

    F: Any
    shapes: Sequence[Shape]
    dtypes: Sequence[np.dtype[Any] | None]
    constant: Callable[[str, npt.NDArray[Any]], Any]
    values: list[npt.NDArray[Any] | None] = field(default_factory=list)

    def value(self, index: int) -> npt.NDArray[Any] | None:
        """The known value of input ``index``, ``None`` when it is not known."""
        return self.values[index] if index < len(self.values) else None

    def rank(self, index: int) -> int:
        """ONNX's rank of input ``index``: that of its known value where there is one
        (a scalar), else that of its MXNet shape."""
        known = self.value(index)
        return known.ndim if known is not None else len(self.shapes[index])

    @property
    def symbolic(self) -> bool:
        """Whether the node is being built into a symbol (``F`` is ``mx.sym``)."""
        return bool(getattr(self.F, "__name__", "").endswith("symbol"))


#: A translated node: its outputs from the context and its input values.
NodeFn = Callable[[Context, Sequence[Any]], Sequence[Any]]


@dataclass(frozen=True)
class Translated:
    """A node function and which of its inputs it reads.

    :param fn: the node function.
    :param inputs: the names of the tensor inputs it takes, in order ("" for an absent
        optional one).
    :param aux: positions in ``inputs`` MXNet updates in place while training (the
        moving statistics of a BatchNorm): the executor feeds buffers there.
    """

    fn: NodeFn
    inputs: list[str]
    aux: tuple[int, ...] = ()


@dataclass
class Step:
    """One node of a translated graph.

    :param node: the ONNX node, for folding it when every input is known (see
        :func:`~.program.run_steps`); ``None`` for a step that is never folded.
    """

    name: str
    op_type: str
    fn: NodeFn
    inputs: list[str]
    outputs: list[str]
    aux: tuple[int, ...] = field(default=())
    node: onnx.NodeProto | None = None


def node_error(node: onnx.NodeProto, message: str) -> UsageError:
    """A one-line UsageError naming ``node`` and what is wrong with it."""
    return UsageError(f"node {node.name!r} ({node.op_type}): {message}")


def ints(values: Sequence[Any] | npt.NDArray[Any] | None) -> list[int]:
    """``values`` as a list of Python ints (empty for ``None``)."""
    if values is None:
        return []
    return [int(v) for v in np.asarray(values).reshape(-1)]


class Reader(Protocol):
    """What a family's translations ask of the translator."""

    #: The graph's ONNX opset.
    opset: int
    #: Whether the graph is translated for training (Dropout drops, BatchNorm uses batch
    #: statistics).
    training: bool

    def static(self, node: onnx.NodeProto, index: int) -> npt.NDArray[Any] | None:
        """The value of input ``index`` known when the graph is built (a constant or a
        non-trainable initializer), ``None`` when absent.

        :raises UsageError: when the input is computed or trainable.
        """
        ...


#: A family's translation of one operator type: from the node, its attributes and the
#: translator, the node function and its inputs.
Translation = Callable[[onnx.NodeProto, dict[str, Any], Reader], Translated]
