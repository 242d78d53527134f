"""The training clock (issue 33): test passes left out of the time budget and of the
time to target, as AlgoPerf leaves out evaluation.

``budget_clock = "training"`` lets the test passes run without spending the budget;
every run with a target reports its time to target without them
(``time_to_target_training``) and their seconds (``eval_time``). Slow test passes are
made with a sleep in the test set, so the seconds asserted are lower bounds.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest
from native_fakes import BATCH, SIZE, Data, Executor, NumpySGD

from d5core.lv2.runner import metric_values
from d5core.lv2.samplers import make_sampler
from d5core.lv2.trainer import StopConditions, Trainer

PAUSE = 0.02  # seconds each test pass sleeps
STEP = 0.005  # seconds each training step sleeps


class SlowTests(Data):
    """The training data as a test set whose every batch (one per pass) sleeps first:
    ``PAUSE`` for the first pass, ``later`` for the others."""

    def __init__(self, later: float = PAUSE) -> None:
        super().__init__()
        self.later = later
        self.passes = 0

    def batch(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(PAUSE if self.passes == 0 else self.later)
        self.passes += 1
        return super().batch(indices)


class SlowSteps(Data):
    """The training data, each batch read taking ``STEP`` seconds: a budget of a tenth
    of a second is then some 20 steps, whatever the machine."""

    def batch(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        time.sleep(STEP)
        return super().batch(indices)


def _trainer(stop: StopConditions, *, test_every: Any = 1, **options: Any) -> Trainer:
    return Trainer(
        Executor(counter=False), "loss", NumpySGD(), SlowSteps(),
        make_sampler("shuffle", SIZE, BATCH, seed=0),
        test_set=options.pop("test_set", SlowTests()), test_every=test_every,
        eval_batch_size=SIZE, progress=False, native=False, stop=stop, **options,
    )  # fmt: skip


def test_the_training_clock_leaves_test_passes_out_of_the_time_budget() -> None:
    budget = 0.1
    result = _trainer(
        StopConditions(max_epochs=1000, time_budget_s=budget, budget_clock="training")
    ).run()
    assert result.stop_reason == "time_budget"
    assert result.eval_time >= PAUSE * len(result.test_curve)  # no target: every pass
    assert result.wall_s - result.eval_time >= budget  # training alone spent the budget


def test_the_wall_clock_counts_test_passes_against_the_time_budget() -> None:
    budget = 0.1
    result = _trainer(StopConditions(max_epochs=1000, time_budget_s=budget)).run()
    assert result.stop_reason == "time_budget"
    assert result.wall_s >= budget
    assert result.wall_s - result.eval_time < budget  # the passes spent part of it


def test_time_to_target_training_is_the_time_to_accuracy_less_the_test_passes() -> None:
    result = _trainer(StopConditions(max_epochs=20, target_accuracy=0.0), test_every=3).run()
    assert result.stop_reason == "target_accuracy"
    assert result.time_to_accuracy is not None and result.time_to_target_training is not None
    assert result.eval_time >= PAUSE  # the pass that reached the target counts
    assert result.time_to_target_training == pytest.approx(
        result.time_to_accuracy - result.eval_time, abs=1e-6
    )
    values = metric_values(result)
    assert values["time_to_target_training"] == result.time_to_target_training
    assert values["eval_time"] == result.eval_time


def test_eval_time_counts_the_passes_up_to_the_target_only() -> None:
    # every pass reaches the target; the run goes on (as a distributed run's ranks may,
    # until they agree) for two more passes of 0.1 s, which are not in the target's time
    stop = StopConditions(max_epochs=20, target_loss=1e9)
    box: list[Trainer] = []

    def agree(ended: str | None) -> str | None:
        early = ended == "target_loss" and len(box[0].curves.test_curve) < 3
        return None if early else ended

    box.append(_trainer(stop, test_every=2, test_set=SlowTests(later=0.1), agree=agree))
    result = box[0].run()
    assert result.target_reached == "loss"
    assert len(result.test_curve) == 3
    assert PAUSE <= result.eval_time < 0.1  # the first pass alone
    assert result.time_to_loss is not None
    assert result.time_to_target_training == pytest.approx(
        result.time_to_loss - result.eval_time, abs=1e-6
    )


def test_a_missed_target_has_no_training_time_and_all_the_test_seconds() -> None:
    result = _trainer(StopConditions(max_epochs=1, target_accuracy=1.0), test_every=2).run()
    passes = len(result.test_curve)
    assert result.time_to_target_training is None
    assert result.eval_time >= PAUSE * passes > 0
    values = metric_values(result)
    assert values["time_to_target_training"] is None
    assert values["eval_time"] == result.eval_time


def test_a_run_without_a_target_reports_no_target_figures() -> None:
    result = _trainer(StopConditions(max_epochs=1), test_every="epoch").run()
    values = metric_values(result)
    assert "time_to_target_training" not in values and "eval_time" not in values
