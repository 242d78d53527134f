"""Indexing, comparisons, casts and the element-wise operators of transformer graphs:
Shape, Size, ConstantOfShape, Range, Gather, GatherElements, Slice, Split, Expand, Tile,
Trilu, Where, Equal, Less, Greater (and their ``OrEqual`` forms), Not, And, Or, Xor, Max,
Min, Cast, CastLike, Pow, Mod, Gelu, Sin, Cos and LayerNormalization.

MXNet 1.9.1 has no bool tensors: ONNX bools are held as uint8 (0 or 1), which is what
comparisons and ``Cast(to=BOOL)`` produce here and what ``Where`` and the logical
operators read. It has no rank-0 tensors either: where a scalar matters (a Gather with a
scalar index drops the gathered axis) the known value of the input tells it
(:meth:`~.base.Context.rank`). Shape and Size are folded from the shapes when the graph
is compiled (see :mod:`.program`); their node functions only serve a run that does not
fold. Trilu multiplies its input by a constant triangle of ones, so its gradient is that
mask too.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import onnx

from d5_plugin_mxnet.graph.base import (
    Context,
    Reader,
    Shape,
    Translated,
    Translation,
    ints,
    node_error,
)
from d5core.onnx import constant_value

__all__ = ["OPS", "broadcast_to_rank", "mx_dtype"]

#: The element types MXNet 1.9.1 holds (bool held as uint8).
_MX_DTYPES = frozenset(
    np.dtype(t) for t in ("float16", "float32", "float64", "int8", "uint8", "int32", "int64")
)


def mx_dtype(node: onnx.NodeProto, dtype: np.dtype[Any]) -> np.dtype[Any]:
    """The MXNet type holding ONNX's ``dtype`` (bool as uint8).

    :raises UsageError: for a type MXNet has no tensors of.
    """
    if dtype == np.bool_:
        return np.dtype(np.uint8)
    if dtype not in _MX_DTYPES:
        raise node_error(
            node,
            f"element type {dtype.name} is not supported by the mxnet executor; use one of "
            "bool, float16, float32, float64, int8, uint8, int32, int64",
        )
    return np.dtype(dtype)


def broadcast_to_rank(ctx: Context, x: Any, shape: Shape, rank: int) -> Any:
    """``x`` (of ``shape``) with leading unit axes up to ``rank``."""
    if len(shape) >= rank:
        return x
    return ctx.F.reshape(x, shape=(1,) * (rank - len(shape)) + tuple(shape))


def _broadcast_all(ctx: Context, xs: Sequence[Any], shapes: Sequence[Shape]) -> list[Any]:
    """Every input broadcast to their common shape (as ``broadcast_to`` materializes)."""
    full = tuple(np.broadcast_shapes(*shapes))
    out = []
    for x, shape in zip(xs, shapes, strict=True):
        x = broadcast_to_rank(ctx, x, shape, len(full))
        if (1,) * (len(full) - len(shape)) + tuple(shape) != full:
            x = ctx.F.broadcast_to(x, shape=full)
        out.append(x)
    return out


def _binary(
    ctx: Context, op: str, x: Any, y: Any, xs: Shape, ys: Shape, same: str | None = None
) -> Any:
    """``F.<op>`` (a broadcasting operator) of ``x`` and ``y`` with numpy broadcasting;
    ``same`` is the element-wise operator used when the shapes are equal."""
    if same is not None and xs == ys:
        return getattr(ctx.F, same)(x, y)
    rank = max(len(xs), len(ys))
    x, y = broadcast_to_rank(ctx, x, xs, rank), broadcast_to_rank(ctx, y, ys, rank)
    return getattr(ctx.F, op)(x, y)


# -- shapes and constants -------------------------------------------------------------


def _shape(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    start = int(a.get("start", 0))
    end = a.get("end")

    made: dict[tuple[int, ...], np.ndarray[Any, Any]] = {}  # one array per input shape

    def shape(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        dims = tuple(ctx.shapes[0])
        value = made.get(dims)
        if value is None:
            stop = len(dims) if end is None else int(end)
            value = made[dims] = np.array(dims[start:stop], dtype=np.int64)
        return [ctx.constant(f"shape{dims}", value)]

    return Translated(shape, [node.input[0]])


def _size(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    def size(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        total = math.prod(ctx.shapes[0])
        return [ctx.constant(f"size{total}", np.array([total], dtype=np.int64))]

    return Translated(size, [node.input[0]])


def _constant_of_shape(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    shape = tr.static(node, 0)
    if shape is None:
        raise node_error(node, "the shape input is missing")
    value = constant_value(node, [shape])
    held = value.astype(mx_dtype(node, value.dtype))
    held = held.reshape(1) if held.ndim == 0 else held

    def constant(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        return [ctx.F.identity(ctx.constant("value", held))]

    return Translated(constant, [])


def _range(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    bounds = [tr.static(node, i) for i in range(3)]
    if any(b is None for b in bounds):
        raise node_error(node, "start, limit and delta are required")
    start, limit, delta = (np.asarray(b).reshape(()) for b in bounds if b is not None)
    value = np.arange(start.item(), limit.item(), delta.item()).astype(start.dtype)
    if value.size == 0:
        raise node_error(node, "the range is empty, and MXNet 1.9.1 has no zero-size tensors")
    held = value.astype(mx_dtype(node, value.dtype))

    def range_(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        return [ctx.F.identity(ctx.constant("value", held))]

    return Translated(range_, [])


# -- indexing -------------------------------------------------------------------------


def _gather(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    axis = int(a.get("axis", 0))

    def gather(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        data_shape = ctx.shapes[0]
        rank = len(data_shape)
        ax = axis + rank if axis < 0 else axis
        if not 0 <= ax < rank:
            raise node_error(node, f"axis {axis} is out of range for rank {rank}")
        out = ctx.F.take(xs[0], xs[1], axis=ax, mode="wrap")
        if ctx.rank(1) == 0:  # a scalar index drops the axis
            out_shape = data_shape[:ax] + data_shape[ax + 1 :]
            out = ctx.F.reshape(out, shape=out_shape or (1,))
        return [out]

    return Translated(gather, list(node.input[:2]))


def _gather_elements(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    axis = int(a.get("axis", 0))

    def gather_elements(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        F = ctx.F
        data_shape, index_shape = ctx.shapes
        rank = len(data_shape)
        ax = axis + rank if axis < 0 else axis
        if len(index_shape) != rank or not 0 <= ax < rank:
            raise node_error(
                node, f"indices {index_shape} and data {data_shape} need the same rank"
            )
        index = F.cast(xs[1], dtype="int64")
        index = index + (index < 0) * data_shape[ax]
        grid = np.indices(index_shape, dtype=np.int64)
        coords = [
            F.reshape(index, shape=(1, *index_shape))
            if d == ax
            else ctx.constant(f"grid{d}{index_shape}", grid[d : d + 1])
            for d in range(rank)
        ]
        return [F.gather_nd(xs[0], F.concat(*coords, dim=0))]

    return Translated(gather_elements, list(node.input[:2]))


def _slices(
    node: onnx.NodeProto,
    shape: Shape,
    starts: list[int],
    ends: list[int],
    axes: list[int],
    steps: list[int],
) -> tuple[tuple[int | None, ...], tuple[int | None, ...], tuple[int | None, ...]]:
    """MXNet ``slice``'s begin, end and step for ONNX Slice's (Python's slicing rules)."""
    rank = len(shape)
    begin: list[int | None] = [None] * rank
    end: list[int | None] = [None] * rank
    step: list[int | None] = [None] * rank
    for start, stop, ax, st in zip(starts, ends, axes, steps, strict=True):
        d = ax + rank if ax < 0 else ax
        if not 0 <= d < rank or st == 0:
            raise node_error(node, f"bad axis {ax} or step {st} for an input of rank {rank}")
        lo, hi, by = slice(start, stop, st).indices(shape[d])
        begin[d], step[d] = lo, by
        end[d] = None if hi < 0 else hi
    return tuple(begin), tuple(end), tuple(step)


def _slice(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    if "starts" in a:  # before opset 10
        starts, ends = ints(a["starts"]), ints(a["ends"])
        axes_given: list[int] | None = ints(a["axes"]) if "axes" in a else None
        steps_given: list[int] | None = None
    else:
        found_starts, found_ends = tr.static(node, 1), tr.static(node, 2)
        if found_starts is None or found_ends is None:
            raise node_error(node, "starts and ends are required")
        starts, ends = ints(found_starts), ints(found_ends)
        axes_value, steps_value = tr.static(node, 3), tr.static(node, 4)
        axes_given = None if axes_value is None else ints(axes_value)
        steps_given = None if steps_value is None else ints(steps_value)
    axes = axes_given if axes_given is not None else list(range(len(starts)))
    steps = steps_given if steps_given is not None else [1] * len(starts)

    def slice_(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        begin, end, step = _slices(node, ctx.shapes[0], starts, ends, axes, steps)
        return [ctx.F.slice(xs[0], begin=begin, end=end, step=step)]

    return Translated(slice_, [node.input[0]])


def _split(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    axis = int(a.get("axis", 0))
    given = ints(a["split"]) if "split" in a else None
    if given is None:
        value = tr.static(node, 1)
        given = None if value is None else ints(value)
    count = len(node.output)

    def split(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        shape = ctx.shapes[0]
        ax = axis + len(shape) if axis < 0 else axis
        size = shape[ax]
        if given is not None:
            sizes = given
        else:
            part = -(-size // count)
            sizes = [min(part, size - i * part) for i in range(count)]
        if sum(sizes) != size or len(sizes) != count:
            raise node_error(node, f"split sizes {sizes} do not cover axis {axis} of {shape}")
        outs, start = [], 0
        for n in sizes:
            outs.append(ctx.F.slice_axis(xs[0], axis=ax, begin=start, end=start + n))
            start += n
        return outs

    return Translated(split, [node.input[0]])


def _expand(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    given = tr.static(node, 1)
    if given is None:
        raise node_error(node, "the shape input is missing")
    target = tuple(ints(given))

    def expand(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        shape = ctx.shapes[0] if ctx.rank(0) else ()
        try:
            full = tuple(np.broadcast_shapes(shape, target))
        except ValueError:
            raise node_error(node, f"cannot expand {shape} to {list(target)}") from None
        x = ctx.F.reshape(xs[0], shape=(1,) * (len(full) - len(shape)) + shape)
        if (1,) * (len(full) - len(shape)) + shape == full:
            return [ctx.F.identity(x)]
        return [ctx.F.broadcast_to(x, shape=full)]

    return Translated(expand, [node.input[0]])


def _tile(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    given = tr.static(node, 1)
    if given is None:
        raise node_error(node, "the repeats input is missing")
    reps = tuple(ints(given))

    def tile(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        return [ctx.F.tile(xs[0], reps=reps)]

    return Translated(tile, [node.input[0]])


def _trilu(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    upper = bool(int(a.get("upper", 1)))
    given = tr.static(node, 1)
    k = 0 if given is None else ints(given)[0]

    def trilu(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        shape, dtype = ctx.shapes[0], ctx.dtypes[0]
        assert dtype is not None
        if ctx.rank(0) < 2:
            raise node_error(node, f"the input needs rank 2 or more, not shape {shape}")
        rows, cols = shape[-2:]
        if 0 in shape:
            raise node_error(
                node, f"the input {shape} is empty, and MXNet 1.9.1 has no zero-size tensors"
            )
        ones = np.ones((rows, cols), dtype)
        mask = np.triu(ones, k) if upper else np.tril(ones, k)
        held = mask.reshape((1,) * (len(shape) - 2) + (rows, cols))
        kept = ctx.constant(f"{'triu' if upper else 'tril'}{k}{held.shape}{dtype.str}", held)
        if len(shape) == 2:
            return [ctx.F.elemwise_mul(xs[0], kept)]
        return [ctx.F.broadcast_mul(xs[0], kept)]

    return Translated(trilu, [node.input[0]])


# -- comparisons and logic ---------------------------------------------------------------

#: ONNX comparison to MXNet's broadcasting operator.
_COMPARISONS = {
    "Equal": "broadcast_equal",
    "Less": "broadcast_lesser",
    "Greater": "broadcast_greater",
    "LessOrEqual": "broadcast_lesser_equal",
    "GreaterOrEqual": "broadcast_greater_equal",
    "And": "broadcast_logical_and",
    "Or": "broadcast_logical_or",
    "Xor": "broadcast_logical_xor",
}


def _comparison(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    op = _COMPARISONS[node.op_type]

    def compare(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        x, y = xs
        if ctx.dtypes[0] != ctx.dtypes[1]:
            raise node_error(node, f"inputs of types {ctx.dtypes[0]} and {ctx.dtypes[1]} differ")
        out = _binary(ctx, op, x, y, ctx.shapes[0], ctx.shapes[1])
        return [ctx.F.cast(out, dtype="uint8")]

    return Translated(compare, list(node.input[:2]))


def _not(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    return Translated(
        lambda ctx, xs: [ctx.F.cast(ctx.F.logical_not(xs[0]), dtype="uint8")], [node.input[0]]
    )


def _where(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    def where(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        cond, x, y = _broadcast_all(ctx, xs, ctx.shapes)
        return [ctx.F.where(cond, x, y)]

    return Translated(where, list(node.input[:3]))


def _extremum(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    op = "broadcast_maximum" if node.op_type == "Max" else "broadcast_minimum"
    same = "maximum" if node.op_type == "Max" else "minimum"

    def extremum(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        value, shape = xs[0], ctx.shapes[0]
        for x, s in zip(xs[1:], ctx.shapes[1:], strict=True):
            value = _binary(ctx, op, value, x, shape, s, same)
            shape = tuple(np.broadcast_shapes(shape, s))
        return [value if len(xs) > 1 else ctx.F.identity(value)]

    return Translated(extremum, list(node.input))


# -- casts and arithmetic ----------------------------------------------------------------


def _cast_to(ctx: Context, x: Any, source: np.dtype[Any] | None, target: np.dtype[Any]) -> Any:
    """``x`` cast to ``target`` (an MXNet type), or a copy when it already is one."""
    if source == target:
        return ctx.F.identity(x)
    return ctx.F.cast(x, dtype=target.name)


def _cast(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    to = onnx.helper.tensor_dtype_to_np_dtype(int(a["to"]))
    to_bool = to == np.bool_
    target = mx_dtype(node, to)

    def cast(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        x = xs[0]
        if to_bool:
            return [ctx.F.cast(x != 0, dtype="uint8")]
        return [_cast_to(ctx, x, ctx.dtypes[0], target)]

    return Translated(cast, [node.input[0]])


def _cast_like(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    def cast_like(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        target = ctx.dtypes[1]
        assert target is not None
        return [_cast_to(ctx, xs[0], ctx.dtypes[0], np.dtype(target))]

    return Translated(cast_like, list(node.input[:2]))


def _pow(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    def power(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        F = ctx.F
        x, y = xs
        x_type, y_type = ctx.dtypes
        assert x_type is not None
        exponent = ctx.value(1)
        if exponent is not None and exponent.size == 1 and np.issubdtype(x_type, np.floating):
            e = float(exponent.reshape(-1)[0])
            if e == 2.0:
                out = F.square(x)
            elif e == 0.5:
                out = F.sqrt(x)
            else:
                out = x**e
            out_shape = ctx.shapes[0]
            full = tuple(np.broadcast_shapes(out_shape, ctx.shapes[1]))
            return [broadcast_to_rank(ctx, out, out_shape, len(full))]
        work = x_type if np.issubdtype(x_type, np.floating) else np.dtype(np.float64)
        if x_type != work:
            x = F.cast(x, dtype=work.name)
        if y_type != work:
            y = F.cast(y, dtype=work.name)
        out = _binary(ctx, "broadcast_power", x, y, ctx.shapes[0], ctx.shapes[1])
        return [out if work == x_type else F.cast(out, dtype=x_type.name)]

    return Translated(power, list(node.input[:2]))


def _mod(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    truncated = bool(int(a.get("fmod", 0)))

    def mod(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        F = ctx.F
        x_type = ctx.dtypes[0]
        assert x_type is not None
        x, y = (F.cast(v, dtype="float64") for v in xs)
        ratio = _binary(ctx, "broadcast_div", x, y, ctx.shapes[0], ctx.shapes[1])
        whole = F.trunc(ratio) if truncated else F.floor(ratio)
        product = _binary(ctx, "broadcast_mul", whole, y, ratio_shape(ctx), ctx.shapes[1])
        out = _binary(ctx, "broadcast_sub", x, product, ctx.shapes[0], ratio_shape(ctx))
        return [F.cast(out, dtype=x_type.name)]

    def ratio_shape(ctx: Context) -> Shape:
        return tuple(np.broadcast_shapes(ctx.shapes[0], ctx.shapes[1]))

    return Translated(mod, list(node.input[:2]))


def _gelu(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    approximate = str(a.get("approximate", "none"))
    if approximate not in ("none", "tanh"):
        raise node_error(node, f"approximate must be 'none' or 'tanh', not {approximate!r}")

    def gelu(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        F, x = ctx.F, xs[0]
        if approximate == "tanh":
            inner = (x + (x * x * x) * 0.044715) * math.sqrt(2.0 / math.pi)
            return [x * (F.tanh(inner) + 1.0) * 0.5]
        return [x * (F.erf(x * (1.0 / math.sqrt(2.0))) + 1.0) * 0.5]

    return Translated(gelu, [node.input[0]])


def _unary(name: str) -> Translation:
    def translate(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
        return Translated(lambda ctx, xs: [getattr(ctx.F, name)(xs[0])], [node.input[0]])

    return translate


# -- layer normalization -----------------------------------------------------------------


def _matches(shape: Shape, inner: Shape) -> bool:
    """Whether a scale of ``shape`` holds one value per position of ``inner``."""
    trimmed = tuple(shape)
    while len(trimmed) > len(inner) and trimmed[0] == 1:
        trimmed = trimmed[1:]
    return trimmed == tuple(inner)


def _layer_norm(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    axis = int(a.get("axis", -1))
    eps = float(a.get("epsilon", 1e-5))
    wants = [bool(o) for o in node.output] + [False] * (3 - len(node.output))
    inputs = [i for i in node.input[:3] if i]

    def layer_norm(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        F = ctx.F
        shape = ctx.shapes[0]
        dtype = ctx.dtypes[0]
        assert dtype is not None
        rank = len(shape)
        ax = axis + rank if axis < 0 else axis
        if not 0 <= ax < rank:
            raise node_error(node, f"axis {axis} is out of range for rank {rank}")
        outer, inner = math.prod(shape[:ax]), math.prod(shape[ax:])
        x = F.reshape(xs[0], shape=(outer, inner))
        scale = xs[1]
        bias = xs[2] if len(xs) > 2 else None
        fused = _matches(ctx.shapes[1], shape[ax:]) and (
            bias is None or _matches(ctx.shapes[2], shape[ax:])
        )
        if fused:
            gamma = F.reshape(scale, shape=(inner,))
            beta = (
                F.reshape(bias, shape=(inner,))
                if bias is not None
                else ctx.constant(f"zeros{inner}", np.zeros(inner, dtype))
            )
        else:
            gamma = ctx.constant(f"ones{inner}", np.ones(inner, dtype))
            beta = ctx.constant(f"zeros{inner}", np.zeros(inner, dtype))
        # (the mean and deviation outputs of MXNet's LayerNorm break its data gradient)
        y = F.reshape(F.LayerNorm(x, gamma, beta, axis=-1, eps=eps), shape=shape)
        if not fused:
            y = _binary(ctx, "broadcast_mul", y, scale, shape, ctx.shapes[1])
            if bias is not None:
                y = _binary(ctx, "broadcast_add", y, bias, shape, ctx.shapes[2])
        stat_shape = shape[:ax] + (1,) * (rank - ax)
        outs = [y]
        if wants[1] or wants[2]:
            mean = F.mean(x, axis=1, keepdims=True)
            var = F.mean(F.square(F.broadcast_sub(x, mean)), axis=1, keepdims=True)
            outs.append(F.reshape(mean, shape=stat_shape) if wants[1] else None)
            if wants[2]:
                outs.append(F.reshape(F.rsqrt(var + eps), shape=stat_shape))
        return outs

    return Translated(layer_norm, inputs)


#: The translation of every operator type of this family.
OPS: dict[str, Translation] = {
    "Shape": _shape,
    "Size": _size,
    "ConstantOfShape": _constant_of_shape,
    "Range": _range,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "Slice": _slice,
    "Split": _split,
    "Expand": _expand,
    "Tile": _tile,
    "Trilu": _trilu,
    **{op: _comparison for op in _COMPARISONS},
    "Not": _not,
    "Where": _where,
    "Max": _extremum,
    "Min": _extremum,
    "Cast": _cast,
    "CastLike": _cast_like,
    "Pow": _pow,
    "Mod": _mod,
    "Gelu": _gelu,
    "Sin": _unary("sin"),
    "Cos": _unary("cos"),
    "LayerNormalization": _layer_norm,
}
