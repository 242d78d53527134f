"""Control flow: If, Scan and Loop, running their subgraphs with the registry's
translations. Subgraphs read the enclosing graph's values through the context's
``scope`` when the program offers one; Loop unrolls a trip count known while tracing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from d5_plugin_jax.graph.attention import all_static, where_of
from d5_plugin_jax.graph.extra._common import jax, jnp
from d5_plugin_jax.graph.registry import REGISTRY, NodeContext, op
from d5core.api import UsageError
from d5core.onnx import node_attributes

__all__: list[str] = []


def _run_subgraph(ctx: NodeContext, graph: onnx.GraphProto, values: Mapping[str, Any]) -> list[Any]:
    """The outputs of a subgraph (a branch or a loop body) run on ``values`` by name, its
    initializers, and the values of the enclosing graph that the program shares through
    the context's ``scope`` (when it offers one)."""
    env: dict[str, Any] = dict(getattr(ctx, "scope", None) or {})
    env.update({t.name: numpy_helper.to_array(t) for t in graph.initializer})
    env.update(values)
    for node in graph.node:
        fn = REGISTRY.get(node.op_type)
        if fn is None or node.domain not in ("", "ai.onnx"):
            raise UsageError(
                f"{where_of(ctx)}: its subgraph uses operator {node.op_type!r}, which the jax "
                "executor does not support"
            )
        missing = [name for name in node.input if name and name not in env]
        if missing:
            raise UsageError(
                f"{where_of(ctx)}: its subgraph reads {missing[0]!r} from the enclosing graph, "
                "which this executor does not pass into subgraphs"
            )
        args = [env[name] if name else None for name in node.input]
        inner = NodeContext(node, node_attributes(node), ctx.training, None, ctx.opset)
        if node.op_type != "Dropout" and all_static(*args):
            with jax.ensure_compile_time_eval():
                results = [None if r is None else np.asarray(r) for r in fn(inner, args)]
        else:
            results = list(fn(inner, args))
        env.update((name, value) for name, value in zip(node.output, results, strict=False))
    return [env[out.name] for out in graph.output]


@op("If")
def if_(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """The branch the condition picks; a condition known only when the graph runs runs
    both branches and selects each output (the branches must agree on shapes)."""
    then_graph, else_graph = ctx.attrs["then_branch"], ctx.attrs["else_branch"]
    cond = inputs[0]
    if all_static(cond):
        chosen = then_graph if bool(np.asarray(cond).reshape(-1)[0]) else else_graph
        return _run_subgraph(ctx, chosen, {})
    then_out = _run_subgraph(ctx, then_graph, {})
    else_out = _run_subgraph(ctx, else_graph, {})
    flag = jnp.asarray(cond).reshape(())
    results = []
    for a, b in zip(then_out, else_out, strict=True):
        if np.shape(a) != np.shape(b):
            raise UsageError(
                f"{where_of(ctx)}: the branches give shapes {np.shape(a)} and {np.shape(b)}, "
                "and the condition is only known when the graph runs"
            )
        results.append(jnp.where(flag, a, b))
    return results


@op("Scan")
def scan(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """ONNX's Scan (opset 9 on) as ``jax.lax.scan``: the body runs once per slice of
    the scan inputs along their axes (forwards or backwards), carrying the states; the
    per-step outputs are stacked along their axes."""
    if ctx.opset < 9:
        raise UsageError(
            f"{where_of(ctx)}: Scan before opset 9 (with a batch axis) is not supported"
        )
    body: onnx.GraphProto = ctx.attrs["body"]
    m = int(ctx.attrs["num_scan_inputs"])
    n = len(inputs) - m
    states = [jnp.asarray(v) for v in inputs[:n]]
    in_axes = list(ctx.attrs.get("scan_input_axes") or [0] * m)
    in_dirs = list(ctx.attrs.get("scan_input_directions") or [0] * m)
    xs = []
    for i, value in enumerate(inputs[n:]):
        moved = jnp.moveaxis(jnp.asarray(value), int(in_axes[i]), 0)
        xs.append(jnp.flip(moved, 0) if int(in_dirs[i]) else moved)
    names = [v.name for v in body.input]

    def step(carry: tuple[Any, ...], slices: tuple[Any, ...]) -> tuple[tuple[Any, ...], Any]:
        outs = _run_subgraph(ctx, body, dict(zip(names, [*carry, *slices], strict=True)))
        new = tuple(jnp.asarray(o, c.dtype) for o, c in zip(outs[:n], carry, strict=False))
        return new, tuple(jnp.asarray(o) for o in outs[n:])

    final, stacked = jax.lax.scan(step, tuple(states), tuple(xs))
    k = len(body.output) - n
    out_axes = list(ctx.attrs.get("scan_output_axes") or [0] * k)
    out_dirs = list(ctx.attrs.get("scan_output_directions") or [0] * k)
    results = list(final)
    for j, value in enumerate(stacked):
        value = jnp.flip(value, 0) if int(out_dirs[j]) else value
        results.append(jnp.moveaxis(value, 0, int(out_axes[j]) % (value.ndim or 1)))
    return results


@op("Loop")
def loop(ctx: NodeContext, inputs: Sequence[Any]) -> Sequence[Any]:
    """ONNX's Loop unrolled while tracing: the trip count and the condition must be
    known then (constants, or computed from those); per-iteration outputs are stacked."""
    body: onnx.GraphProto = ctx.attrs["body"]
    trips, cond = inputs[0], inputs[1] if len(inputs) > 1 else None
    if not all_static(trips, cond):
        raise UsageError(
            f"{where_of(ctx)}: the trip count and condition must be known when the graph "
            "is traced; JAX compiles a fixed number of iterations"
        )
    limit = None if trips is None else int(np.asarray(trips).reshape(-1)[0])
    going = True if cond is None else bool(np.asarray(cond).reshape(-1)[0])
    carried = list(inputs[2:])
    names = [v.name for v in body.input]
    scans: list[list[Any]] = [[] for _ in range(len(body.output) - 1 - len(carried))]
    i = 0
    while going and (limit is None or i < limit):
        outs = _run_subgraph(
            ctx,
            body,
            dict(zip(names, [np.asarray(i, np.int64), np.asarray(going), *carried], strict=True)),
        )
        flag = outs[0]
        if not all_static(flag):
            raise UsageError(
                f"{where_of(ctx)}: its condition depends on values known only when the graph runs"
            )
        going = bool(np.asarray(flag).reshape(-1)[0])
        carried = outs[1 : 1 + len(carried)]
        for store, value in zip(scans, outs[1 + len(carried) :], strict=True):
            store.append(value)
        i += 1
        if limit is None and i > 100_000:
            raise UsageError(f"{where_of(ctx)}: more than 100000 iterations")
    stacked = [
        jnp.stack([jnp.asarray(v) for v in store]) if store else jnp.zeros((0,)) for store in scans
    ]
    return [*carried, *stacked]
