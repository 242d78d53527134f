"""Nodes that move data without computing: reshapes, transposes, concatenation,
squeezes, casts, slices and gathers."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.graph.layout import cl_axis
from d5_plugin_tensorflow.graph.translation import ChannelsLast, NodeBuilder, NodeFn, ints, rank_of
from d5core.api import UsageError

__all__ = ["ShapingNodes"]

tf = tensorflow()


#: ONNX element types Cast converts to, with TensorFlow's semantics (truncation toward
#: zero from floating to integer types).
_CASTABLE = frozenset(
    getattr(onnx.TensorProto, name)
    for name in (
        "FLOAT", "DOUBLE", "FLOAT16", "BFLOAT16", "BOOL", "INT8", "INT16", "INT32", "INT64",
        "UINT8", "UINT16", "UINT32", "UINT64",
    )
)  # fmt: skip

#: Element types TensorFlow cannot cast from; 4-bit integers it casts to 8-bit ones only.
_UNREADABLE = frozenset(
    getattr(onnx.TensorProto, name)
    for name in (
        "STRING", "FLOAT4E2M1", "FLOAT8E4M3FNUZ", "FLOAT8E5M2FNUZ", "FLOAT8E8M0", "INT2",
        "UINT2",
    )
    if hasattr(onnx.TensorProto, name)
)  # fmt: skip
_FROM_4_BITS = frozenset({onnx.TensorProto.INT8, onnx.TensorProto.UINT8})


class ShapingNodes(NodeBuilder):
    """Translations of data-movement nodes."""

    # -- shapes ---------------------------------------------------------------------------

    def op_Reshape(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        allowzero = bool(int(a.get("allowzero", 0)))
        attribute = a.get("shape")

        def reshape(x: Any, target_in: np.ndarray | None = None) -> tuple[Any]:
            target = ints(target_in if target_in is not None else attribute)
            shape = x.shape.as_list()
            dims = [shape[i] if d == 0 and not allowzero else d for i, d in enumerate(target)]
            return (tf.reshape(x, dims),)

        if attribute is not None and len(node.input) < 2:
            return self._node(node, reshape, [node.input[0]])
        return self._node(node, reshape, node.input[:2], static=frozenset({1}))

    def op_Flatten(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        axis = int(a.get("axis", 1))

        def flatten(x: Any) -> tuple[Any]:
            shape = x.shape.as_list()
            ax = axis % len(shape) if axis < 0 else axis
            return (tf.reshape(x, [math.prod(shape[:ax]), math.prod(shape[ax:])]),)

        if node.output[0] in self.cl_flattens:
            # the channels-last form flattened as it is: the Gemm weights that read it are
            # kept in this order (the executor chose the node; always this form, so that
            # the order never depends on how the input was produced)
            return self._node(
                node, flatten, [node.input[0]], cl=ChannelsLast(flatten, (0,), always=True)
            )
        return self._node(node, flatten, [node.input[0]])

    def op_Transpose(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        perm = a.get("perm")

        def transpose(x: Any) -> tuple[Any]:
            order = list(perm) if perm is not None else list(reversed(range(rank_of(x))))
            return (tf.transpose(x, order),)

        return self._node(node, transpose, [node.input[0]])

    def op_Concat(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        axis = int(a.get("axis", 1))

        def onnx_fn(*xs: Any) -> tuple[Any]:
            return (tf.concat(xs, axis),)

        def cl_fn(*xs: Any) -> tuple[Any]:
            return (tf.concat(xs, cl_axis(axis, rank_of(xs[0]))),)

        names = list(node.input)
        return self._node(node, onnx_fn, names, cl=ChannelsLast(cl_fn, tuple(range(len(names)))))

    def op_Squeeze(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        given, from_input = self._axes(node, a)

        def squeeze(x: Any, axes_in: np.ndarray | None = None) -> tuple[Any]:
            shape = x.shape.as_list()
            axes = ints(axes_in) if axes_in is not None else given
            dims = axes if axes is not None else [i for i, d in enumerate(shape) if d == 1]
            drop = {d % len(shape) for d in dims}
            return (tf.reshape(x, [d for i, d in enumerate(shape) if i not in drop]),)

        if from_input:
            return self._node(node, squeeze, node.input[:2], static=frozenset({1}))
        return self._node(node, squeeze, [node.input[0]])

    def op_Unsqueeze(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        given, from_input = self._axes(node, a)

        def unsqueeze(x: Any, axes_in: np.ndarray | None = None) -> tuple[Any]:
            axes = ints(axes_in) if axes_in is not None else (given or [])
            shape = x.shape.as_list()
            rank = len(shape) + len(axes)
            for d in sorted(ax % rank for ax in axes):
                shape.insert(d, 1)
            return (tf.reshape(x, shape),)

        if from_input:
            return self._node(node, unsqueeze, node.input[:2], static=frozenset({1}))
        return self._node(node, unsqueeze, [node.input[0]])

    # -- shapes as values -----------------------------------------------------------------

    def op_Shape(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        start, end = a.get("start"), a.get("end")

        def shape_of(x: Any) -> list[np.ndarray]:
            dims = x.shape.as_list()
            return [np.array(dims[slice(start, end)], dtype=np.int64)]

        def fn(x: Any) -> tuple[Any]:
            return (tf.constant(shape_of(x)[0]),)

        return self._node(node, fn, [node.input[0]], fold=shape_of)

    def op_Size(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        def size_of(x: Any) -> list[np.ndarray]:
            return [np.array(math.prod(x.shape.as_list()), dtype=np.int64)]

        return self._node(
            node, lambda x: (tf.constant(size_of(x)[0]),), [node.input[0]], fold=size_of
        )

    def op_ConstantOfShape(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        """A ConstantOfShape whose shape is known only when tracing (one known before is
        folded when the executor is built)."""
        value = np.asarray(a.get("value", np.zeros(1, np.float32))).reshape(-1)

        def fill(shape: np.ndarray) -> tuple[Any]:
            return (tf.constant(np.full(ints(shape), value[0], dtype=value.dtype)),)

        return self._node(node, fill, node.input[:1], static=frozenset({0}))

    # -- casts ----------------------------------------------------------------------------

    @staticmethod
    def _dtype(elem_type: int, where: str) -> Any:
        """The TensorFlow dtype of an ONNX element type; strings, floats of 8 bits and
        fewer, and integers of 4 bits and fewer are not cast to."""
        if elem_type == onnx.TensorProto.STRING:
            raise UsageError(f"{where}: casts to or from strings are not supported")
        if elem_type not in _CASTABLE:
            name = onnx.TensorProto.DataType.Name(elem_type)
            raise UsageError(f"{where}: element type {name} is not supported")
        return tf.as_dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type))

    def _declared_type(self, name: str) -> int:
        """The element type the graph declares for ``name`` (0 when it declares none)."""
        for value in self.value_types:
            if value.name == name:
                return int(value.type.tensor_type.elem_type)
        return 0

    @staticmethod
    def _check_source(source: int, target: int, where: str) -> None:
        """Refuse a cast from an element type TensorFlow cannot read (``0``: unknown)."""
        low = source in (onnx.TensorProto.INT4, onnx.TensorProto.UINT4)
        if source in _UNREADABLE or (low and target not in _FROM_4_BITS):
            name = onnx.TensorProto.DataType.Name(source)
            raise UsageError(f"{where}: element type {name} is not supported")

    def op_Cast(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        where = f"node {node.name!r} (Cast)"
        target = self._dtype(int(a["to"]), where)
        self._check_source(self._declared_type(node.input[0]), int(a["to"]), where)

        def cast(x: Any) -> tuple[Any]:
            if x.dtype == tf.string:
                raise UsageError(f"{where}: casts to or from strings are not supported")
            return (tf.cast(x, target),)

        return self._node(node, cast, [node.input[0]])

    def op_CastLike(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        where = f"node {node.name!r} (CastLike)"

        def cast_like(x: Any, like: Any) -> tuple[Any]:
            if tf.string in (x.dtype, like.dtype):
                raise UsageError(f"{where}: casts to or from strings are not supported")
            return (tf.cast(x, like.dtype),)

        target = self._declared_type(node.input[1]) if len(node.input) > 1 else 0
        if target:
            self._dtype(target, where)
            self._check_source(self._declared_type(node.input[0]), target, where)

        return self._node(node, cast_like, node.input[:2])

    # -- slicing and gathering ----------------------------------------------------------

    def op_Slice(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        def slice_(
            x: Any,
            starts: Any = None,
            ends: Any = None,
            axes: Any = None,
            steps: Any = None,
        ) -> tuple[Any]:
            if self.opset < 10:
                starts, ends, axes = a["starts"], a["ends"], a.get("axes")
            shape = x.shape.as_list()
            index: list[slice] = [slice(None)] * len(shape)
            given = ints(axes) if axes is not None else list(range(len(ints(starts))))
            strides = ints(steps) if steps is not None else [1] * len(given)
            for axis, start, end, step in zip(
                given, ints(starts), ints(ends), strides, strict=True
            ):
                index[axis % len(shape)] = _onnx_slice(shape[axis % len(shape)], start, end, step)
            return (x[tuple(index)],)

        if self.opset < 10:
            return self._node(node, slice_, [node.input[0]])
        return self._node(node, slice_, node.input[:5], static=frozenset({1, 2, 3, 4}))

    def op_Gather(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        axis = int(a.get("axis", 0))

        def gather(x: Any, indices: Any) -> tuple[Any]:
            ax = axis % rank_of(x)
            size = tf.cast(x.shape[ax], indices.dtype)
            wrapped = tf.where(indices < 0, indices + size, indices)  # negative: from the end
            return (tf.gather(x, wrapped, axis=ax),)

        return self._node(node, gather, node.input[:2])

    def op_GatherElements(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        axis = int(a.get("axis", 0))

        def gather_elements(x: Any, indices: Any) -> tuple[Any]:
            rank = rank_of(x)
            ax = axis % rank
            size = tf.cast(tf.shape(x)[ax], indices.dtype)
            wrapped = tf.cast(tf.where(indices < 0, indices + size, indices), tf.int64)
            # the indices may be shorter than the data on every axis: gather by the full
            # coordinates of each index position, its own value on ``axis``
            extent = tf.shape(wrapped, out_type=tf.int64)
            grids = tf.meshgrid(*[tf.range(extent[d]) for d in range(rank)], indexing="ij")
            grids[ax] = wrapped
            return (tf.gather_nd(x, tf.stack(grids, axis=-1)),)

        return self._node(node, gather_elements, node.input[:2])

    def op_GatherND(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        batch_dims = int(a.get("batch_dims", 0))
        return self._node(
            node, lambda x, i: (tf.gather_nd(x, i, batch_dims=batch_dims),), node.input[:2]
        )

    def op_Split(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        axis = int(a.get("axis", 0))
        outputs = len(node.output)
        count = int(a.get("num_outputs", outputs))

        def split(x: Any, sizes_in: Any = None) -> list[Any]:
            ax = axis % rank_of(x)
            total = x.shape[ax]
            if sizes_in is not None or "split" in a:
                sizes = ints(sizes_in if sizes_in is not None else a["split"])
            else:  # as even as possible, the last part smaller
                part = -(-total // count)
                sizes = [min(part, total - i * part) for i in range(count)]
            return list(tf.split(x, sizes, axis=ax))

        if len(node.input) > 1 and node.input[1]:
            return self._node(node, split, node.input[:2], static=frozenset({1}))
        return self._node(node, split, [node.input[0]])

    def op_Expand(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        def expand(x: Any, shape: np.ndarray) -> tuple[Any]:
            target = np.broadcast_shapes(tuple(x.shape.as_list()), tuple(ints(shape)))
            return (tf.broadcast_to(x, target),)

        return self._node(node, expand, node.input[:2], static=frozenset({1}))

    def op_Tile(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._node(
            node, lambda x, r: (tf.tile(x, ints(r)),), node.input[:2], static=frozenset({1})
        )

    def op_Pad(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        mode = a.get("mode", "constant")
        if mode not in ("constant", "reflect", "edge", "wrap"):
            raise UsageError(
                f"attribute mode must be constant, reflect, edge or wrap, not {mode!r}"
            )

        def pad(x: Any, pads: Any = None, value: Any = None, axes: Any = None) -> tuple[Any]:
            rank = rank_of(x)
            if self.opset < 11:
                pads, value = a["pads"], a.get("value", 0.0)
            given = [ax % rank for ax in ints(axes)] if axes is not None else list(range(rank))
            widths = ints(pads)
            begins, ends = [0] * rank, [0] * rank
            for i, ax in enumerate(given):
                begins[ax], ends[ax] = widths[i], widths[i + len(given)]
            if mode != "constant":
                for ax in range(rank):
                    if begins[ax] or ends[ax]:
                        index = _pad_index(x.shape[ax], begins[ax], ends[ax], mode)
                        x = tf.gather(x, index, axis=ax)
                return (x,)
            sizes = x.shape.as_list()
            # negative widths crop
            x = x[tuple(slice(max(-b, 0), n + e if e < 0 else None)
                        for b, e, n in zip(begins, ends, sizes, strict=True))]  # fmt: skip
            fill = 0 if value is None else value
            if not isinstance(fill, (int, float)):
                fill = tf.reshape(tf.cast(fill, x.dtype), [])
            widths2 = [[max(b, 0), max(e, 0)] for b, e in zip(begins, ends, strict=True)]
            return (tf.pad(x, widths2, constant_values=fill),)

        if self.opset < 11:
            return self._node(node, pad, [node.input[0]])
        return self._node(node, pad, node.input[:4], static=frozenset({1, 3}))

    def op_OneHot(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        axis = int(a.get("axis", -1))

        def one_hot(indices: Any, depth: np.ndarray, values: Any) -> tuple[Any]:
            n = int(np.asarray(depth).reshape(-1)[0])
            index = tf.cast(indices, tf.int64)
            index = tf.where(index < 0, index + n, index)
            off, on = values[0], values[1]
            where = axis % (rank_of(indices) + 1)
            return (tf.one_hot(index, n, on_value=on, off_value=off, axis=where),)

        return self._node(node, one_hot, node.input[:3], static=frozenset({1}))

    def op_Range(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        def range_(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> tuple[Any]:
            values = np.arange(start.item(), limit.item(), delta.item(), dtype=start.dtype)
            return (tf.constant(values),)

        return self._node(node, range_, node.input[:3], static=frozenset({0, 1, 2}))

    def op_Trilu(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        upper = bool(int(a.get("upper", 1)))

        def trilu(x: Any, k: np.ndarray | None = None) -> tuple[Any]:
            rows, cols = x.shape.as_list()[-2:]
            diagonal = 0 if k is None else int(np.asarray(k).reshape(-1)[0])
            ones = np.ones((rows, cols), dtype=bool)
            keep = np.triu(ones, diagonal) if upper else np.tril(ones, diagonal)
            return (tf.where(tf.constant(keep), x, tf.zeros_like(x)),)

        if len(node.input) > 1 and node.input[1]:
            return self._node(node, trilu, node.input[:2], static=frozenset({1}))
        return self._node(node, trilu, [node.input[0]])

    def op_DepthToSpace(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        bs = int(a["blocksize"])
        crd = a.get("mode", "DCR") == "CRD"

        def depth_to_space(x: Any) -> tuple[Any]:
            b, c, h, w = x.shape.as_list()
            if crd:
                t = tf.reshape(x, [b, c // (bs * bs), bs, bs, h, w])
                t = tf.transpose(t, [0, 1, 4, 2, 5, 3])
            else:
                t = tf.reshape(x, [b, bs, bs, c // (bs * bs), h, w])
                t = tf.transpose(t, [0, 3, 4, 1, 5, 2])
            return (tf.reshape(t, [b, c // (bs * bs), h * bs, w * bs]),)

        return self._node(node, depth_to_space, [node.input[0]])

    def op_SpaceToDepth(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        bs = int(a["blocksize"])
        crd = a.get("mode", "DCR") == "CRD"

        def space_to_depth(x: Any) -> tuple[Any]:
            b, c, h, w = x.shape.as_list()
            t = tf.reshape(x, [b, c, h // bs, bs, w // bs, bs])
            t = tf.transpose(t, [0, 1, 3, 5, 2, 4] if crd else [0, 3, 5, 1, 2, 4])
            return (tf.reshape(t, [b, c * bs * bs, h // bs, w // bs]),)

        return self._node(node, space_to_depth, [node.input[0]])

    def op_Einsum(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        equation = str(a["equation"]).replace(" ", "")
        return self._node(node, lambda *xs: (tf.einsum(equation, *xs),), list(node.input))


def _onnx_slice(size: int, start: int, end: int, step: int) -> slice:
    """ONNX Slice's range along one axis of ``size`` elements as a Python slice with
    every bound inside the axis: ONNX clamps as Python's slicing does, and XLA's gradient
    of a strided slice goes wrong on bounds outside (a gradient longer than the input)."""
    if step == 0:
        raise UsageError("Slice steps must not be 0")
    lo, hi, by = slice(start, end, step).indices(size)
    if not range(lo, hi, by):
        return slice(0, 0, 1)
    return slice(lo, None if hi < 0 else hi, by)


def _pad_index(size: int, begin: int, end: int, mode: str) -> np.ndarray:
    """For reflect, edge and wrap padding: which element of the axis each padded position
    takes (negative widths crop)."""
    positions = np.arange(-begin, size + end)
    if mode == "edge":
        return np.clip(positions, 0, size - 1)
    if mode == "wrap":
        return np.mod(positions, size)
    period = 2 * (size - 1) if size > 1 else 1  # reflect, without repeating the edge
    folded = np.mod(positions, period)
    return np.where(folded < size, folded, period - folded)
