"""The trainer's call points for training algorithms (issue 33, AlgoPerf's
``prepare_for_eval`` and ``data_selection``), on the numpy path and the native one.

``prepare_for_eval`` may hand the test pass other parameters (an average, say): the test
pass sees those, and training goes on from the live ones as if nothing happened.
``data_selection`` picks each step's examples from the sampler's, with a generator
derived from the run's seed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from native_fakes import BATCH, SIZE, Data, Executor, NumpySGD, Optimizer

from d5core.errors import UsageError
from d5core.lv2.samplers import make_sampler
from d5core.lv2.trainer import StopConditions, Trainer

PATHS = [pytest.param(False, id="numpy"), pytest.param(True, id="native")]


class SeeingExecutor(Executor):
    """The fake executor, recording the weights each test pass ran with."""

    def __init__(self) -> None:
        super().__init__(counter=False)
        self.seen: list[np.ndarray] = []

    def inference(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        self.seen.append(self.w.copy())
        return super().inference(feeds)


class RecordingData(Data):
    """The fake dataset, recording the indices of every batch read."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[list[int]] = []

    def batch(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        self.reads.append([int(i) for i in np.asarray(indices)])
        return super().batch(indices)


def _trainer(native: bool, executor: Executor | None = None, **options: Any) -> Trainer:
    data = options.pop("train_set", Data())
    seed = options.pop("seed", 0)
    return Trainer(
        executor or SeeingExecutor(), "loss", Optimizer() if native else NumpySGD(), data,
        make_sampler("shuffle", SIZE, BATCH, seed=0), test_set=Data(), test_every=3,
        progress=False, native=native, seed=seed, stop=StopConditions(max_epochs=2),
        **options,
    )  # fmt: skip


@pytest.mark.parametrize("native", PATHS)
def test_prepare_for_eval_changes_what_the_test_pass_sees_not_the_training(native: bool) -> None:
    calls: list[tuple[dict[str, np.ndarray], Any]] = []

    def zeros(params: Mapping[str, np.ndarray], optimizer: Any) -> dict[str, np.ndarray]:
        calls.append(({k: np.array(v, copy=True) for k, v in params.items()}, optimizer))
        return {k: np.zeros_like(v) for k, v in params.items()}

    plain_executor, hooked_executor = SeeingExecutor(), SeeingExecutor()
    plain = _trainer(native, plain_executor).run()
    trainer = _trainer(native, hooked_executor, prepare_for_eval=zeros)
    hooked = trainer.run()
    # training went exactly as without the hook
    assert hooked.losses == plain.losses
    np.testing.assert_array_equal(hooked_executor.w, plain_executor.w)
    # every test pass ran the zero model, whose accuracy is that of class 0 alone
    assert len(calls) == len(hooked.test_curve) == len(plain.test_curve)
    assert all(not w.any() for w in hooked_executor.seen)
    zero_model = float(np.mean(Data().y == 0))
    assert all(p["accuracy"] == pytest.approx(zero_model) for p in hooked.test_curve)
    assert [p["accuracy"] for p in plain.test_curve] != [p["accuracy"] for p in hooked.test_curve]
    # the hook saw the live weights of the moment, and the optimizer
    for (params, optimizer), seen in zip(calls, plain_executor.seen, strict=True):
        assert set(params) == {"w"}
        np.testing.assert_array_equal(params["w"], seen)
        assert optimizer is trainer.optimizer


@pytest.mark.parametrize("native", PATHS)
def test_prepare_for_eval_returning_none_evaluates_the_live_parameters(native: bool) -> None:
    calls: list[int] = []

    def nothing(params: Mapping[str, np.ndarray], optimizer: Any) -> None:
        calls.append(1)

    plain = _trainer(native).run()
    hooked = _trainer(native, prepare_for_eval=nothing).run()
    assert len(calls) == len(hooked.test_curve)
    assert [p["accuracy"] for p in hooked.test_curve] == [p["accuracy"] for p in plain.test_curve]


@pytest.mark.parametrize("native", PATHS)
def test_data_selection_chooses_the_examples_of_each_step(native: bool) -> None:
    steps: list[int] = []

    def halves(indices: np.ndarray, step: int, rng: np.random.Generator) -> np.ndarray:
        steps.append(step)
        return indices[::2]

    plain_data, chosen_data = RecordingData(), RecordingData()
    plain = _trainer(native, train_set=plain_data).run()
    chosen = _trainer(native, train_set=chosen_data, data_selection=halves).run()
    assert steps == list(range(chosen.steps))
    first = 1  # the trainer reads one example first, to learn the labels' kind
    sampled = plain_data.reads[first:]
    assert chosen_data.reads[first:] == [batch[::2] for batch in sampled]
    assert chosen.samples == sum(len(batch[::2]) for batch in sampled) < plain.samples


def test_data_selections_generator_derives_from_the_seed() -> None:
    def draws(seed: int) -> list[list[int]]:
        picked: list[list[int]] = []

        def pick(indices: np.ndarray, step: int, rng: np.random.Generator) -> np.ndarray:
            out = rng.choice(indices, size=2, replace=False)
            picked.append(sorted(int(i) for i in out))
            return out

        _trainer(False, seed=seed, data_selection=pick).run()
        return picked

    assert draws(3) == draws(3)
    assert draws(3) != draws(4)


@pytest.mark.parametrize(
    "bad",
    [
        lambda indices, step, rng: indices[:0],
        lambda indices, step, rng: indices.astype(float),
        lambda indices, step, rng: indices.reshape(1, -1),
    ],
    ids=["empty", "floats", "2-d"],
)
def test_a_data_selection_that_returns_no_indices_is_a_usage_error(bad: Any) -> None:
    with pytest.raises(UsageError, match="data_selection must return") as caught:
        _trainer(False, data_selection=bad).run()
    assert "\n" not in str(caught.value)
