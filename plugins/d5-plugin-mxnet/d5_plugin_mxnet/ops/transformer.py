"""The operators of transformer and recurrent models as level-0 operators: Gather,
GatherElements, Slice, Shape, ConstantOfShape, Expand, Where, Equal, Less, Greater,
Cast, Pow, Sqrt, Erf, Exp, Log, Gelu, ReduceMean, ReduceSum, ReduceMax,
LayerNormalization, LSTM and GRU.

Each kernel is the graph executor's node function (:mod:`d5_plugin_mxnet.graph`) called
with ``mx.nd``, so that the operator timed and validated here is the code the ``mxnet``
executor runs in a network. Static inputs (Slice's starts, a reduction's axes, Expand's
shape) are read when the callable is prepared. Index inputs and Where's condition reach
the kernel in the float type, as every MXNet operator here takes them. The ONNX shape and
element type of each output come from onnx's shape inference on the one-node graph:
MXNet holds a scalar as a vector of one (a Gather by a scalar index keeps an axis of one
that ONNX drops), and comparisons, Shape and integer casts give non-float outputs (no
gradient).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from d5_plugin_mxnet.graph.base import Context
from d5_plugin_mxnet.graph.translation import OPS, Translator
from d5_plugin_mxnet.ops._base import MXNetOperator, Plan, Signature, mx
from d5core.api import UsageError
from d5core.onnx import (
    GraphNodeOperator,
    graph_operator_classes,
    node_attributes,
    one_node,
    one_node_opset,
)

__all__ = ["TRANSFORMER_OPERATORS", "TranslatedOperator"]


class TranslatedOperator(GraphNodeOperator, MXNetOperator):
    """An operator whose kernel is the graph executor's node function.

    :func:`d5core.api.graph_operator_classes` makes one subclass per operator.
    """

    def _opset(self) -> int:
        return one_node_opset(self.op_type, self.attributes)

    def _node(self, sig: Signature) -> onnx.NodeProto:
        present = [a is not None for a in sig.arrays]
        return one_node(self.op_type, self.attributes, present, type(self).outputs)

    def _inferred(
        self, sig: Signature, node: onnx.NodeProto
    ) -> list[tuple[tuple[int, ...] | None, np.dtype[Any] | None]]:
        """The ONNX shape and element type of each output, by shape inference."""
        inputs, inits = [], []
        for slot, array, name in zip(sig.slots, sig.arrays, node.input, strict=False):
            if array is None or not name:
                continue
            if slot.kind == "static":
                inits.append(onnx.numpy_helper.from_array(np.asarray(array), name))
                continue
            dtype = {"index": np.int64, "bool": np.bool_}.get(slot.kind, np.dtype(sig.dtype))
            elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
            inputs.append(onnx.helper.make_tensor_value_info(name, elem, list(array.shape)))
        graph = onnx.helper.make_graph(
            [node],
            "op",
            inputs,
            [onnx.helper.make_empty_tensor_value_info(o) for o in node.output],
            inits,
        )
        model = onnx.helper.make_model(
            graph, opset_imports=[onnx.helper.make_opsetid("", self._opset())]
        )
        found: dict[str, Any] = {}
        try:
            inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
            found = {v.name: v for v in [*inferred.graph.output, *inferred.graph.value_info]}
        except Exception:
            found = {}
        result: list[tuple[tuple[int, ...] | None, np.dtype[Any] | None]] = []
        for name in node.output:
            tensor = found[name].type.tensor_type if name in found else None
            if tensor is None or not tensor.elem_type:
                result.append((None, None))
                continue
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type)
            dims = tensor.shape.dim if tensor.HasField("shape") else None
            known = dims is not None and all(d.HasField("dim_value") for d in dims)
            shape = tuple(d.dim_value for d in dims) if known and dims is not None else None
            result.append((shape, np.dtype(dtype)))
        return result

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        node = self._node(sig)
        statics = {
            f"in{p}": np.asarray(a)
            for p, (slot, a) in enumerate(zip(sig.slots, sig.arrays, strict=True))
            if slot.kind == "static" and a is not None
        }
        translator = Translator(self._opset(), False, statics, frozenset())
        try:
            translated = OPS[self.op_type](node, node_attributes(node), translator)
        except UsageError as exc:
            raise self.fail(str(exc).split(": ", 1)[-1]) from None
        tensors = [
            (f"in{p}", a)
            for p, (slot, a) in enumerate(zip(sig.slots, sig.arrays, strict=True))
            if slot.kind != "static"
        ]
        at = {name: k for k, (name, a) in enumerate(tensors) if a is not None}
        picked = [at[name] for name in translated.inputs]
        shapes = [tuple(int(d) for d in tensors[k][1].shape) or (1,) for k in picked]
        dtype = np.dtype(sig.dtype)
        count, fn = type(self).outputs, translated.fn

        # The node's constants (a mask, a shape, gate weights' splits) become mx.nd arrays
        # once: the warm-up call below makes them, outside the timed region.
        constants: dict[str, Any] = {}

        def constant(key: str, value: np.ndarray[Any, Any]) -> Any:
            made = constants.get(key)
            if made is None:
                made = constants[key] = mx.nd.array(value, dtype=value.dtype)
            return made

        def kernel(*xs: Any) -> tuple[Any, ...]:
            args = [xs[k] for k in picked]
            ctx = Context(mx.nd, shapes, [dtype] * len(args), constant)
            return tuple(fn(ctx, args))[:count]

        warm_up = [mx.nd.zeros(shape, dtype=dtype) for shape in shapes]
        kernel(*[warm_up[picked.index(k)] if k in picked else None for k in range(len(at))])
        mx.nd.waitall()

        onnx_shapes: dict[int, tuple[int, ...]] = {}
        onnx_dtypes: dict[int, str] = {}
        for i, (shape, out_dtype) in enumerate(self._inferred(sig, node)[:count]):
            if shape is not None:  # a scalar index holds a vector of one: reshape
                onnx_shapes[i] = shape
            if shape is not None and 0 in shape:
                raise self.fail(
                    f"output {i} would have shape {shape}: MXNet 1.9's arrays cannot hold "
                    "an axis of size 0"
                )
            if out_dtype is not None and not np.issubdtype(out_dtype, np.floating):
                onnx_dtypes[i] = out_dtype.name
        return Plan(kernel, onnx_shapes, onnx_dtypes)


#: The operator classes of this module, in the order of the kit's properties.
TRANSFORMER_OPERATORS: tuple[type[TranslatedOperator], ...] = graph_operator_classes(
    TranslatedOperator, __name__, "as the mxnet graph executor runs it"
)
