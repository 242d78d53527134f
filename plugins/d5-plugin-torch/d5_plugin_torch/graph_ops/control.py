"""Control flow: If, Loop and Scan, whose bodies are subgraphs translated like the main
graph (node by node, into torch calls) and run in Python loops over torch tensors.

A body reads the values it does not compute from the enclosing graph: those names are
found once, at translation, and passed to the node's function as extra inputs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import onnx
import torch
from onnx import numpy_helper

from d5_plugin_torch.graph_ops.base import Fn, Tensor, Translation, TranslatorBase, to_torch
from d5core.api import UsageError

__all__ = ["ControlOps"]


def _outer_names(graph: onnx.GraphProto) -> list[str]:
    """The names ``graph`` (and the subgraphs in it) reads from enclosing scopes."""
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    needed: list[str] = []
    for node in graph.node:
        reads = [n for n in node.input if n]
        for attr in node.attribute:
            for sub in [attr.g] if attr.HasField("g") else list(attr.graphs):
                reads += _outer_names(sub)
        needed += [n for n in reads if n not in local and n not in needed]
        local.update(o for o in node.output if o)
    return needed


@dataclass
class _Body:
    """A translated subgraph: its steps, initializers, inputs, outputs, outer reads."""

    steps: list[tuple[Fn, list[str], list[str]]]
    initializers: dict[str, Tensor]
    inputs: list[str]
    outputs: list[str]
    outer: list[str]

    def run(self, outer: Sequence[Tensor | None], inputs: Sequence[Tensor | None]) -> list[Tensor]:
        env: dict[str, Any] = dict(zip(self.outer, outer, strict=True))
        env.update(self.initializers)
        env.update(zip(self.inputs, inputs, strict=False))
        for fn, names, outs in self.steps:
            env.update(zip(outs, fn(*(env[n] if n else None for n in names)), strict=False))
        return [env[o] for o in self.outputs]


class ControlOps(TranslatorBase):
    """Translators of If, Loop and Scan."""

    translate: Callable[[onnx.NodeProto], tuple[Fn, list[str]]]

    def _body(self, graph: onnx.GraphProto) -> _Body:
        steps = []
        for index, node in enumerate(graph.node):
            if not node.name:
                node = onnx.NodeProto.FromString(node.SerializeToString())
                node.name = f"{graph.name or 'body'}/{node.op_type}_{index}"
            if node.domain not in ("", "ai.onnx") or not hasattr(self, "op_" + node.op_type):
                raise UsageError(
                    f"the torch executor does not support operator {node.op_type!r} "
                    f"(node {node.name!r} in a subgraph)"
                )
            fn, names = self.translate(node)
            steps.append((fn, names, list(node.output)))
        device = self.ex.torch_device
        initializers = {
            t.name: to_torch(numpy_helper.to_array(t), device, copy=True) for t in graph.initializer
        }
        return _Body(
            steps,
            initializers,
            [i.name for i in graph.input],
            [o.name for o in graph.output],
            _outer_names(graph),
        )

    def op_If(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        then, other = self._body(a["then_branch"]), self._body(a["else_branch"])
        outer = list(dict.fromkeys(then.outer + other.outer))

        def run_if(cond: Tensor, *values: Tensor | None) -> list[Tensor]:
            found = dict(zip(outer, values, strict=True))
            branch = then if bool(cond.reshape(-1)[0]) else other
            return branch.run([found[n] for n in branch.outer], [])

        return run_if, [node.input[0], *outer]

    def op_Loop(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        body = self._body(a["body"])
        carried = len(node.input) - 2
        names = list(node.input)

        def run_loop(*values: Tensor | None) -> list[Tensor]:
            trips, cond = values[0], values[1]
            state = list(values[2 : 2 + carried])
            outer = values[2 + carried :]
            limit = None if trips is None else int(trips.reshape(-1)[0])
            going = True if cond is None else bool(cond.reshape(-1)[0])
            scans: list[list[Tensor]] = []
            i = 0
            while going and (limit is None or i < limit):
                iteration = torch.tensor(i, dtype=torch.int64, device=self.ex.torch_device)
                flag = torch.tensor(going, device=self.ex.torch_device)
                out = body.run(outer, [iteration, flag, *state])
                going = bool(out[0].reshape(-1)[0])
                state = list(out[1 : 1 + carried])
                per_step = out[1 + carried :]
                if not scans:
                    scans = [[] for _ in per_step]
                for kept, value in zip(scans, per_step, strict=True):
                    kept.append(value)
                i += 1
            stacked = [torch.stack(kept) for kept in scans]
            return [*state, *stacked]  # type: ignore[list-item]

        return run_loop, [*names, *body.outer]

    def op_Scan(self, node: onnx.NodeProto, a: dict[str, Any]) -> Translation:
        if self.opset < 9:
            raise UsageError("Scan before opset 9 (with a batch axis) is not supported")
        body = self._body(a["body"])
        m = int(a["num_scan_inputs"])
        n = len(node.input) - m
        in_axes = [int(v) for v in a.get("scan_input_axes") or [0] * m]
        in_dirs = [int(v) for v in a.get("scan_input_directions") or [0] * m]
        k = len(node.output) - n
        out_axes = [int(v) for v in a.get("scan_output_axes") or [0] * k]
        out_dirs = [int(v) for v in a.get("scan_output_directions") or [0] * k]

        def run_scan(*values: Tensor | None) -> list[Tensor]:
            state = list(values[:n])
            inputs = [v for v in values[n : n + m] if v is not None]
            outer = values[n + m :]
            axes = [ax % x.dim() for ax, x in zip(in_axes, inputs, strict=True)]
            steps = inputs[0].shape[axes[0]] if inputs else 0
            collected: list[list[Tensor]] = [[] for _ in range(k)]
            for t in range(steps):
                slices = [
                    x.select(ax, steps - 1 - t if d else t)
                    for x, ax, d in zip(inputs, axes, in_dirs, strict=True)
                ]
                out = body.run(outer, [*state, *slices])
                state = list(out[:n])
                for kept, value in zip(collected, out[n:], strict=True):
                    kept.append(value)
            results = []
            for kept, ax, d in zip(collected, out_axes, out_dirs, strict=True):
                if d:
                    kept = kept[::-1]
                stacked = torch.stack(kept)
                results.append(torch.movedim(stacked, 0, ax % stacked.dim()))
            return [*state, *results]  # type: ignore[list-item]

        return run_scan, [*node.input, *body.outer]
