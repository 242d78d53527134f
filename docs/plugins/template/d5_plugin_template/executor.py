"""The graph executor (level 1), registered as ``template`` in ``d5.frameworks``.

It runs a network node by node with the backend's operators. A framework executor would
instead convert the whole graph into the framework's model once, in ``__init__``, and run
that model in :meth:`inference`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from onnx import helper

from d5_plugin_template.operators import TemplateBackend
from d5core.api import GraphExecutor, Operator, TensorDescriptor

__all__ = ["TemplateExecutor"]


class TemplateExecutor(GraphExecutor):
    """Runs networks made of the template backend's operators; inference only (an
    executor that also overrides ``inference_and_backprop`` can train)."""

    name = "template"
    supported_ops = frozenset(TemplateBackend().supported())

    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Run every node in order (ONNX stores them sorted) and return the outputs.

        :raises UsageError: one line naming the first node the backend cannot run.
        """
        self.check_supported()
        backend = TemplateBackend()
        values: dict[str, np.ndarray] = {**self.network.parameters, **feeds}
        for node in self.network.nodes:
            inputs = [values[name] for name in node.input]
            attributes: dict[str, Any] = {
                a.name: helper.get_attribute_value(a) for a in node.attribute
            }
            descriptors = [TensorDescriptor.of(x) for x in inputs]
            op: Operator = backend.create(node.op_type, attributes, descriptors)
            values.update(zip(node.output, op.forward(inputs), strict=True))
        return {out.name: values[out.name] for out in self.network.outputs}
