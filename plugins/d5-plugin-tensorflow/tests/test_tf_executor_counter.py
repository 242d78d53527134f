"""Training accuracy counted in a ``tf.Variable`` (the executor's native correct counter):
it counts as ``(argmax(logits, -1) == labels).sum()`` per batch would in numpy, reads the
total back only when taken, and the trainer's native path takes it once per epoch."""

from __future__ import annotations

from typing import Any

import numpy as np
from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.correct_counter import VariableCorrectCounter

from d5core.api import Optimizer, load_dataset
from d5core.testing.executors import build_network, executor_by_name, with_loss
from d5core.testing.training import StopConditions, Trainer, make_sampler

tf = tensorflow()


def _per_batch(batches: list[tuple[np.ndarray, np.ndarray]]) -> int:
    return sum(int((np.argmax(lg, -1) == lb).sum()) for lg, lb in batches)


def _batches(sizes: list[int], classes: int = 5, seed: int = 0) -> list[tuple[Any, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        logits = rng.standard_normal((n, classes)).astype(np.float32)
        logits[0] = 0.0  # a tie: argmax takes the first index
        logits[1, 1:3] = np.nan  # NaN counts as the largest, the first one wins
        out.append((logits, rng.integers(0, classes, n)))
    return out


def test_counter_counts_as_each_batch_would() -> None:
    rng = np.random.default_rng(1)
    data = [
        *_batches([16, 16, 16, 7]),
        (rng.standard_normal((8, 5)), rng.integers(0, 5, (8, 1))),  # broadcasts, float64
        *_batches([8], classes=7),  # another class axis
        (rng.standard_normal(5).astype(np.float32), np.array(2)),  # no batch axis
    ]
    counter = VariableCorrectCounter()
    for logits, labels in data:
        counter.add(tf.constant(logits), tf.constant(labels))
    assert counter.take() == _per_batch(data)
    assert counter.take() == 0  # take resets


def test_counter_keeps_no_batch_between_steps() -> None:
    counter = VariableCorrectCounter()
    logits, labels = _batches([16])[0]
    counter.add(logits, labels)
    before = _per_batch([(logits, labels)])
    logits[:] = 0.0  # the caller may reuse its arrays at once: the count is already made
    labels[:] = 3
    assert counter.take() == before


def test_counters_are_independent_and_add_reads_nothing_back() -> None:
    first, second = VariableCorrectCounter(), VariableCorrectCounter()
    logits = tf.constant([[0.0, 1.0], [2.0, 0.0]])
    labels = tf.constant([1, 0], tf.int64)
    assert first.add(logits, labels) is None
    first.add(logits, labels)
    second.add(logits, tf.constant([0, 0], tf.int64))
    assert (first.take(), second.take()) == (4, 1)


class _NativeSGD(Optimizer):
    """Plain SGD on the executor's variables: the native path, without the tf-* ones."""

    name = "sgd-on-variables"
    native = "tensorflow"

    def bind(self, executor: Any) -> None:
        self.params = executor.native_parameters()

    def native_step(self, native_grads: Any) -> None:
        for name, grad in native_grads.items():
            self.params[name].assign_sub(self.lr * grad)


def _trainer(*, counter: bool) -> Trainer:
    train = load_dataset("synthetic_classification", "train", samples=200, features=8, classes=3)
    net = build_network("mlp", input_shape=(8,), classes=3, hidden=[16], seed=0)
    trained, loss = with_loss(net)
    executor = executor_by_name("tensorflow", trained)
    if not counter:  # the per-step count of an executor without a device counter
        executor.native_correct_counter = None
    return Trainer(
        executor, loss, _NativeSGD(lr=0.1), train, make_sampler("shuffle", len(train), 32, seed=0),
        stop=StopConditions(max_epochs=2), progress=False,
    )  # fmt: skip


def test_training_takes_the_device_count_once_per_epoch(monkeypatch) -> None:
    takes: list[int] = []
    take = VariableCorrectCounter.take

    def counted(self: VariableCorrectCounter) -> int:
        takes.append(take(self))
        return takes[-1]

    monkeypatch.setattr(VariableCorrectCounter, "take", counted)
    result = _trainer(counter=True).run()
    assert result.optimizer_path == "native" and result.steps == 14
    assert len(takes) == result.epochs == 2


def test_accuracy_counted_per_epoch_equals_the_per_step_count() -> None:
    device, per_step = _trainer(counter=True).run(), _trainer(counter=False).run()
    assert device.losses == per_step.losses
    new, old = (r.metrics["training_accuracy"] for r in (device, per_step))
    assert [e["accuracy"] for e in new["per_epoch"]] == [e["accuracy"] for e in old["per_epoch"]]
    assert 0 < new["value"] < 1


def test_counter_counts_held_batches_as_each_batch_would_across_kinds_and_the_limit(
    monkeypatch,
) -> None:
    import d5_plugin_tensorflow.correct_counter as module

    monkeypatch.setattr(module, "_HELD_ELEMENTS", 100)  # counted every few batches
    rng = np.random.default_rng(2)
    data = [
        *_batches([16, 16, 7]),
        *_batches([8, 8], classes=7),  # another class axis: the held ones are counted first
        (rng.standard_normal((8, 5)), rng.integers(0, 5, (8, 1))),  # broadcasts: at once
        *_batches([16, 3]),
    ]
    counter = VariableCorrectCounter()
    for logits, labels in data:
        counter.add(tf.constant(logits), tf.constant(labels))
    assert counter.take() == _per_batch(data)
    counter.add(tf.constant(data[0][0]), tf.constant(data[0][1]))
    assert counter.take() == _per_batch(data[:1])


def test_counter_off_the_host_counts_in_a_variable_as_each_batch_would(monkeypatch) -> None:
    import d5_plugin_tensorflow.correct_counter as module

    monkeypatch.setattr(module, "_on_host", lambda *tensors: False)  # as on a GPU
    rng = np.random.default_rng(3)
    data = [
        *_batches([16, 16, 7]),
        (rng.standard_normal((8, 5)), rng.integers(0, 5, (8, 1))),
        *_batches([8], classes=7),
    ]
    counter = VariableCorrectCounter()
    for logits, labels in data:
        counter.add(tf.constant(logits), tf.constant(labels))
    assert counter.take() == _per_batch(data)
    assert counter.take() == 0
