"""Levels 2 and 3 for executor and optimizer plugins' tests: the trainer, samplers,
recipes, and the pieces of distributed training a plugin's own test drives.

The helpers at the bottom are the checks d5's framework plugins share: a seeded digits-MLP
trainer on any executor (:func:`digits_trainer`), a ``d5 run`` of a recipe read back from
its JSON (:func:`d5_run_json`), and seeded runs that repeat (:func:`assert_seeded_runs_repeat`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from d5core.levels.training import Optimizer, Sampler
from d5core.lv2.assembly import prepare
from d5core.lv2.modifiers import weight_decay
from d5core.lv2.samplers import make_sampler
from d5core.lv2.trainer import StopConditions, Trainer, native_capable
from d5core.lv3.launch import RankContext, partitioned_sampler
from d5core.lv3.single_process import SingleProcessCommunicator
from d5core.testing.kernel import read_json

__all__ = [
    "SMALL_DIGITS_RECIPE",
    "RankContext",
    "SingleProcessCommunicator",
    "StopConditions",
    "Trainer",
    "assert_seeded_runs_repeat",
    "d5_run_json",
    "digits_trainer",
    "make_sampler",
    "native_capable",
    "partitioned_sampler",
    "prepare",
    "weight_decay",
]


#: A recipe of the digits MLP (16 hidden units) for two epochs on the numpy executor: a
#: second of CPU, reaching its target of 0.5 in the first test pass.
SMALL_DIGITS_RECIPE = """
[fixed]
model = "mlp"
model_options = { hidden = [16] }
dataset = "digits"
sampler = "shuffle"
epochs = 2
loss = "cross_entropy"
test_every = "epoch"
target_accuracy = 0.5

[mutable]
executor = "numpy"
optimizer = "momentum"
lr = 0.05
batch_size = 64
"""


def digits_trainer(
    executor: str,
    optimizer: Optimizer,
    sampler: Sampler | None = None,
    *,
    steps: int,
    schedule: Callable[[int], float] | None = None,
    native: bool | None = None,
    agree: Any = None,
) -> Trainer:
    """A float64 trainer of the digits MLP (one hidden layer of 64, seed 0) on the
    executor named ``executor``, stopping after ``steps`` steps of one epoch.

    :param sampler: the minibatches; a shuffle of batches of 32 (seed 0) by default.
    :param native: as :class:`Trainer` takes it: ``None`` lets the trainer choose.
    :param agree: a distributed run's agreement hook (:class:`RankContext`'s ``agree``).
    """
    from d5core.levels.training import load_dataset
    from d5core.testing.executors import build_network, executor_by_name, with_loss

    train = load_dataset("digits", "train")
    shape = tuple(train.input_shape)
    net = build_network("mlp", input_shape=shape, classes=10, hidden=[64], seed=0)
    trained, loss = with_loss(net.as_float64())
    if sampler is None:
        sampler = make_sampler("shuffle", len(train), 32, seed=0)
    return Trainer(
        executor_by_name(executor, trained), loss, optimizer, train, sampler, schedule=schedule,
        transforms=lambda x, rng: x.astype(np.float64),
        stop=StopConditions(max_epochs=1, max_steps=steps), progress=False, native=native,
        agree=agree,
    )  # fmt: skip


def d5_run_json(d5_cli: Callable[..., Any], recipe: Path, db: Path, *sets: str) -> dict[str, Any]:
    """Run ``d5 run recipe --set ...`` through the ``d5_cli`` fixture and return the one
    run of its JSON, checked to have passed with a final test accuracy of 0.9 or more."""
    args = [a for s in sets for a in ("--set", s)]
    result = d5_cli("run", str(recipe), "--db", str(db), "--json", *args)
    assert result.exit_code == 0, result.stderr
    (doc,) = read_json(result.stdout, "run")["runs"]
    assert doc["passed"] is True and doc["metrics"]["final_test_accuracy"] >= 0.9
    return dict(doc)


def assert_seeded_runs_repeat(recipe: Path, sets: list[str], *, path: str = "native") -> None:
    """Two runs of ``recipe`` with seed 3 give the same loss curve and accuracy (taking
    the optimizer ``path``), and a run with seed 4 another curve."""
    first = prepare(recipe, sets, seed=3).trainer.run()
    second = prepare(recipe, sets, seed=3).trainer.run()
    assert first.optimizer_path == second.optimizer_path == path
    assert len(first.losses) > 40  # two epochs or more: the target takes a while
    np.testing.assert_array_equal(first.losses, second.losses)
    assert first.final_test_accuracy == second.final_test_accuracy
    other = prepare(recipe, sets, seed=4).trainer.run()  # the seed does matter
    assert other.losses[:10] != first.losses[:10]
