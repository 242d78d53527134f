"""Level 1: the ``tinygemm`` graph executor, for networks made of Gemm nodes.

The executor reads the graph once, in ``__init__``, into a plan: one step per node, in
the order ONNX stores them (topologically sorted). :meth:`TinyGemmExecutor.prepare_inference`
creates the operators for the feeds' shapes and converts the feeds, outside the region d5
times; the callable it returns runs the plan and nothing else. In a traced run, each node
it runs is a region of :data:`d5_tinygemm.trace.REGIONS`, named by the node and its type
(``dense1 (Gemm)``), around the operator's own ``Gemm`` region.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import helper

from d5_tinygemm.gemm import TinyGemm, TinyGemmBackend
from d5_tinygemm.trace import REGIONS
from d5core.api import GraphExecutor, TensorDescriptor

if TYPE_CHECKING:
    import onnx

    from d5core.api import Network

__all__ = ["TinyGemmExecutor"]


@dataclass(frozen=True)
class _Step:
    """One node of the graph: its attributes and tensor names, and how a trace names
    it."""

    attributes: dict[str, Any]
    inputs: tuple[str, ...]
    output: str
    #: The node's region in a trace: its name (``dense1 (Gemm)``) and ``args``.
    label: str
    trace_args: dict[str, str]


class TinyGemmExecutor(GraphExecutor):
    """Runs a graph of Gemm nodes, such as two dense layers ``Gemm -> Gemm``.

    It runs inference only (``trains`` is false): ``d5 validate net`` compares its
    outputs with the reference executor's and notes that gradients were not checked.
    """

    name = "tinygemm"
    supported_ops = frozenset({"Gemm"})

    def __init__(self, network: Network | onnx.ModelProto, *, device: str = "cpu") -> None:
        super().__init__(network, device=device)
        self.check_supported()  # another operator fails here, with its node's name
        self.backend = TinyGemmBackend()
        self.plan = [
            _Step(
                {a.name: helper.get_attribute_value(a) for a in node.attribute},
                tuple(name for name in node.input if name),
                node.output[0],
                f"{node.name or node.output[0]} ({node.op_type})",
                {"node": node.name or node.output[0], "op_type": node.op_type},
            )
            for node in self.network.nodes
        ]
        self.outputs = [out.name for out in self.network.outputs]

    def prepare_inference(
        self, feeds: Mapping[str, np.ndarray]
    ) -> Callable[[], dict[str, np.ndarray]]:
        start = {**self.get_parameters(), **{k: np.ascontiguousarray(v) for k, v in feeds.items()}}
        # Each operator is created for the shapes it will see: those of the feeds and
        # parameters, then those the operators before it produce.
        described = {name: TensorDescriptor.of(value) for name, value in start.items()}
        ops: list[tuple[TinyGemm, _Step]] = []
        for step in self.plan:
            inputs = [described[name] for name in step.inputs]
            op = self.backend.create("Gemm", step.attributes, inputs)
            described[step.output] = TensorDescriptor(
                op.output_shape([x.shape for x in inputs]), inputs[0].dtype
            )
            ops.append((op, step))

        def run() -> dict[str, np.ndarray]:
            tensors = dict(start)
            for op, step in ops:
                begin = time.perf_counter_ns() if REGIONS.on else 0  # 0: not traced
                (tensors[step.output],) = op.forward([tensors[name] for name in step.inputs])
                if begin:
                    REGIONS.add(step.label, begin, step.trace_args)
            return {name: tensors[name] for name in self.outputs}

        return run

    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Every graph output for ``feeds``."""
        return self.prepare_inference(feeds)()
