"""The translated graph, run node after node while a ``tf.function`` is traced.

:meth:`Program.run` is the body of the executor's ``tf.function``: TensorFlow traces it
once per input signature into one graph, and every later call runs that graph. Each
node's ops are created under a name scope of its own (:attr:`Program.scopes`), so that
TensorFlow's op names (``n3_conv1/Conv2D``, and ``gradient_tape/n3_conv1/...`` for the
gradient ops) say which ONNX node they belong to: :mod:`.profile` times nodes by them,
and error messages name the node.

Layouts: a tensor a channels-last form produced is kept channels-last; its ONNX layout
is made (in the producing node's name scope) only when some node, or the caller, reads
it, so the traced graph holds no transpose nothing needs.

Folding: values known when the graph is traced (constants, integer initializers, fed
static inputs, and the shapes Shape and Size read) are kept as numpy arrays; a node
whose inputs are all known runs eagerly then, once, and its outputs become constants of
the graph. So a shape computed by Shape, Gather and Concat nodes (as exporters write a
flatten) is known to the Reshape that needs it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.graph.layout import from_channels_last, to_channels_last
from d5_plugin_tensorflow.graph.translation import NodeFn
from d5core.api import UsageError

__all__ = ["Program", "Traced", "node_of_op", "scope_name"]

tf = tensorflow()

#: Characters a TensorFlow name scope may not hold.
_NOT_IN_SCOPE = re.compile(r"[^A-Za-z0-9_.\-]")
#: How many characters of a node's name its scope keeps.
_SCOPE_CHARS = 48


@dataclass
class Traced:
    """What a traced run produced: every tensor by name (ONNX layout) and the running
    statistics of BatchNormalization nodes in training mode."""

    env: dict[str, Any]
    stats: dict[str, Any]


class _Env(dict[str, Any]):
    """Tensors by name in ONNX's layout; the ONNX form of a tensor a node produced
    channels-last is made when first read."""

    def __init__(self, values: Mapping[str, Any]) -> None:
        super().__init__(values)
        #: Channels-last tensors by name, with the name scope of the node that made them.
        self.channels_last: dict[str, tuple[Any, str]] = {}

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or name in self.channels_last

    def __missing__(self, name: str) -> Any:
        y, scope = self.channels_last[name]
        with tf.name_scope(scope + "/"):  # the producer's scope, for profiles and errors
            value = from_channels_last(y)
        self[name] = value
        return value

    def put_channels_last(self, name: str, y: Any, scope: str) -> None:
        """Record ``y`` as ``name``'s channels-last form (its ONNX form made on demand)."""
        self.pop(name, None)
        self.channels_last[name] = (y, scope)


def scope_name(index: int, name: str) -> str:
    """The name scope of the ``index``-th node: unique, and valid whatever the name."""
    return f"n{index}_{_NOT_IN_SCOPE.sub('_', name)[:_SCOPE_CHARS]}"


def node_of_op(op_name: str) -> tuple[str, bool]:
    """The scope of a TensorFlow op name and whether it is a gradient op:
    ``("n3_conv1", False)`` for ``n3_conv1/Conv2D``, ``("n3_conv1", True)`` for
    ``gradient_tape/n3_conv1/Conv2D/Conv2DBackpropInput``."""
    parts = op_name.split("/")
    backward = parts[0] == "gradient_tape" and len(parts) > 1
    return (parts[1] if backward else parts[0]), backward


def _rank(x: Any) -> int:
    return len(x.shape)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


