"""Where a time to accuracy went (issue 30): setup, steps, tests, recording and the rest.

The trainer splits the time to accuracy into named parts that add up to it, so that what
d5 spends beside the training itself (streaming samples into the store, reading
batches) is measured and shown apart. And ``d5 run`` starts its clock after its imports,
as a hand-written script does.
"""

from __future__ import annotations

import contextlib
import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from native_fakes import BATCH, SIZE, Data, Executor, NumpySGD

from d5core.levels import training
from d5core.lv2.samplers import make_sampler
from d5core.lv2.trainer import TTA_PARTS, RunClock, StopConditions, Trainer


def _trainer(target: float, **options: Any) -> Trainer:
    data = Data()
    return Trainer(
        Executor(counter=False), "loss", NumpySGD(), data,
        make_sampler("shuffle", SIZE, BATCH, seed=0), test_set=data, progress=False,
        native=False, stop=StopConditions(max_epochs=3, target_accuracy=target), **options,
    )  # fmt: skip


def test_the_parts_add_up_to_the_time_to_accuracy_in_their_documented_order() -> None:
    result = _trainer(0.0).run()  # the first test pass reaches a target of 0
    parts = result.time_to_accuracy_parts
    assert list(parts) == list(TTA_PARTS)
    assert all(v >= 0 for v in parts.values())
    assert result.time_to_accuracy is not None
    assert math.fsum(parts.values()) == pytest.approx(result.time_to_accuracy, abs=1e-6)


def test_setup_counts_from_the_clock_start_to_the_first_step() -> None:
    clock = RunClock.start(0.0)
    time.sleep(0.05)  # loading the data and building the model, before the trainer runs
    result = _trainer(0.0, clock=clock).run()
    assert result.time_to_accuracy_parts["setup"] >= 0.05


def test_a_slow_progress_callback_is_counted_as_recording() -> None:
    calls: list[int] = []

    def slow(curves: Any) -> None:
        calls.append(len(curves.losses))
        time.sleep(0.002)

    result = _trainer(0.0, on_progress=slow).run()
    steps = -(-SIZE // BATCH)  # one epoch, then the test pass reached the target
    # every step's call counts; the call after the reaching pass comes after the clock stops
    assert result.time_to_accuracy_parts["recording"] >= 0.002 * steps
    assert len(calls) == steps + 1


def test_a_run_that_misses_its_target_has_no_parts() -> None:
    result = _trainer(1.01).run()
    assert result.time_to_accuracy is None
    assert result.time_to_accuracy_parts == {}


def test_preload_dataset_calls_what_the_factory_declares(monkeypatch) -> None:
    called: list[str] = []

    @training.preloads(lambda: called.append("imported"))
    def factory(split: str) -> Any:
        raise AssertionError("preloading must not load the data")

    class Manager:
        def load(self, group: str, name: str) -> Any:
            assert (group, name) == (training.DATASETS_GROUP, "fake")
            return factory

    monkeypatch.setattr("d5core.plugins.manager.get_plugin_manager", lambda: Manager())
    training.preload_dataset("fake")
    assert called == ["imported"]


def test_preload_dataset_leaves_errors_to_load_dataset(monkeypatch) -> None:
    def broken() -> None:
        raise ImportError("no such library")

    @training.preloads(broken)
    def factory(split: str) -> Any: ...

    class Manager:
        def load(self, group: str, name: str) -> Any:
            return factory if name == "fake" else training.load_dataset(name)

    monkeypatch.setattr("d5core.plugins.manager.get_plugin_manager", lambda: Manager())
    training.preload_dataset("fake")  # nothing raised
    training.preload_dataset("no_such_dataset")  # nothing raised either


def test_digits_preload_imports_scikit_learn_without_loading(monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "sklearn.datasets", raising=False)
    training.preload_dataset("digits")
    assert "sklearn.datasets" in sys.modules


def test_d5_run_imports_its_code_before_the_clock_starts(monkeypatch) -> None:
    from d5core.lv2 import assembly
    from d5core.lv2.recipes import load_recipe

    order: list[str] = []
    real_start = RunClock.start.__func__  # type: ignore[attr-defined]
    real_import = assembly.import_before_clock

    def importing(settings: dict[str, Any]) -> None:
        order.append("imports")
        real_import(settings)

    def starting(cls: type[RunClock], *args: Any, **kwargs: Any) -> RunClock:
        order.append("clock")
        return real_start(cls, *args, **kwargs)

    monkeypatch.setattr(assembly, "import_before_clock", importing)
    monkeypatch.setattr(RunClock, "start", classmethod(starting))
    path = Path(__file__).parents[2] / "recipes" / "digits-mlp.toml"
    recipe = load_recipe(path).with_overrides(["executor=numpy"])
    # the core lane has no executor plugin: the order is what counts
    with contextlib.suppress(Exception):
        assembly.Prepared(recipe, 0).trainer.clock.stop()
    assert order[:2] == ["imports", "clock"]


def test_the_run_clock_freezes_the_objects_alive_before_it_until_it_stops() -> None:
    import gc

    clock = RunClock.start(0.5)
    try:
        assert gc.get_freeze_count() > 0  # d5's and the framework's objects: not rescanned
    finally:
        clock.stop()
    assert gc.get_freeze_count() == 0


def test_a_run_refused_after_its_clock_started_leaves_nothing_frozen(tmp_path: Path) -> None:
    import gc

    from d5core.errors import UsageError
    from d5core.lv2 import assembly
    from d5core.lv2.recipes import load_recipe

    path = Path(__file__).parents[2] / "recipes" / "digits-mlp.toml"
    recipe = load_recipe(path).with_overrides(["batch_size=5000"])  # refused once data loads
    with pytest.raises(UsageError, match="batch_size 5000 is larger"):
        assembly.Prepared(recipe, 0)
    assert gc.get_freeze_count() == 0
