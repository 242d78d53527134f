"""Correct predictions counted where the logits are, read back once per epoch."""

from __future__ import annotations

from typing import Any

import numpy as np

from d5_plugin_tensorflow._tf import tensorflow

__all__ = ["VariableCorrectCounter"]

tf = tensorflow()

#: Logit elements a counter holds at most before it counts them (16 MiB of float32).
_HELD_ELEMENTS = 1 << 22


def _add_correct(total: Any, logits: Any, labels: Any) -> None:
    """``total += sum(argmax(logits, -1) == labels)``, in eager ops on the device.

    NaN counts as the largest logit, as in numpy and torch (TensorFlow's argmax would
    skip it).
    """
    if logits.dtype.is_floating:
        logits = tf.where(tf.math.is_nan(logits), tf.constant(np.inf, logits.dtype), logits)
    predicted = tf.argmax(logits, axis=-1)
    hits = tf.equal(predicted, tf.cast(labels, tf.int64))
    total.assign_add(tf.reduce_sum(tf.cast(hits, tf.int64)))


def _host_correct(logits: Any, labels: Any) -> int:
    """``sum(argmax(logits, -1) == labels)`` in numpy, for tensors in host memory (no
    TensorFlow kernel runs, so none is created on first use: 15 ms of eager kernels).
    numpy's argmax takes the first NaN as the largest, as the reference does."""
    scores = np.asarray(logits)
    if scores.dtype.kind not in "fiub":  # bfloat16 (ml_dtypes): float32 holds it exactly
        scores = scores.astype(np.float32)
    predicted = np.argmax(scores, axis=-1)
    return int(np.count_nonzero(predicted == np.asarray(labels)))


def _on_host(*tensors: Any) -> bool:
    """Whether every tensor lives in host memory (on a CPU device)."""
    return all(t.device.endswith("CPU:0") for t in tensors)


def _batch_of(logits: Any, labels: Any) -> tuple[Any, ...] | None:
    """What batches must share to be counted together (concatenated along the batch
    axis): ``(dtype, classes, label dtype)`` for logits ``(N, C)`` and labels ``(N,)``;
    ``None`` for any other shapes (broadcasting labels, no batch axis)."""
    if logits.shape.rank != 2 or labels.shape.rank != 1 or logits.shape[0] != labels.shape[0]:
        return None
    return (logits.dtype, logits.shape[1], labels.dtype)


class VariableCorrectCounter:
    """Counts correct predictions where the logits are; one read per :meth:`take`.

    :meth:`add` keeps the batch's logits and labels (TensorFlow tensors are immutable,
    so keeping them costs no copy and no op) and counts what it holds in one go: when
    :meth:`take` is called, when a batch of another kind comes, or when it holds more
    than ``_HELD_ELEMENTS`` logits. So a step runs no TensorFlow op and nothing is
    traced: a ``tf.function`` here cost 15-65 ms of tracing on its first step, more than
    the counting of a 90-step digits run. Tensors on a CPU device (host memory) are
    counted in numpy; elsewhere (a GPU) by eager TensorFlow ops adding to a
    ``tf.Variable`` on the device, read back by :meth:`take` only. Batches that cannot
    be concatenated (labels that broadcast, logits without a batch axis) and numpy
    arrays (which the caller may reuse) are counted at once. The executor's
    :meth:`~d5_plugin_tensorflow.executor.TensorFlowExecutor.native_correct_counter`
    hands one out for the trainer's native path.
    """

    __slots__ = ("_device", "_held", "_host", "_kind", "_size", "_total")

    def __init__(self) -> None:
        self._total: Any = None  # the device's count: a tf.Variable, made on first use
        self._device = False  # whether the variable holds a count not taken yet
        self._host = 0
        self._held: list[tuple[Any, Any]] = []
        self._kind: tuple[Any, ...] | None = None
        self._size = 0

    def add(self, logits: Any, labels: Any) -> None:
        """Add the count of rows where ``argmax(logits, -1) == labels`` (no host sync);
        ``labels`` broadcast against the predictions as in numpy."""
        kept = isinstance(logits, tf.Tensor) and isinstance(labels, tf.Tensor)
        logits, labels = tf.convert_to_tensor(logits), tf.convert_to_tensor(labels)
        kind = _batch_of(logits, labels) if kept else None
        if kind is None or kind != self._kind:
            self._count()
        if kind is None:
            self._count_batch(logits, labels)
            return
        self._kind = kind
        self._held.append((logits, labels))
        self._size += int(logits.shape.num_elements() or 0)
        if self._size >= _HELD_ELEMENTS:
            self._count()

    def _count_batch(self, logits: Any, labels: Any) -> None:
        """Count one batch: in numpy on the host, else into the device's variable."""
        if _on_host(logits, labels):
            self._host += _host_correct(logits, labels)
            return
        if self._total is None:
            with tf.device(logits.device):
                self._total = tf.Variable(0, dtype=tf.int64, trainable=False)
        _add_correct(self._total, logits, labels)
        self._device = True

    def _count(self) -> None:
        """Count the held batches and let them go."""
        held = self._held
        if len(held) == 1:
            self._count_batch(*held[0])
        elif held and _on_host(*(t for pair in held for t in pair)):
            self._host += _host_correct(
                np.concatenate([h[0].numpy() for h in held]),
                np.concatenate([h[1].numpy() for h in held]),
            )
        elif held:
            self._count_batch(
                tf.concat([h[0] for h in held], 0), tf.concat([h[1] for h in held], 0)
            )
        self._held, self._kind, self._size = [], None, 0

    def take(self) -> int:
        """Everything added since the last take, as an int (the one read); resets."""
        self._count()
        value, self._host = self._host, 0
        if self._device:
            value += int(self._total.numpy())
            self._total.assign(0)
            self._device = False
        return value
