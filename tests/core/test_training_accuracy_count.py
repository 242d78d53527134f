"""The trainer's native path counts training accuracy once per epoch (issue 12, item 6).

An executor with ``native_correct_counter`` is handed each step's logits and labels and
asked for the count once per epoch; one without it is counted every step, as before.
The executor here is a small numpy stand-in for a framework's (numpy arrays have the
``item``, ``argmax`` and ``sum`` the native path uses), so no plugin is needed.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from d5core.bus import TRAIN_EPOCH, TRAIN_STEP, Event, MetricBus
from d5core.metrics import LossCurve, Throughput
from d5core.training.samplers import make_sampler
from d5core.training.trainer import StopConditions, Trainer

SIZE, BATCH, FEATURES, CLASSES = 50, 8, 4, 3  # 7 steps per epoch, the last of 2 samples


class _Info:
    def __init__(self, name: str) -> None:
        self.name = name


class _Network:
    inputs: ClassVar[list[_Info]] = [_Info("x"), _Info("labels")]
    outputs: ClassVar[list[_Info]] = [_Info("logits"), _Info("loss")]


class _Log:
    """What the counter was asked, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []


class _Counter:
    """A counter in the shape of :class:`d5core.training.trainer.CorrectCounter`."""

    def __init__(self, log: _Log) -> None:
        self.log = log
        self.held: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, logits: np.ndarray, labels: np.ndarray) -> None:
        self.log.calls.append("add")
        self.held.append((logits, labels))

    def take(self) -> int:
        self.log.calls.append("take")
        held, self.held = self.held, []
        return int(sum(int(np.sum(lg.argmax(-1) == lb)) for lg, lb in held))


class _Logits(np.ndarray):
    """Logits that count the argmaxes taken of them (class-wide)."""

    argmaxes = 0

    def argmax(self, *args: Any, **kwargs: Any) -> Any:
        _Logits.argmaxes += 1
        return np.asarray(self).argmax(*args, **kwargs)


class _Loss(np.ndarray):
    """A loss with torch's ``numel`` too (earlier trainers asked for it)."""

    def numel(self) -> int:
        return int(self.size)


class _Executor:
    """Linear softmax regression on numpy arrays, with the native training API."""

    name = "fake"
    network = _Network()

    def __init__(self, *, counter: bool) -> None:
        self.w = np.random.default_rng(0).normal(size=(FEATURES, CLASSES))
        self.log = _Log()
        if counter:
            self.native_correct_counter = lambda: _Counter(self.log)

    def to_native(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(feeds)

    def native_parameters(self) -> dict[str, np.ndarray]:
        return {"w": self.w}

    def native_train_step(
        self, feeds: dict[str, np.ndarray], loss: str
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        x, y = feeds["x"], feeds["labels"]
        logits = x @ self.w
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        value = -np.mean(np.log(p[np.arange(len(y)), y]))
        p[np.arange(len(y)), y] -= 1.0
        outputs = {"logits": logits.view(_Logits), loss: np.array([value]).view(_Loss)}
        return outputs, {"w": x.T @ p / len(y)}


class _Optimizer:
    native = "fake"
    lr = 0.5

    def bind(self, executor: _Executor) -> None:
        self.executor = executor

    def native_step(self, grads: dict[str, np.ndarray]) -> None:
        self.executor.w -= self.lr * grads["w"]

    def step(self, params: Any, grads: Any) -> None:
        raise AssertionError("the native path never steps numpy arrays")


class _Data:
    def __init__(self) -> None:
        rng = np.random.default_rng(1)
        self.x = rng.normal(size=(SIZE, FEATURES))
        self.y = (self.x[:, 0] > 0).astype(np.int64) + (self.x[:, 1] > 1)

    def __len__(self) -> int:
        return SIZE

    def batch(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.x[indices], self.y[indices]


def _run(executor: _Executor, **options: Any) -> tuple[Any, list[Event], list[Event]]:
    bus = MetricBus()
    steps: list[Event] = []
    epochs: list[Event] = []
    bus.subscribe(f"{TRAIN_STEP}.end", steps.append)
    bus.subscribe(f"{TRAIN_EPOCH}.end", epochs.append)
    options.setdefault("stop", StopConditions(max_epochs=2))
    trainer = Trainer(
        executor, "loss", _Optimizer(), _Data(), make_sampler("shuffle", SIZE, BATCH, seed=0),
        bus=bus, progress=False, **options,
    )  # fmt: skip
    assert trainer.optimizer_path == "native"
    return trainer.run(), steps, epochs


def test_the_counter_is_read_once_per_epoch_and_gives_the_per_step_accuracy():
    executor = _Executor(counter=True)
    counted, steps, epochs = _run(executor)
    per_step, old_steps, old_epochs = _run(_Executor(counter=False))
    assert counted.losses == per_step.losses
    assert executor.log.calls == (["add"] * 7 + ["take"]) * 2
    # the epoch's end carries the count, the steps none; without a counter, the steps do
    assert all("correct" not in e.payload for e in steps)
    assert [(e.payload["correct"], e.payload["count"]) for e in epochs] == [
        (sum(e.payload["correct"] for e in old_steps[i * 7 : (i + 1) * 7]), SIZE) for i in range(2)
    ]
    assert all("correct" not in e.payload for e in old_epochs)
    new, old = (r.metrics["training_accuracy"] for r in (counted, per_step))
    assert [e["steps"] for e in new["per_epoch"]] == [e["steps"] for e in old["per_epoch"]]
    assert [e["weight"] for e in new["per_epoch"]] == [e["weight"] for e in old["per_epoch"]]
    assert [e["accuracy"] for e in new["per_epoch"]] == pytest.approx(
        [e["accuracy"] for e in old["per_epoch"]], rel=1e-15
    )
    assert 0 < new["value"] < 1


def test_a_run_stopped_within_an_epoch_counts_the_steps_it_took():
    executor = _Executor(counter=True)
    result, _, epochs = _run(executor, stop=StopConditions(max_epochs=2, max_steps=3))
    assert result.stop_reason == "max_steps"
    assert executor.log.calls == ["add"] * 3 + ["take"]
    assert epochs[0].payload["count"] == 3 * BATCH
    assert result.metrics["training_accuracy"]["per_epoch"][0]["steps"] == 3


@pytest.mark.parametrize("counter", [True, False])
@pytest.mark.parametrize("metrics", [[], [LossCurve, Throughput]], ids=["none", "no-accuracy"])
def test_nothing_is_counted_when_no_metric_reads_the_accuracy(counter: bool, metrics: list):
    executor = _Executor(counter=counter)
    trainer = Trainer(
        executor, "loss", _Optimizer(), _Data(), make_sampler("shuffle", SIZE, BATCH, seed=0),
        metrics=[m() for m in metrics], progress=False,
    )  # fmt: skip
    _Logits.argmaxes = 0
    result = trainer.run()
    assert result.steps == 7
    assert executor.log.calls == []
    assert _Logits.argmaxes == 0
    if metrics:  # the steps are still published, with their loss and batch size
        assert len(result.metrics["loss_curve"]["curve"]) == 7
        assert result.metrics["throughput"]["samples"] == SIZE
