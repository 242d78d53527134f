"""A small numpy stand-in for a framework's native training API, shared by tests.

Linear softmax regression whose outputs are numpy arrays (they have the ``item``,
``argmax`` and ``sum`` the trainer's native path uses), an optimizer native to it, a
device counter of correct predictions and a dataset of 50 samples: the trainer's
native path is tested without a framework plugin.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

SIZE, BATCH, FEATURES, CLASSES = 50, 8, 4, 3  # 7 steps per epoch, the last of 2 samples


class Info:
    def __init__(self, name: str) -> None:
        self.name = name


class Network:
    inputs: ClassVar[list[Info]] = [Info("x"), Info("labels")]
    outputs: ClassVar[list[Info]] = [Info("logits"), Info("loss")]


class CallLog:
    """What the counter was asked, in order."""

    def __init__(self) -> None:
        self.calls: list[str] = []


class Counter:
    """A counter in the shape of :class:`d5core.lv2.trainer.CorrectCounter`."""

    def __init__(self, log: CallLog) -> None:
        self.log = log
        self.held: list[tuple[np.ndarray, np.ndarray]] = []

    def add(self, logits: np.ndarray, labels: np.ndarray) -> None:
        self.log.calls.append("add")
        self.held.append((logits, labels))

    def take(self) -> int:
        self.log.calls.append("take")
        held, self.held = self.held, []
        return int(sum(int(np.sum(lg.argmax(-1) == lb)) for lg, lb in held))


class Logits(np.ndarray):
    """Logits that count the argmaxes taken of them (class-wide)."""

    argmaxes = 0

    def argmax(self, *args: Any, **kwargs: Any) -> Any:
        Logits.argmaxes += 1
        return np.asarray(self).argmax(*args, **kwargs)


class Loss(np.ndarray):
    """A loss with torch's ``numel`` too (earlier trainers asked for it)."""

    def numel(self) -> int:
        return int(self.size)


class Executor:
    """Linear softmax regression on numpy arrays, with the native training API."""

    name = "fake"
    network = Network()

    def __init__(self, *, counter: bool) -> None:
        self.w = np.random.default_rng(0).normal(size=(FEATURES, CLASSES))
        self.log = CallLog()
        if counter:
            self.native_correct_counter = lambda: Counter(self.log)

    def inference(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Logits and the mean cross-entropy (a test pass)."""
        x, y = feeds["x"], feeds["labels"]
        logits = x @ self.w
        p = np.exp(logits - logits.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        return {"logits": logits, "loss": np.array([-np.mean(np.log(p[np.arange(len(y)), y]))])}

    def inference_and_backprop(
        self, feeds: dict[str, np.ndarray], loss: str
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """The numpy path's step: the native one's outputs as plain arrays."""
        outputs, grads = self.native_train_step(feeds, loss)
        return {k: np.asarray(v) for k, v in outputs.items()}, grads

    def get_parameters(self) -> dict[str, np.ndarray]:
        return {"w": self.w.copy()}

    def set_parameters(self, params: dict[str, np.ndarray]) -> None:
        self.w[...] = params["w"]

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
        outputs = {"logits": logits.view(Logits), loss: np.array([value]).view(Loss)}
        return outputs, {"w": x.T @ p / len(y)}


class NumpySGD:
    """Plain SGD on numpy arrays, for the trainer's numpy path (``native=False``)."""

    lr = 0.5

    def step(self, params: dict[str, np.ndarray], grads: dict[str, np.ndarray]) -> None:
        for name, grad in grads.items():
            params[name] -= self.lr * np.asarray(grad)


class Optimizer:
    native = "fake"
    lr = 0.5

    def bind(self, executor: Executor) -> None:
        self.executor = executor

    def native_step(self, grads: dict[str, np.ndarray]) -> None:
        self.executor.w -= self.lr * grads["w"]

    def step(self, params: Any, grads: Any) -> None:
        raise AssertionError("the native path never steps numpy arrays")


class Data:
    def __init__(self) -> None:
        rng = np.random.default_rng(1)
        self.x = rng.normal(size=(SIZE, FEATURES))
        self.y = (self.x[:, 0] > 0).astype(np.int64) + (self.x[:, 1] > 1)

    def __len__(self) -> int:
        return SIZE

    def batch(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.x[indices], self.y[indices]
