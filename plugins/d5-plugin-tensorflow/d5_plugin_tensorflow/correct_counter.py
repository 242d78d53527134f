"""Correct predictions counted where the logits are, read back once per epoch."""

from __future__ import annotations

from typing import Any

import numpy as np

from d5_plugin_tensorflow._tf import tensorflow

__all__ = ["VariableCorrectCounter"]

tf = tensorflow()


def _add_correct(total: Any, logits: Any, labels: Any) -> None:
    """``total += sum(argmax(logits, -1) == labels)``, in one compiled call.

    NaN counts as the largest logit, as in numpy and torch (TensorFlow's argmax would
    skip it).
    """
    if logits.dtype.is_floating:
        logits = tf.where(tf.math.is_nan(logits), tf.constant(np.inf, logits.dtype), logits)
    predicted = tf.argmax(logits, axis=-1)
    hits = tf.equal(predicted, tf.cast(labels, tf.int64))
    total.assign_add(tf.reduce_sum(tf.cast(hits, tf.int64)))


class VariableCorrectCounter:
    """Counts correct predictions in a ``tf.Variable``; one host read per :meth:`take`.

    Each :meth:`add` runs one compiled function (argmax, compare, sum, ``assign_add``)
    that adds the batch's count to the variable; no value comes back to Python. The
    function is traced once per dtype and rank of its inputs (any batch size) and called
    through its concrete function, which skips ``tf.function``'s matching of arguments
    on every call (hundreds of µs a step on a small network). The executor's
    :meth:`~d5_plugin_tensorflow.executor.TensorFlowExecutor.native_correct_counter`
    hands one out for the trainer's native path.
    """

    __slots__ = ("_add", "_concrete", "_total")

    def __init__(self) -> None:
        total = self._total = tf.Variable(0, dtype=tf.int64, trainable=False)
        self._add = tf.function(
            lambda logits, labels: _add_correct(total, logits, labels), autograph=False
        )
        self._concrete: dict[tuple[Any, ...], Any] = {}

    def add(self, logits: Any, labels: Any) -> None:
        """Add the count of rows where ``argmax(logits, -1) == labels`` (no host sync);
        ``labels`` broadcast against the predictions as in numpy."""
        logits, labels = tf.convert_to_tensor(logits), tf.convert_to_tensor(labels)
        key = (logits.dtype, logits.shape.rank, labels.dtype, labels.shape.rank)
        fn = self._concrete.get(key)
        if fn is None:
            fn = self._concrete[key] = self._add.get_concrete_function(
                tf.TensorSpec([None] * logits.shape.rank, logits.dtype),
                tf.TensorSpec([None] * labels.shape.rank, labels.dtype),
            )
        fn(logits, labels)

    def take(self) -> int:
        """Everything added since the last take, as an int (the one read); resets."""
        value = int(self._total.numpy())
        self._total.assign(0)
        return value
