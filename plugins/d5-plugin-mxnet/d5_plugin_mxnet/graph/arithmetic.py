"""Element-wise and matrix arithmetic: Add, Sub, Mul, Div, Sum, MatMul, Gemm and the
unary activations.

MXNet's integer division already truncates toward zero in the inputs' type, as ONNX's
Div does, and its int8/uint8/int32/int64 arithmetic wraps; equal shapes use the
element-wise kernels (what Gluon's ``x + y`` runs), other shapes the broadcasting ones,
the lower-rank operand first given leading ones. Add, Sub, Mul and Div of opsets before
7 broadcast ``B`` as their ``broadcast``/``axis`` attributes say.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from d5_plugin_mxnet.graph.base import (
    Context,
    Reader,
    Shape,
    Translated,
    Translation,
    node_error,
)
from d5core.api import UsageError
from d5core.onnx import legacy_broadcast, legacy_broadcast_shape

__all__ = ["OPS", "broadcast_binary"]

#: The element-wise and broadcasting MXNet operator of each ONNX binary operator.
_BINARY = {
    "Add": ("elemwise_add", "broadcast_add"),
    "Sub": ("elemwise_sub", "broadcast_sub"),
    "Mul": ("elemwise_mul", "broadcast_mul"),
    "Div": ("elemwise_div", "broadcast_div"),
}


def broadcast_binary(ctx: Context, op: str, x: Any, y: Any, xs: Shape, ys: Shape) -> Any:
    """``op`` (an ONNX binary operator name) of ``x`` and ``y`` with numpy broadcasting."""
    same, broadcast = _BINARY[op]
    if xs == ys:
        return getattr(ctx.F, same)(x, y)
    if len(xs) < len(ys):
        x = ctx.F.reshape(x, shape=(1,) * (len(ys) - len(xs)) + xs)
    elif len(ys) < len(xs):
        y = ctx.F.reshape(y, shape=(1,) * (len(xs) - len(ys)) + ys)
    return getattr(ctx.F, broadcast)(x, y)


def _arithmetic(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    op = node.op_type
    legacy = legacy_broadcast(op, tr.opset, a)
    where = f"node {node.name!r} ({op})"

    def binary(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        x, y = xs
        x_shape, y_shape = ctx.shapes
        if legacy is not None:
            try:
                shape = legacy_broadcast_shape(
                    x_shape, y_shape, broadcast=legacy[0], axis=legacy[1]
                )
            except UsageError as exc:
                raise UsageError(f"{where}: {exc}") from None
            y, y_shape = ctx.F.reshape(y, shape=shape), tuple(shape)
        return [broadcast_binary(ctx, op, x, y, x_shape, y_shape)]

    return Translated(binary, list(node.input[:2]))


def _sum(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    def total(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        if len(set(ctx.shapes)) == 1 and len(xs) > 2:
            return [ctx.F.add_n(*xs)]
        value, shape = xs[0], ctx.shapes[0]
        for x, s in zip(xs[1:], ctx.shapes[1:], strict=True):
            value = broadcast_binary(ctx, "Add", value, x, shape, s)
            shape = tuple(np.broadcast_shapes(shape, s))
        return [value]

    return Translated(total, list(node.input))


def _matmul(ctx: Context, x: Any, w: Any, xs: Shape, ws: Shape) -> Any:
    """numpy's ``matmul`` of ``x`` and ``w`` (ranks 1 and up)."""
    F = ctx.F
    if len(xs) == 2 and len(ws) == 2:
        return F.dot(x, w)
    if len(ws) == 2 and len(xs) > 2:  # a batch of rows times one matrix
        rows = F.reshape(x, shape=(-1, xs[-1]))
        return F.reshape(F.dot(rows, w), shape=(*xs[:-1], ws[-1]))
    if len(xs) == 1 or len(ws) == 1:
        x2 = F.reshape(x, shape=(1, xs[0])) if len(xs) == 1 else x
        w2 = F.reshape(w, shape=(ws[0], 1)) if len(ws) == 1 else w
        out = _matmul(
            ctx, x2, w2, (1, xs[0]) if len(xs) == 1 else xs, (ws[0], 1) if len(ws) == 1 else ws
        )
        full = np.matmul(np.empty(xs, np.int8), np.empty(ws, np.int8)).shape
        return F.reshape(out, shape=full or (1,))  # MXNet has no rank-0 tensors
    batch = tuple(np.broadcast_shapes(xs[:-2], ws[:-2]))
    x = F.broadcast_to(
        F.reshape(x, shape=(1,) * (len(batch) + 2 - len(xs)) + xs), shape=(*batch, *xs[-2:])
    )
    w = F.broadcast_to(
        F.reshape(w, shape=(1,) * (len(batch) + 2 - len(ws)) + ws), shape=(*batch, *ws[-2:])
    )
    flat = F.batch_dot(F.reshape(x, shape=(-1, *xs[-2:])), F.reshape(w, shape=(-1, *ws[-2:])))
    return F.reshape(flat, shape=(*batch, xs[-2], ws[-1]))


