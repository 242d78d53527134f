"""``BatchNormalization`` and ``Dropout`` (with the reference's Dropout mask)."""

from __future__ import annotations

from typing import Any

from d5_plugin_tensorflow.ops._base import Layout, Plan, Signature, TFOperator, tf
from d5_plugin_tensorflow.ops._spatial import channels_first_name
from d5core.onnx import BatchNormalizationRules, DropoutRules, reference_mask

__all__ = ["BatchNormalization", "Dropout", "reference_mask"]


class BatchNormalization(BatchNormalizationRules, TFOperator):
    """ONNX ``BatchNormalization`` (opset 15), in ONNX's own channels-first layout.

    ``tf.nn.batch_normalization`` with the statistics given (inference) or with the
    batch's mean and biased variance from ``tf.nn.moments`` (training mode, which also
    returns ``running = input * momentum + batch * (1 - momentum)`` for both). The
    per-channel inputs are given as ``(1, C, 1, ...)``, reshaped outside the timed call,
    so that they broadcast against ``X``. The gradient tape runs through the same graph:
    the gradients of the running outputs reach ``X`` and the statistics inputs too.
    """

    def layout_of(self, sig: Signature) -> str:
        x = sig.shapes[0]
        assert x is not None
        return channels_first_name(len(x))

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        shape = sig.shapes[0]
        assert shape is not None
        channels = shape[1]
        per_channel = Layout.reshaped((channels,), (1, channels) + (1,) * (len(shape) - 2))
        layouts = (None, *([per_channel] * 4))
        eps, momentum, keep = self.epsilon, self.momentum, 1.0 - self.momentum
        normalize, moments = tf.nn.batch_normalization, tf.nn.moments
        axes = [0, *range(2, len(shape))]
        if not self.training:

            def infer(x: Any, s: Any, b: Any, mu: Any, var: Any) -> tuple[Any]:
                return (normalize(x, mu, var, b, s, eps),)

            return Plan(infer, layouts, (None,))

        def train(x: Any, s: Any, b: Any, mu: Any, var: Any) -> tuple[Any, ...]:
            m, v = moments(x, axes, keepdims=True)
            y = normalize(x, m, v, b, s, eps)
            return y, mu * momentum + m * keep, var * momentum + v * keep

        return Plan(train, layouts, (None, per_channel, per_channel))


class Dropout(DropoutRules, TFOperator):
    """ONNX ``Dropout`` (opset 13), with its ``output`` and boolean ``mask``.

    ``ratio`` and ``training_mode`` are optional inputs (an attribute of the same name is
    read when the input is absent). In training mode the mask is the reference's
    (:func:`reference_mask`: numpy's generator seeded with the ``seed`` attribute,
    default 0), drawn when the graph is built, so ``forward`` is deterministic and
    validates against the numpy reference element by element; the torch backend draws
    the same one. The graph multiplies by the mask scaled by ``1 / (1 - ratio)``: the
    timed region holds the masking, not the drawing of the mask (numpy's work, not
    TensorFlow's). Inference returns ``tf.identity`` of the input and a constant mask.
    """

    def build(self, sig: Signature, *, for_grad: bool) -> Plan:
        ratio, training = self._mode(sig)
        shape = sig.shapes[0]
        assert shape is not None
        if not training or ratio == 0.0:
            keep_all = tf.ones(shape, dtype=tf.bool)
            identity = tf.identity
            return Plan(lambda x: (identity(x), keep_all))
        keep = reference_mask(shape, ratio, self.seed)
        mask = tf.constant(keep)
        scaled = tf.constant(keep / (1.0 - ratio), dtype=sig.tf_dtype)
        return Plan(lambda x: (x * scaled, mask))
