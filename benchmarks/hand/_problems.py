"""The two training problems of ``benchmarks/train_e2e.py``, as a hand-written loop sees them.

Every hand loop (``benchmarks/hand/<framework>_loop.py``) imports this module for what
must be identical to ``d5 run`` so that both sides do equal work: the data, the initial
weights, the order of the examples in each epoch and the recipe's settings. It uses only
numpy and scikit-learn, as the user's own script would; ``tests`` check that each array
equals what d5 builds (``d5core.lv2.datasets``, ``d5core.lv1.zoo``, the ``shuffle``
sampler).

Where time to accuracy starts and ends (``docs/training.md``, "Time to accuracy"): the
clock starts at the first touch of data, after the imports and before the datasets are
loaded, and stops when the first test pass whose accuracy reaches the target has
finished. Everything between counts: loading and converting the data, building the
model and the optimizer, every step and every test pass.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

__all__ = ["PROBLEMS", "Problem", "Result", "clock", "epoch_batches", "he_weights", "load", "main"]


@dataclass(frozen=True)
class Problem:
    """One recipe's FIXED and MUTABLE settings, as its hand loops use them."""

    recipe: str
    model: str
    epochs: int
    target: float
    lr: float
    momentum: float
    batch_size: int
    seed: int = 0
    eval_batch_size: int = 256
    options: dict[str, Any] = field(default_factory=dict)


#: The recipes with hand loops, by the file stem of ``recipes/<name>.toml``.
PROBLEMS = {
    "digits-mlp": Problem("digits-mlp", "mlp", 30, 0.9, 0.05, 0.9, 32, options={"hidden": 64}),
    "synthetic-cnn": Problem(
        "synthetic-cnn",
        "lenet5",
        5,
        0.8,
        0.02,
        0.9,
        32,
        options={"samples": 512, "shape": (1, 28, 28), "classes": 4, "seed": 0},
    ),
}


def clock() -> float:
    """The clock of time to accuracy and of every hand loop's own timing."""
    return time.perf_counter()


def load(problem: Problem) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)``: float32 inputs, int64 labels."""
    if problem.model == "mlp":
        x, y = load_digits(return_X_y=True)
        train, test = train_test_split(np.arange(len(y)), test_size=0.2, stratify=y,
                                       random_state=0)  # fmt: skip
        train, test = np.sort(train), np.sort(test)
        x = (x / 16.0).astype(np.float32)
        return x[train], y[train].astype(np.int64), x[test], y[test].astype(np.int64)
    o = problem.options
    return (*_images("train", o), *_images("test", o))


def _images(split: str, o: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Generated images: one smooth 4x4 pattern per class, enlarged, plus noise 0.5."""
    c, h, w = o["shape"]
    params = np.random.default_rng([0xD5, o["seed"], 0])
    draw = np.random.default_rng([0xD5, o["seed"], 1 if split == "train" else 2])
    coarse = params.standard_normal((o["classes"], c, 4, 4))
    patterns = coarse.repeat(-(-h // 4), axis=2).repeat(-(-w // 4), axis=3)[:, :, :h, :w]
    y = draw.permutation(np.arange(o["samples"], dtype=np.int64) % o["classes"])
    x = patterns[y] + 0.5 * draw.standard_normal((o["samples"], c, h, w))
    return x.astype(np.float32), y


def he_weights(problem: Problem, x_train: np.ndarray, classes: int) -> list[np.ndarray]:
    """The initial weights, in layer order: each weight (He-normal, PyTorch's
    ``(out, in[, kh, kw])`` layout) followed by its zero bias."""
    rng = np.random.default_rng(problem.seed)
    out: list[np.ndarray] = []

    def layer(shape: tuple[int, ...]) -> None:
        fan_in = int(np.prod(shape[1:]))
        out.append((rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32))
        out.append(np.zeros(shape[0], np.float32))

    if problem.model == "mlp":
        hidden = problem.options["hidden"]
        layer((hidden, x_train.shape[1]))
        layer((classes, hidden))
    else:
        c, h, w = x_train.shape[1:]
        layer((6, c, 5, 5))
        layer((16, 6, 5, 5))
        layer((120, 16 * ((h // 2 - 4) // 2) * ((w // 2 - 4) // 2)))
        layer((84, 120))
        layer((classes, 84))
    return out


def epoch_batches(problem: Problem, epoch: int, size: int) -> Iterator[np.ndarray]:
    """The index batches of ``epoch``: d5's ``shuffle`` sampler, last batch kept."""
    order = np.random.default_rng([problem.seed, epoch]).permutation(size)
    for start in range(0, size, problem.batch_size):
        yield order[start : start + problem.batch_size]


@dataclass
class Result:
    """What a hand loop reports, as one JSON line on stdout."""

    time_to_accuracy: float | None
    steps: int
    epochs: int
    final_test_accuracy: float
    test_s: float = 0.0
    setup_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def main(train: Any) -> int:
    """Run ``train(problem) -> Result`` for the recipe named by ``sys.argv[1]`` and print it."""
    if len(sys.argv) != 2 or sys.argv[1] not in PROBLEMS:
        print(f"usage: {sys.argv[0]} {{{','.join(PROBLEMS)}}}", file=sys.stderr)
        return 2
    result = train(PROBLEMS[sys.argv[1]])
    print(json.dumps(result.__dict__))
    return 0
