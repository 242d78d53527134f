"""Element-wise nodes: arithmetic, activations, comparisons and logic.

They run in either layout (channels-last when an input already is), with numpy's
broadcasting, which ONNX shares from opset 7 on; Add, Sub, Mul and Div of older opsets
broadcast as their ``broadcast`` and ``axis`` attributes say.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import Any

import onnx

from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.graph.translation import NodeBuilder, NodeFn
from d5core.api import UsageError
from d5core.onnx import legacy_broadcast, legacy_broadcast_shape

__all__ = ["ArithmeticNodes"]

tf = tensorflow()


class ArithmeticNodes(NodeBuilder):
    """Translations of element-wise nodes."""

    # -- element-wise ----------------------------------------------------------------

    def op_Relu(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.nn.relu, 1)

    def op_Sigmoid(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.sigmoid, 1)

    def op_Tanh(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.tanh, 1)

    def op_Identity(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.identity, 1)

    def op_LeakyRelu(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        alpha = float(a.get("alpha", 0.01))
        return self._elementwise(node, lambda x: tf.nn.leaky_relu(x, alpha), 1)

    def _arithmetic(
        self, node: onnx.NodeProto, a: dict[str, Any], one: Callable[[Any, Any], Any]
    ) -> NodeFn:
        """Add, Sub, Mul or Div; before opset 7, ``B`` broadcast as the ``broadcast`` and
        ``axis`` attributes say (:func:`~d5core.api.legacy_broadcast_shape`)."""
        legacy = legacy_broadcast(node.op_type, self.opset, a)
        if legacy is None:
            return self._elementwise(node, one, 2)
        broadcast, axis = legacy
        where = f"node {node.name!r} ({node.op_type})"

        def legacy_fn(x: Any, y: Any) -> tuple[Any]:
            try:
                shape = legacy_broadcast_shape(
                    tuple(x.shape.as_list()),
                    tuple(y.shape.as_list()),
                    broadcast=broadcast,
                    axis=axis,
                )
            except UsageError as exc:
                raise UsageError(f"{where}: {exc}") from None
            return (one(x, tf.reshape(y, shape)),)

        return self._node(node, legacy_fn, node.input[:2])

    def op_Add(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._arithmetic(node, a, tf.add)

    def op_Sub(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._arithmetic(node, a, tf.subtract)

    def op_Mul(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._arithmetic(node, a, tf.multiply)

    def op_Div(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._arithmetic(node, a, _divide)

    def op_Sum(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, lambda *xs: reduce(tf.add, xs))

    # -- more element-wise math --------------------------------------------------------

    def _unary(self, node: onnx.NodeProto, one: Callable[[Any], Any]) -> NodeFn:
        return self._elementwise(node, one, 1)

    def op_Abs(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.abs)

    def op_Neg(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.negative)

    def op_Exp(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.exp)

    def op_Log(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.math.log)

    def op_Sqrt(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.sqrt)

    def op_Reciprocal(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.math.reciprocal)

    def op_Floor(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.floor)

    def op_Ceil(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.math.ceil)

    def op_Round(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.round)  # half to even, as ONNX rounds

    def op_Sign(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.sign)

    def op_Erf(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.math.erf)

    def op_Sin(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.sin)

    def op_Cos(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.cos)

    def op_Tan(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.tan)

    def op_Asin(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.asin)

    def op_Acos(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.acos)

    def op_Atan(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.atan)

    def op_Sinh(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.sinh)

    def op_Cosh(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.cosh)

    def op_Asinh(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.asinh)

    def op_Acosh(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.acosh)

    def op_Atanh(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.atanh)

    def op_Softplus(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.math.softplus)

    def op_Softsign(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.math.softsign)

    def op_Not(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.logical_not)

    def op_IsNaN(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.math.is_nan)

    def op_IsInf(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        negative = bool(int(a.get("detect_negative", 1)))
        positive = bool(int(a.get("detect_positive", 1)))

        def is_inf(x: Any) -> Any:
            inf = tf.math.is_inf(x)
            if negative and positive:
                return inf
            return tf.logical_and(inf, x > 0 if positive else x < 0)

        return self._unary(node, is_inf)

    # -- activations with parameters ------------------------------------------------------

    def op_Elu(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        alpha = float(a.get("alpha", 1.0))
        return self._unary(node, lambda x: tf.where(x > 0, x, alpha * tf.math.expm1(x)))

    def op_Selu(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        alpha = float(a.get("alpha", 1.67326319217681884765625))
        gamma = float(a.get("gamma", 1.05070102214813232421875))
        return self._unary(node, lambda x: gamma * tf.where(x > 0, x, alpha * tf.math.expm1(x)))

    def op_Celu(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        alpha = float(a.get("alpha", 1.0))
        return self._unary(
            node, lambda x: tf.maximum(x, 0) + tf.minimum(alpha * tf.math.expm1(x / alpha), 0)
        )

    def op_HardSigmoid(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        alpha, beta = float(a.get("alpha", 0.2)), float(a.get("beta", 0.5))
        return self._unary(node, lambda x: tf.clip_by_value(alpha * x + beta, 0.0, 1.0))

    def op_HardSwish(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, lambda x: x * tf.clip_by_value(x / 6 + 0.5, 0.0, 1.0))

    def op_ThresholdedRelu(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        alpha = float(a.get("alpha", 1.0))
        return self._unary(node, lambda x: tf.where(x > alpha, x, tf.zeros_like(x)))

    def op_Gelu(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        tanh = a.get("approximate", "none") == "tanh"
        return self._unary(node, lambda x: tf.nn.gelu(x, approximate=tanh))

    def op_Mish(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, lambda x: x * tf.tanh(tf.math.softplus(x)))

    def op_Shrink(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        bias, lambd = float(a.get("bias", 0.0)), float(a.get("lambd", 0.5))

        def shrink(x: Any) -> Any:
            low = tf.cast(x < -lambd, x.dtype) * (x + tf.cast(bias, x.dtype))
            high = tf.cast(x > lambd, x.dtype) * (x - tf.cast(bias, x.dtype))
            return low + high

        return self._unary(node, shrink)

    def op_PRelu(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, lambda x, slope: tf.where(x < 0, slope * x, x), 2)

    # -- binary and variadic ------------------------------------------------------------

    def op_Max(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, lambda *xs: reduce(tf.maximum, xs))

    def op_Min(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, lambda *xs: reduce(tf.minimum, xs))

    def op_Mean(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, lambda *xs: reduce(tf.add, xs) / len(xs))

    def op_Pow(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, _power, 2)

    def op_Mod(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        # fmod=1: the sign of the dividend (C's fmod); fmod=0: the divisor's (Python's %)
        mod = tf.truncatemod if int(a.get("fmod", 0)) else tf.math.floormod

        def one(x: Any, y: Any) -> Any:
            if x.dtype in (tf.float16, tf.bfloat16):  # no kernel: in float32
                return tf.cast(mod(tf.cast(x, tf.float32), tf.cast(y, tf.float32)), x.dtype)
            return mod(x, y)

        return self._elementwise(node, one, 2)

    def op_Equal(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.equal, 2)

    def op_Greater(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.greater, 2)

    def op_Less(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.less, 2)

    def op_GreaterOrEqual(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.greater_equal, 2)

    def op_LessOrEqual(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.less_equal, 2)

    def op_And(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.logical_and, 2)

    def op_Or(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.logical_or, 2)

    def op_Xor(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.math.logical_xor, 2)

    def op_BitShift(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        direction = a.get("direction")
        if direction not in ("LEFT", "RIGHT"):
            raise UsageError(f"attribute direction must be LEFT or RIGHT, not {direction!r}")
        left = direction == "LEFT"

        def shift(x: Any, y: Any) -> Any:
            # a count outside [0, width) shifts every bit out, as numpy saturates it
            # (TensorFlow, like C, would take it modulo the width)
            width = x.dtype.size * 8
            valid = tf.logical_and(y >= 0, y < width)
            count = tf.where(valid, y, tf.zeros_like(y))
            shifted = (tf.bitwise.left_shift if left else tf.bitwise.right_shift)(x, count)
            out = tf.zeros_like(shifted)
            if not left and not x.dtype.is_unsigned:
                out = tf.where(x < 0, tf.ones_like(shifted) * -1, out)
            return tf.where(valid, shifted, out)

        return self._elementwise(node, shift, 2)

    def op_BitwiseAnd(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.bitwise.bitwise_and, 2)

    def op_BitwiseOr(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.bitwise.bitwise_or, 2)

    def op_BitwiseXor(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.bitwise.bitwise_xor, 2)

    def op_BitwiseNot(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._unary(node, tf.bitwise.invert)

    def op_Where(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._elementwise(node, tf.where, 3)

    def op_Clip(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        if self.opset < 11:
            low, high = a.get("min"), a.get("max")

            def clip_attributes(x: Any) -> Any:
                if low is not None:
                    x = tf.maximum(x, tf.cast(low, x.dtype))
                if high is not None:
                    x = tf.minimum(x, tf.cast(high, x.dtype))
                return x

            return self._unary(node, clip_attributes)

        def clip(x: Any, low: Any = None, high: Any = None) -> Any:
            if low is not None:
                x = tf.maximum(x, low)
            if high is not None:
                x = tf.minimum(x, high)
            return x

        return self._elementwise(node, clip, 3)


def _power(x: Any, y: Any) -> Any:
    """ONNX Pow: the result has ``x``'s type, whatever ``y``'s."""
    if x.dtype == y.dtype:
        return tf.pow(x, y)
    if x.dtype.is_floating:
        return tf.pow(x, tf.cast(y, x.dtype))
    return tf.cast(tf.pow(tf.cast(x, tf.float64), tf.cast(y, tf.float64)), x.dtype)


def _divide(x: Any, y: Any) -> Any:
    """ONNX Div: true division of floating tensors; for integers the quotient truncated
    toward zero, in the inputs' type (``[7, -7] / [2, 2]`` is ``[3, -3]``)."""
    if x.dtype.is_integer:
        return tf.truncatediv(x, y)
    return tf.math.divide(x, y)
