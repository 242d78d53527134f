"""Running translated steps: imperatively with ``mx.nd``, or built into one symbol that
MXNet compiles into a ``CachedOp`` (what a hybridized Gluon block runs).

:func:`run_steps` runs the steps one by one on ``NDArray``s; it tells each node's input
shapes, and it is what ``--breakdown`` times node by node (``each`` wraps every node).
:func:`build_symbol` builds the symbol from the shapes such a run found, and
:func:`compile_symbol` makes the ``CachedOp``: static memory and static shapes, the
flags of ``HybridBlock.hybridize(static_alloc=True, static_shape=True)``, and the feeds
told apart from the parameters, as Gluon tells them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from d5_plugin_mxnet._mx import mxnet
from d5_plugin_mxnet.graph.base import Context, Shape, Step
from d5core.api import UsageError

__all__ = ["CompiledGraph", "build_symbol", "compile_symbol", "run_steps"]

#: Flags of every CachedOp the executor makes.
CACHED_OP_FLAGS = (("static_alloc", True), ("static_shape", True))


def _first_line(exc: BaseException) -> str:
    """The line of an MXNet error that says what went wrong."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in lines:
        if "Check failed" in line or line.startswith("MXNetError"):
            return line.removeprefix("MXNetError: ")
    return lines[-1] if lines else type(exc).__name__


def run_steps(
    steps: Sequence[Step],
    env: dict[str, Any],
    constants: dict[tuple[str, str], Any],
    *,
    each: Callable[[Step], AbstractContextManager[Any]] | None = None,
) -> dict[str, Any]:
    """Run ``steps`` on the ``NDArray``s of ``env`` (updated in place and returned).

    :param constants: the node constants made so far, by (node, key); new ones are added.
    :param each: a context manager entered around every node (``--breakdown``'s span).
    :raises UsageError: naming the node MXNet refused.
    """
    mx = mxnet()
    for step in steps:
        xs = [env[n] for n in step.inputs]

        def constant(key: str, value: npt.NDArray[Any], node: str = step.name) -> Any:
            found = constants.get((node, key))
            if found is None:
                found = constants[(node, key)] = mx.nd.array(value, dtype=value.dtype)
            return found

        ctx = Context(
            mx.nd, [tuple(x.shape) for x in xs], [np.dtype(x.dtype) for x in xs], constant
        )
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
    """

    op: Any
    inputs: list[str]
    outputs: list[str]
    constants: dict[str, Any]


def build_symbol(
    steps: Sequence[Step],
    shapes: Mapping[str, Shape],
    dtypes: Mapping[str, np.dtype[Any]],
    outputs: Sequence[str],
    node_constants: Mapping[tuple[str, str], Any],
) -> tuple[Any, dict[str, Any]]:
    """The symbol computing ``outputs`` and the arrays of the node constants it reads.

    ``shapes`` and ``dtypes`` are those of every value, from :func:`run_steps` on the
    same feeds; ``node_constants`` the constants that run made.
    """
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

            def constant(key: str, array: npt.NDArray[Any], node: str = step.name) -> Any:
                name = f"{node}/{key}"
                fed[name] = node_constants[(node, key)]
                return value(name)

            ctx = Context(
                mx.sym,
                [tuple(shapes[n]) for n in step.inputs],
                [dtypes[n] for n in step.inputs],
                constant,
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