def _matmul_node(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    def matmul(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        return [_matmul(ctx, xs[0], xs[1], ctx.shapes[0], ctx.shapes[1])]

    return Translated(matmul, list(node.input[:2]))


def _gemm(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
    ta, tb = bool(int(a.get("transA", 0))), bool(int(a.get("transB", 0)))
    inputs = [i for i in node.input[:3]]

    def gemm(ctx: Context, xs: Sequence[Any]) -> list[Any]:
        F = ctx.F
        x, w = xs[0], xs[1]
        c = xs[2] if len(xs) > 2 else None
        x_shape, w_shape = ctx.shapes[0], ctx.shapes[1]
        if len(x_shape) != 2 or len(w_shape) != 2:
            raise node_error(
                node, f"A and B must be matrices, not of shapes {x_shape} and {w_shape}"
            )
        units = w_shape[0] if tb else w_shape[1]
        c_shape = ctx.shapes[2] if c is not None else ()
        if not ta and tb and alpha == 1.0 and (c is None or (beta == 1.0 and c_shape == (units,))):
            # a Dense layer: the kernel Gluon's nn.Dense runs
            return [F.FullyConnected(x, w, c, num_hidden=units, no_bias=c is None)]
        y = F.dot(x, w, transpose_a=ta, transpose_b=tb)
        if alpha != 1.0:
            y = y * alpha
        if c is None:
            return [y]
        if beta != 1.0:
            c = c * beta
        out_shape = (x_shape[1] if ta else x_shape[0], units)
        return [broadcast_binary(ctx, "Add", y, c, out_shape, c_shape)]

    return Translated(gemm, inputs)


def _unary(fn: Callable[[Any, Any], Any]) -> Translation:
    """A translation of an operator that maps one tensor to one: ``fn(F, x)``."""

    def translate(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
        return Translated(lambda ctx, xs: [fn(ctx.F, xs[0])], [node.input[0]])

    return translate


def _leaky_relu(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    slope = float(a.get("alpha", 0.01))
    return Translated(
        lambda ctx, xs: [ctx.F.LeakyReLU(xs[0], act_type="leaky", slope=slope)], [node.input[0]]
    )


def _elu(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    slope = float(a.get("alpha", 1.0))
    return Translated(
        lambda ctx, xs: [ctx.F.LeakyReLU(xs[0], act_type="elu", slope=slope)], [node.input[0]]
    )


def _identity(node: onnx.NodeProto, a: dict[str, Any], tr: Reader) -> Translated:
    return Translated(lambda ctx, xs: [xs[0]], [node.input[0]])


#: The translation of every operator type of this family. ``Relu``, ``Sigmoid`` and
#: ``Tanh`` are ``Activation``, as Gluon's layers emit them: MXNet's oneDNN build runs
#: ``Activation`` in oneDNN on the layout the convolution left, where ``relu`` and the
#: like are plain elementwise ops that first convert it back (a 256-image LeNet-5
#: inference took 8.8 ms against Gluon's 7.5 ms with ``relu``, 7.3 ms with ``Activation``).
OPS: dict[str, Translation] = {
    **{op: _arithmetic for op in _BINARY},
    "Sum": _sum,
    "MatMul": _matmul_node,
    "Gemm": _gemm,
    "Relu": _unary(lambda F, x: F.Activation(x, act_type="relu")),
    "Sigmoid": _unary(lambda F, x: F.Activation(x, act_type="sigmoid")),
    "Tanh": _unary(lambda F, x: F.Activation(x, act_type="tanh")),
    "Exp": _unary(lambda F, x: F.exp(x)),
    "Log": _unary(lambda F, x: F.log(x)),
    "Sqrt": _unary(lambda F, x: F.sqrt(x)),
    "Abs": _unary(lambda F, x: F.abs(x)),
    "Neg": _unary(lambda F, x: F.negative(x)),
    "Reciprocal": _unary(lambda F, x: F.reciprocal(x)),
    "Floor": _unary(lambda F, x: F.floor(x)),
    "Ceil": _unary(lambda F, x: F.ceil(x)),
    "Softplus": _unary(lambda F, x: F.Activation(x, act_type="softrelu")),
    "Softsign": _unary(lambda F, x: F.Activation(x, act_type="softsign")),
    "Erf": _unary(lambda F, x: F.erf(x)),
    "LeakyRelu": _leaky_relu,
    "Elu": _elu,
    "Identity": _identity,
}
