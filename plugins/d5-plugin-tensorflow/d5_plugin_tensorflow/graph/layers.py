"""Nodes of neural-network layers: matrix products, convolution, pooling,
normalization, Dropout, softmax and losses."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import reduce
from typing import Any

import numpy as np
import onnx

from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.graph import windows as win
from d5_plugin_tensorflow.graph.reductions import check_reduction, negative_log_likelihood
from d5_plugin_tensorflow.graph.translation import ChannelsLast, Fn, NodeBuilder, NodeFn, rank_of
from d5core.api import UsageError

__all__ = ["LayerNodes", "reference_mask"]

tf = tensorflow()


def reference_mask(shape: Sequence[int], ratio: float, seed: int) -> np.ndarray:
    """The keep mask of a training-mode Dropout as the numpy reference draws it:
    ``numpy.random.default_rng(seed).random(shape) >= ratio``."""
    return np.random.default_rng(seed).random(tuple(shape)) >= ratio


class LayerNodes(NodeBuilder):
    """Translations of layer nodes."""

    # -- linear algebra --------------------------------------------------------------

    def op_MatMul(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        def matmul(x: Any, y: Any) -> tuple[Any]:
            vx, vy = rank_of(x) == 1, rank_of(y) == 1
            z = tf.linalg.matmul(x[None, :] if vx else x, y[:, None] if vy else y)
            if vy:
                z = z[..., 0]
            if vx:
                z = z[..., 0, :] if not vy else z[..., 0]
            return (z,)

        return self._node(node, matmul, node.input[:2])

    def op_Gemm(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        alpha, beta = float(a.get("alpha", 1.0)), float(a.get("beta", 1.0))
        ta, tb = bool(int(a.get("transA", 0))), bool(int(a.get("transB", 0)))

        def gemm(x: Any, w: Any, c: Any | None = None) -> tuple[Any]:
            y = tf.linalg.matmul(x, w, transpose_a=ta, transpose_b=tb)
            if alpha != 1.0:
                y = y * alpha
            if c is None:
                return (y,)
            if beta != 1.0:
                c = c * beta
            columns = y.shape[-1]
            rank = rank_of(c)
            per_column = c.shape.num_elements() == columns and columns != 1
            if per_column and (rank == 1 or (rank == 2 and c.shape[0] == 1)):
                # a bias per column: BiasAdd, which TensorFlow fuses with the product (its
                # fusion of an Add of a (1, N) tensor fails when A is transposed)
                return (tf.nn.bias_add(y, c if rank == 1 else tf.reshape(c, [columns])),)
            return (y + c,)

        return self._node(node, gemm, [i for i in node.input[:3]])

    # -- convolution and pooling ------------------------------------------------------

    def op_Conv(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        group = int(a.get("group", 1))
        tf_kernel = self._tf_kernel(node)

        def conv(x: Any, w: Any, b: Any | None = None) -> tuple[Any]:
            given = w.shape.as_list()
            kernel = list(a.get("kernel_shape") or (given[:-2] if tf_kernel else given[2:]))
            geo = win.windows(
                "Conv", x.shape.as_list()[1:-1], kernel, strides=a.get("strides"),
                dilations=a.get("dilations"), pads=a.get("pads"),
                auto_pad=a.get("auto_pad", "NOTSET"),
            )  # fmt: skip
            return (win.conv(x, w, b, geo, group, tf_kernel=tf_kernel),)

        return self._layout_bound(node, conv, [i for i in node.input[:3]])

    def op_ConvTranspose(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        group = int(a.get("group", 1))
        tf_kernel = self._tf_kernel(node)

        def convt(x: Any, w: Any, b: Any | None = None) -> tuple[Any]:
            spatial = x.shape.as_list()[1:-1]
            n = len(spatial)
            given = w.shape.as_list()
            kernel = list(a.get("kernel_shape") or (given[:-2] if tf_kernel else given[2:]))
            strides = list(a.get("strides") or [1] * n)
            dilations = list(a.get("dilations") or [1] * n)
            begins, out = win.conv_transpose_pads(
                spatial, kernel, strides=strides, dilations=dilations,
                output_padding=list(a.get("output_padding") or [0] * n), pads=a.get("pads"),
                output_shape=a.get("output_shape"), auto_pad=a.get("auto_pad", "NOTSET"),
            )  # fmt: skip
            y = win.conv_transpose(
                x, w, b, strides=strides, dilations=dilations, begins=begins, out=out,
                group=group, tf_kernel=tf_kernel,
            )  # fmt: skip
            return (y,)

        return self._layout_bound(node, convt, [i for i in node.input[:3]])

    def _tf_kernel(self, node: onnx.NodeProto) -> bool:
        """Whether the node's weights (input 1) are kept in TensorFlow's kernel layout."""
        return len(node.input) > 1 and node.input[1] in self.tf_kernels

    def op_MaxPool(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        if len([o for o in node.output if o]) > 1:
            raise UsageError(
                f"node {node.name!r} (MaxPool): the Indices output is not supported by the "
                "tensorflow executor"
            )
        ceil = bool(int(a.get("ceil_mode", 0)))
        select = self.training and self.xla

        def maxpool(x: Any) -> tuple[Any]:
            geo = self._pool_windows("MaxPool", x, a, ceil)
            return (win.max_pool(x, geo, select=select),)

        return self._layout_bound(node, maxpool, [node.input[0]])

    @staticmethod
    def _pool_windows(op_type: str, x: Any, a: dict[str, Any], ceil: bool) -> win.Windows:
        if a.get("kernel_shape") is None:
            raise UsageError(f"{op_type} needs the attribute kernel_shape")
        return win.windows(
            op_type, x.shape.as_list()[1:-1], list(a["kernel_shape"]), strides=a.get("strides"),
            dilations=a.get("dilations"), pads=a.get("pads"),
            auto_pad=a.get("auto_pad", "NOTSET"), ceil_mode=ceil,
        )  # fmt: skip

    def op_AveragePool(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        ceil = bool(int(a.get("ceil_mode", 0)))
        include = bool(int(a.get("count_include_pad", 0)))

        def avgpool(x: Any) -> tuple[Any]:
            geo = self._pool_windows("AveragePool", x, a, ceil)
            return (win.average_pool(x, geo, include_pad=include),)

        return self._layout_bound(node, avgpool, [node.input[0]])

    def op_GlobalAveragePool(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        def onnx_fn(x: Any) -> tuple[Any]:
            return (tf.reduce_mean(x, axis=list(range(2, rank_of(x))), keepdims=True),)

        def cl_fn(x: Any) -> tuple[Any]:
            return (tf.reduce_mean(x, axis=list(range(1, rank_of(x) - 1)), keepdims=True),)

        return self._node(node, onnx_fn, [node.input[0]], cl=ChannelsLast(cl_fn, (0,)))

    # -- normalization ----------------------------------------------------------------

    def op_BatchNormalization(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        if not int(a.get("spatial", 1)):  # opset < 9: statistics per element, not per channel
            raise UsageError(
                f"node {node.name!r} (BatchNormalization): spatial=0 (per-element "
                "statistics) is not supported by the tensorflow executor"
            )
        if len([o for o in node.output if o]) > 1:
            raise UsageError(
                f"node {node.name!r} (BatchNormalization): the running-statistic outputs are "
                "not supported by the tensorflow executor (it keeps them itself, see "
                "apply_running_stats)"
            )
        eps, m = float(a.get("epsilon", 1e-5)), float(a.get("momentum", 0.9))
        names = list(node.input[:5])
        outputs = list(node.output[:1])
        xla = self.xla

        def make(channels_last: bool) -> Fn:
            def shaped(v: Any, x: Any) -> Any:
                if channels_last:
                    return v
                return tf.reshape(v, [1, -1] + [1] * (rank_of(x) - 2))

            def infer(x: Any, s: Any, b: Any, mu: Any, var: Any) -> tuple[Any]:
                scale = s * tf.math.rsqrt(var + eps)
                return (x * shaped(scale, x) + shaped(b - mu * scale, x),)

            def train(x: Any, s: Any, b: Any, mu: Any, var: Any) -> tuple[Any, ...]:
                rank = rank_of(x)
                if channels_last and not xla and _fusable(x, s, b):
                    return fused_train(x, s, b, mu, var)
                axes = list(range(rank - 1)) if channels_last else [0, *range(2, rank)]
                bmean, bvar = tf.nn.moments(x, axes)
                # as tf.nn.batch_normalization computes it (Keras's layers use it)
                inv = s * tf.math.rsqrt(bvar + eps)
                y = x * shaped(inv, x) + shaped(b - bmean * inv, x)
                new_mean = tf.stop_gradient(m * mu + (1 - m) * bmean)
                new_var = tf.stop_gradient(m * var + (1 - m) * bvar)
                return y, new_mean, new_var

            return train if self.training else infer

        def fused_train(x: Any, s: Any, b: Any, mu: Any, var: Any) -> tuple[Any, ...]:
            # TensorFlow's fused kernel, forward and gradient each one op (FusedBatchNormV3
            # and its grad), normalising with the biased batch variance as ONNX does; it
            # returns the unbiased one for the running statistics, rescaled to ONNX's
            n = x.shape[0] * x.shape[1] * x.shape[2]
            y, bmean, bvar = tf.compat.v1.nn.fused_batch_norm(
                x, s, b, epsilon=eps, data_format="NHWC", is_training=True
            )
            new_mean = tf.stop_gradient(m * mu + (1 - m) * bmean)
            new_var = tf.stop_gradient(m * var + (1 - m) * bvar * ((n - 1) / n))
            return y, new_mean, new_var

        fn = NodeFn(
            node.name, node.op_type, make(False), names, outputs,
            cl=ChannelsLast(make(True), (0,)),
            stats=(names[3], names[4]) if self.training else (),
        )  # fmt: skip
        return fn

    def op_LRN(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        size = int(a["size"])
        alpha, beta = float(a.get("alpha", 1e-4)), float(a.get("beta", 0.75))
        bias = float(a.get("bias", 1.0))
        lo = (size - 1) // 2
        hi = size - 1 - lo

        def lrn(x: Any, axis: int) -> Any:
            if axis == rank_of(x) - 1 and lo == hi and x.dtype == tf.float32:
                return tf.nn.local_response_normalization(x, lo, bias, alpha / size, beta)
            sq = tf.square(x)
            widths = [[0, 0]] * rank_of(x)
            widths[axis] = [lo, hi]
            padded = tf.pad(sq, widths)
            channels = x.shape[axis]
            taps = [padded[(slice(None),) * axis + (slice(i, i + channels),)] for i in range(size)]
            total = reduce(tf.add, taps)
            return x * tf.pow(bias + (alpha / size) * total, -beta)

        return self._node(
            node, lambda x: (lrn(x, 1),), [node.input[0]],
            cl=ChannelsLast(lambda x: (lrn(x, rank_of(x) - 1),), (0,)),
        )  # fmt: skip

    def op_Dropout(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        with_mask = len(node.output) > 1 and bool(node.output[1])
        seed = int(a.get("seed", 0))
        training = self.training
        where = f"node {node.name!r} (Dropout)"

        def ratio_of(given: np.ndarray | None) -> float:
            ratio = float(a.get("ratio", 0.5)) if given is None else float(given.reshape(-1)[0])
            if not 0.0 <= ratio < 1.0:
                raise UsageError(f"{where}: ratio must lie in [0, 1), not {ratio}")
            return ratio

        if len(node.input) < 2 or not node.input[1]:
            ratio_of(None)
        elif node.input[1] in self.constants:
            ratio_of(np.asarray(self.constants[node.input[1]]))

        def make(channels_last: bool) -> Fn:
            def dropout(
                x: Any, ratio_in: np.ndarray | None = None, _mode: Any = None
            ) -> tuple[Any, ...]:
                ratio = ratio_of(None if ratio_in is None else np.asarray(ratio_in))
                if not training or ratio == 0.0:
                    if not with_mask:
                        return (tf.identity(x),)
                    return tf.identity(x), tf.ones_like(x, dtype=tf.bool)
                shape = x.shape.as_list()
                rank = len(shape)
                onnx_shape = (
                    [shape[0], shape[-1], *shape[1:-1]] if channels_last and rank >= 3 else shape
                )
                keep = reference_mask(onnx_shape, ratio, seed)
                if channels_last and rank >= 3:
                    keep = np.transpose(keep, [0, *range(2, rank), 1])
                scaled = tf.constant(keep / (1.0 - ratio), dtype=x.dtype)
                y = x * scaled
                return (y, tf.constant(keep)) if with_mask else (y,)

            return dropout

        names = list(node.input[:3])
        static = frozenset(i for i in (1, 2) if i < len(names) and names[i])
        return NodeFn(
            node.name, node.op_type, make(False), names, list(node.output), static=static,
            cl=ChannelsLast(make(True), (0,)),
        )  # fmt: skip

    def _softmax(self, node: onnx.NodeProto, a: dict[str, Any], one: Callable[..., Any]) -> NodeFn:
        if self.opset >= 13:
            axis = int(a.get("axis", -1))
            return self._node(node, lambda x: (one(x, axis=axis),), [node.input[0]])
        axis = int(a.get("axis", 1))

        def coerced(x: Any) -> tuple[Any]:
            shape = x.shape.as_list()
            ax = axis % len(shape) if shape else 0
            flat = tf.reshape(x, [math.prod(shape[:ax]), -1])
            return (tf.reshape(one(flat, axis=1), shape),)

        return self._node(node, coerced, [node.input[0]])

    def op_Softmax(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._softmax(node, a, tf.nn.softmax)

    def op_LogSoftmax(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        return self._softmax(node, a, tf.nn.log_softmax)

    # -- losses ---------------------------------------------------------------------------

    def op_SoftmaxCrossEntropyLoss(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        reduction = check_reduction(a.get("reduction", "mean"))
        ignore = a.get("ignore_index")
        index = None if ignore is None else int(ignore)
        want_log_prob = len(node.output) > 1 and bool(node.output[1])

        def sce(x: Any, labels: Any, w: Any | None = None) -> tuple[Any, ...]:
            logp = tf.nn.log_softmax(x, axis=1)
            loss = negative_log_likelihood(logp, labels, w, index, reduction)
            return (loss, logp) if want_log_prob else (loss,)

        return self._node(node, sce, node.input[:3])

    def op_MeanSquaredError(self, node: onnx.NodeProto, a: dict[str, Any]) -> NodeFn:
        reduction = a.get("reduction", "mean")
        reducers = {"mean": tf.reduce_mean, "sum": tf.reduce_sum, "none": lambda v: v}
        if reduction not in reducers:
            raise UsageError(f"reduction must be none, sum or mean, not {reduction!r}")
        return self._node(
            node, lambda p, t: (reducers[reduction](tf.square(p - t)),), node.input[:2]
        )


#: Values per channel (batch times spatial size) from which the fused kernel is used. On
#: the project's machine its forward and gradient took 0.78-0.92x the composed ops' time
#: from 2048 values per channel up, and 1.12-1.15x below 1024 (resnet20's train step at
#: batch 1 was 1.24x Keras's with it everywhere).
FUSED_MIN_VALUES = 2048


def _fusable(x: Any, scale: Any, bias: Any) -> bool:
    """Whether TensorFlow's fused batch normalization takes ``x`` (channels last) and pays:
    4-D float32 with a static shape of at least :data:`FUSED_MIN_VALUES` values per
    channel, float32 scale and bias."""
    shape = x.shape
    if len(shape) != 4 or any(d is None for d in shape[:3]) or x.dtype != tf.float32:
        return False
    if scale.dtype != tf.float32 or bias.dtype != tf.float32:
        return False
    return int(shape[0]) * int(shape[1]) * int(shape[2]) >= FUSED_MIN_VALUES