class Program:
    """Translated nodes with the tensors they read.

    :param nodes: the nodes, in topological order.
    :param values: the tensors of the graph that are not fed, by name: parameters (as
        ``tf.Variable``) and folded constants.
    :param statics: numpy values of the names nodes may read as static inputs.
    :param known: the names among ``statics`` whose values do not change between runs
        (constants, integer initializers): nodes reading only those are folded.
    """

    def __init__(
        self,
        nodes: Sequence[NodeFn],
        values: Mapping[str, Any],
        statics: Mapping[str, np.ndarray],
        known: frozenset[str] = frozenset(),
    ) -> None:
        self.nodes = list(nodes)
        self.values = values
        self.statics = statics
        self.known = known
        #: The name scope of each node, in node order.
        self.scopes = [scope_name(i, n.name) for i, n in enumerate(self.nodes)]
        #: Node name and operator type by scope.
        self.by_scope = {
            s: (n.name, n.op_type) for s, n in zip(self.scopes, self.nodes, strict=True)
        }

    def run(self, feeds: Mapping[str, Any], fed_statics: Mapping[str, np.ndarray]) -> Traced:
        """Create every node's ops (inside a trace); ``fed_statics`` are the values of
        the feeds read as static inputs."""
        env = _Env({**self.values, **feeds})
        stats: dict[str, Any] = {}
        known = {name: self.statics[name] for name in self.known}
        known.update(fed_statics)
        for node, scope in zip(self.nodes, self.scopes, strict=True):
            with tf.name_scope(scope):
                try:
                    if not self._fold(node, env, known):
                        self._run_node(node, env, scope, stats, known)
                except UsageError:
                    raise
                except (ValueError, TypeError, tf.errors.OpError) as exc:
                    raise UsageError(
                        f"node {node.name!r} ({node.op_type}): TensorFlow cannot build it: "
                        f"{_first_line(exc)}"
                    ) from None
        return Traced(env, stats)

    def _fold(self, node: NodeFn, env: _Env, known: dict[str, np.ndarray]) -> bool:
        """Compute the node now, into constants, when its outputs are known while tracing."""
        names = [n for n in node.inputs if n]
        if node.fold is not None and all(n in env or n in known for n in names):
            values = node.fold(*(env[n] if n in env else known[n] for n in names))
        elif node.foldable and not node.stats and names and all(n in known for n in names):
            with tf.init_scope():  # eagerly, outside the traced graph
                args = [
                    None if not n else known[n] if p in node.static else tf.constant(known[n])
                    for p, n in enumerate(node.inputs)
                ]
                values = [np.asarray(v) for v in node.fn(*args)[: len(node.outputs)]]
        else:
            return False
        for name, value in zip(node.outputs, values, strict=False):
            if name:
                known[name] = value
                env.pop(name, None)
                env.channels_last.pop(name, None)
                env[name] = tf.constant(value)
        return True

    def _args(
        self,
        node: NodeFn,
        env: Mapping[str, Any],
        known: Mapping[str, np.ndarray],
        given: Mapping[int, Any] | None = None,
    ) -> list[Any]:
        """The node's arguments: ``given`` ones (channels-last forms) as they are, static
        ones as numpy values, the others from ``env``."""
        args: list[Any] = []
        for position, name in enumerate(node.inputs):
            if not name:
                args.append(None)
            elif given is not None and position in given:
                args.append(given[position])
            elif position in node.static:
                value = known.get(name)
                if value is None:
                    value = self.statics.get(name)
                if value is None:
                    raise UsageError(
                        f"node {node.name!r} ({node.op_type}): input {position} ({name!r}) must "
                        "be known when the graph is built (a constant, an initializer, a fed "
                        "input, or computed from those and from shapes)"
                    )
                args.append(value)
            elif name in env:
                args.append(env[name])
            else:
                raise UsageError(
                    f"node {node.name!r} ({node.op_type}): its input {name!r} is computed by no "
                    "earlier node"
                )
        return args

    def _run_node(
        self,
        node: NodeFn,
        env: _Env,
        scope: str,
        stats: dict[str, Any],
        known: Mapping[str, np.ndarray],
    ) -> None:
        form = node.cl
        if form is None:
            results = node.fn(*self._args(node, env, known))
        else:
            # inputs that have a channels-last form are not turned to ONNX's unless needed
            given = {
                p: env.channels_last[node.inputs[p]][0]
                for p in form.acts
                if p < len(node.inputs) and node.inputs[p] in env.channels_last
            }
            args = self._args(node, env, known, given)
            acts = [p for p in form.acts if args[p] is not None]
            rank = max((_rank(args[p]) for p in acts), default=0)
            if rank >= 3 and (form.always or any(_rank(g) == rank for g in given.values())):
                cl_args = list(args)
                for p in acts:
                    if p not in given or _rank(given[p]) != rank:
                        cl_args[p] = to_channels_last(env[node.inputs[p]], rank)
                results = form.fn(*cl_args)
                for i, (name, y) in enumerate(zip(node.outputs, results, strict=False)):
                    if name and _rank(y) == rank and i not in node.flat_outputs:
                        env.put_channels_last(name, y, scope)
                    elif name:
                        env[name] = y
                self._keep_stats(node, results, stats)
                return
            for p in given:
                args[p] = env[node.inputs[p]]
            results = node.fn(*args)
        for name, y in zip(node.outputs, results, strict=False):
            if name:
                env[name] = y
        self._keep_stats(node, results, stats)

    @staticmethod
    def _keep_stats(node: NodeFn, results: Sequence[Any], stats: dict[str, Any]) -> None:
        if node.stats:
            extra = results[len(results) - len(node.stats) :]
            stats.update(zip(node.stats, extra, strict=True))
