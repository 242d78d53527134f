"""``BatchNormalization`` and ``Dropout`` (with the reference's Dropout mask)."""

from __future__ import annotations

from typing import Any

from d5_plugin_mxnet.ops._base import MXNetOperator, Plan, Signature, kernel_shape, mx
from d5_plugin_mxnet.ops._spatial import channel_shape
from d5core.onnx import BatchNormalizationRules, DropoutRules, reference_mask

__all__ = ["BatchNormalization", "Dropout", "reference_mask"]


class BatchNormalization(BatchNormalizationRules, MXNetOperator):
    """ONNX ``BatchNormalization`` (opset 15).

    The forward pass is ``mx.nd.BatchNorm`` with ``use_global_stats`` (it normalizes
    with the statistics it is given and never updates them): in inference mode those
    are ``input_mean`` and ``input_var``; in training mode the batch's mean and biased
    variance from ``mx.nd.moments``, and the running statistics ``input * momentum +
    batch * (1 - momentum)`` are returned too. The differentiated graph is the same
    formula written with broadcasting operators, so that gradients reach every input
    (MXNet's BatchNorm gives none to the statistics it is handed).
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        shape = sig.shapes[0]
        assert shape is not None
        eps, momentum, keep = self.epsilon, self.momentum, 1.0 - self.momentum
        axes = (0, *range(2, len(shape)))
        channel = channel_shape(len(shape), shape[1])
        nd, training = mx.nd, self.training
        if for_grad:

            def graph(x: Any, s: Any, b: Any, mu: Any, var: Any) -> tuple[Any, ...]:
                if training:
                    m = nd.mean(x, axis=axes, keepdims=True)
                    v = nd.mean(nd.square(nd.broadcast_sub(x, m)), axis=axes, keepdims=True)
                else:
                    m, v = nd.reshape(mu, shape=channel), nd.reshape(var, shape=channel)
                factor = nd.broadcast_mul(nd.reshape(s, shape=channel), nd.rsqrt(v + eps))
                y = nd.broadcast_add(
                    nd.broadcast_mul(nd.broadcast_sub(x, m), factor), nd.reshape(b, shape=channel)
                )
                if not training:
                    return (y,)
                m1, v1 = nd.reshape(m, shape=(-1,)), nd.reshape(v, shape=(-1,))
                return y, mu * momentum + m1 * keep, var * momentum + v1 * keep

            return Plan(graph)
        norm = nd.BatchNorm
        options = {"eps": eps, "fix_gamma": False, "use_global_stats": True}
        if self.training:

            def train(x: Any, s: Any, b: Any, mu: Any, var: Any) -> tuple[Any, ...]:
                m, v = nd.moments(x, axes=axes)
                y = norm(x, s, b, m, v, **options)
                return y, mu * momentum + m * keep, var * momentum + v * keep

            return Plan(train)
        return Plan(lambda x, s, b, mu, var: (norm(x, s, b, mu, var, **options),))


class Dropout(DropoutRules, MXNetOperator):
    """ONNX ``Dropout`` (opset 13), with its ``output`` and boolean ``mask``.

    ``ratio`` and ``training_mode`` are optional inputs (an attribute of the same name is
    read when the input is absent). In training mode the mask is the reference's
    (:func:`reference_mask`: numpy's generator seeded with the ``seed`` attribute,
    default 0), drawn when the kernel is built, so ``forward`` is deterministic and
    validates against the numpy reference element by element. The kernel multiplies by
    the mask scaled by ``1 / (1 - ratio)``: the timed call holds the masking, not the
    drawing of the mask (MXNet's own Dropout draws from its own generator).
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        ratio, training = self._mode(sig)
        shape = sig.shapes[0]
        assert shape is not None
        held = kernel_shape(shape)
        shapes = {} if shape else {0: (), 1: ()}
        dtypes = {1: "bool"}
        if not training or ratio == 0.0:
            keep_all = mx.nd.ones(held, dtype=sig.dtype)
            if for_grad:
                copy = mx.nd.identity
                return Plan(lambda x: (copy(x), keep_all), shapes, dtypes)
            return Plan(lambda x: (x, keep_all), shapes, dtypes)
        keep = reference_mask(shape, ratio, self.seed)
        mask = mx.nd.array(keep.reshape(held), dtype=sig.dtype)
        scaled = mx.nd.array((keep / (1.0 - ratio)).reshape(held), dtype=sig.dtype)
        return Plan(lambda x: (x * scaled, mask), shapes, dtypes)
