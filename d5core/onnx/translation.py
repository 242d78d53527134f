"""What the executors that translate an ONNX graph into framework code share.

An executor of a ``d5.frameworks`` plugin reads the graph it was given as a
:class:`GraphView` (:func:`graph_view`), translates each node into a call of its
framework, and reports a node it cannot translate in one line that names the node
(:func:`node_errors`).
"""

from __future__ import annotations

from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from d5core.errors import UsageError
from d5core.onnx.network import Network

__all__ = ["GraphView", "graph_view", "node_errors"]


@dataclass
class GraphView:
    """An ONNX graph as a translating executor reads it."""

    opset: int
    #: The nodes, in graph order (names filled in).
    nodes: list[onnx.NodeProto]
    #: The initializers as numpy arrays, by name.
    parameters: dict[str, np.ndarray]
    #: The trainable initializers' names.
    trainable: list[str]
    #: The graph inputs that are not initializers: what feeds must give.
    inputs: list[str]
    outputs: list[str]
    #: The element type of every graph output, as numpy's (``None``: not declared).
    output_types: dict[str, np.dtype[Any] | None]
    #: The graph outputs declared as scalars.
    scalars: frozenset[str]

    def check_feeds(self, feeds: Collection[str]) -> None:
        """Raise a one-line ``UsageError`` naming the first input ``feeds`` lacks."""
        missing = [n for n in self.inputs if n not in feeds]
        if missing:
            raise UsageError(
                f"the network needs input {missing[0]!r}; feeds have: "
                f"{', '.join(sorted(feeds)) or 'none'}"
            )


def graph_view(network: Network) -> GraphView:
    """The graph of ``network`` as a :class:`GraphView` (``GraphExecutor`` has already
    made any ``onnx.ModelProto`` a ``Network``, with node names filled in)."""
    params = {k: np.asarray(v) for k, v in network.parameters.items()}
    types: dict[str, np.dtype[Any] | None] = {}
    scalars = set()
    for value in network.model.graph.output:
        tensor = value.type.tensor_type
        elem = tensor.elem_type
        types[value.name] = onnx.helper.tensor_dtype_to_np_dtype(elem) if elem else None
        if tensor.HasField("shape") and len(tensor.shape.dim) == 0:
            scalars.add(value.name)
    return GraphView(
        int(network.opset),
        list(network.nodes),
        params,
        list(network.trainable),
        [v.name for v in network.inputs if v.name not in params],
        [v.name for v in network.outputs],
        types,
        frozenset(scalars),
    )


@contextmanager
def node_errors(node: onnx.NodeProto) -> Iterator[None]:
    """Translate ``node`` inside: a ``UsageError`` that does not name a node yet gets
    ``node '<name>' (<op_type>): `` in front, and a ``KeyError``, ``TypeError`` or
    ``ValueError`` becomes a ``UsageError`` about the node's attributes."""
    try:
        yield
    except UsageError as exc:
        if str(exc).startswith("node "):
            raise
        raise UsageError(f"node {node.name!r} ({node.op_type}): {exc}") from None
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"node {node.name!r} ({node.op_type}): bad attributes ({exc})") from None
