"""A training run stored while it goes: the store's streaming methods and the recorder
that feeds them (issue 11, item 16)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from d5core.errors import UsageError
from d5core.lv2.recording import RunRecorder
from d5core.lv2.trainer import Curves
from d5core.results.store import ResultsStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ResultsStore]:
    with ResultsStore.open(tmp_path / "r.sqlite") as s:
        yield s


def _make_read_only(path: Path) -> None:
    """Make ``path`` unwritable, for root too (``chattr +i``), or skip the test."""
    path.chmod(0o444)
    if os.geteuid() != 0:
        return
    chattr = shutil.which("chattr")
    if chattr is None or subprocess.run([chattr, "+i", str(path)], capture_output=True).returncode:
        path.chmod(0o644)
        pytest.skip("cannot make a file read-only for root here (no chattr +i)")


@pytest.fixture
def read_only_db(tmp_path: Path) -> Iterator[Path]:
    db = tmp_path / "ro.sqlite"
    with ResultsStore.open(db):
        pass
    _make_read_only(db)
    yield db
    if os.geteuid() == 0 and shutil.which("chattr"):
        subprocess.run(["chattr", "-i", str(db)], capture_output=True)


# -- the store ----------------------------------------------------------------------


def test_a_read_only_database_is_found_before_any_work(read_only_db):
    with ResultsStore.open(read_only_db) as store:
        assert store.list_runs() == []  # reading works
        with pytest.raises(UsageError, match="is not writable") as info:
            store.require_writable()
    assert "\n" not in str(info.value) and "--db" in str(info.value)


def test_a_writable_database_passes_the_check_and_is_left_as_it_was(store):
    store.require_writable()
    assert store.list_runs() == []


def test_samples_appended_to_a_running_run_extend_its_measurement(store):
    run_id = store.begin_run("train", "t", environment={})
    mid = store.add_measurement(run_id, "step_time", [1.0, 2.0], unit="s")
    store.append_samples(run_id, {mid: [3.0, 4.0, 5.0]})
    (m,) = store.measurements(run_id)
    assert m.n == 5 and store.samples(mid) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert m.summary is not None and m.summary["median"] == 3.0


def test_appending_to_another_runs_measurement_or_a_finished_run_is_refused(store):
    first = store.begin_run("train", "a", environment={})
    mid = store.add_measurement(first, "loss", [1.0], unit="loss")
    second = store.begin_run("train", "b", environment={})
    with pytest.raises(UsageError, match=f"run {second} has no measurement {mid}"):
        store.append_samples(second, {mid: [2.0]})
    store.finish_run(first)
    with pytest.raises(UsageError, match="already complete"):
        store.append_samples(first, {mid: [2.0]})
    assert store.samples(mid) == [1.0]


def test_config_keys_known_at_the_end_join_a_running_runs_config(store):
    run_id = store.begin_run(
        "train", "t", config={"recipe": "r.toml", "stop_reason": None}, environment={}
    )
    store.update_config(run_id, {"stop_reason": "max_epochs"})
    assert store.get_run(run_id).config == {"recipe": "r.toml", "stop_reason": "max_epochs"}


# -- the recorder -------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _step(curves: Curves, loss: float, seconds: float = 0.01) -> None:
    curves.losses.append(loss)
    curves.step_times_s.append(seconds)
    curves.throughput_samples_s.append(32 / seconds)


def _stored(store: ResultsStore, run_id: str) -> dict[str, list[float]]:
    return {m.metric: store.samples(m.id) for m in store.measurements(run_id)}


def test_the_recorder_flushes_every_interval_and_at_every_test_pass(store):
    run_id = store.begin_run("train", "t", environment={})
    clock = FakeClock()
    recorder = RunRecorder(store, run_id, interval_s=1.0, clock=clock)
    curves = Curves()
    _step(curves, 2.0)
    recorder(curves)
    assert _stored(store, run_id) == {}  # not yet a second
    clock.now = 1.5
    _step(curves, 1.5)
    recorder(curves)
    assert _stored(store, run_id)["loss"] == [2.0, 1.5]
    _step(curves, 1.0)
    curves.test_curve.append({"accuracy": 0.5, "step": 3})
    recorder(curves)  # a test pass: at once
    stored = _stored(store, run_id)
    assert stored["loss"] == [2.0, 1.5, 1.0] and stored["test_accuracy"] == [0.5]
    assert len(stored["step_time"]) == len(stored["throughput"]) == 3
    assert store.get_run(run_id).status == "running"


@dataclass
class FakeResult:
    status: str = "complete"
    diverged_at: dict[str, int] | None = None
    losses: list[float] = field(default_factory=list)
    step_times_s: list[float] = field(default_factory=list)
    throughput_samples_s: list[float] = field(default_factory=list)
    test_curve: list[dict[str, Any]] = field(default_factory=list)


def test_finishing_stores_the_rest_the_metrics_and_the_status(store):
    run_id = store.begin_run("train", "t", environment={})
    recorder = RunRecorder(store, run_id, clock=FakeClock())
    result = FakeResult(status="diverged", diverged_at={"step": 2, "epoch": 0})
    for loss in (1.0, 0.5, float("nan")):
        _step(result, loss)  # type: ignore[arg-type]
    recorder(result)
    recorder.finish(result, {"final_loss": float("nan"), "steps": 3.0},
                    config={"stop_reason": "diverged"})  # fmt: skip
    run = store.get_run(run_id)
    assert run.status == "diverged" and run.error == "loss became nan at step 2"
    assert run.config["stop_reason"] == "diverged"
    assert _stored(store, run_id)["loss"] == [1.0, 0.5]  # the NaN loss is the status
    assert [(k.name, k.value) for k in store.metrics(run_id)] == [("steps", 3.0)]


def test_ctrl_c_ends_the_run_interrupted_with_what_it_had(store):
    from d5core.results.store import FINAL_STATUSES

    run_id = store.begin_run("train", "t", environment={})
    recorder = RunRecorder(store, run_id, clock=FakeClock())
    curves = Curves()
    _step(curves, 1.0)
    recorder.abort(curves, KeyboardInterrupt())
    run = store.get_run(run_id)
    assert run.status == ("interrupted" if "interrupted" in FINAL_STATUSES else "incomplete")
    assert "interrupted (Ctrl-C)" in (run.error or "")
    assert _stored(store, run_id)["loss"] == [1.0]


def test_an_error_ends_the_run_failed_naming_it(store):
    run_id = store.begin_run("train", "t", environment={})
    recorder = RunRecorder(store, run_id, clock=FakeClock())
    recorder.abort(Curves(), RuntimeError("the executor\nbroke"))
    run = store.get_run(run_id)
    assert (run.status, run.error) == ("failed", "RuntimeError: the executor broke")
