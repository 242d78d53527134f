"""Compile time apart from run time (issue 31): the engine times the first call on its
own, a job times the preparation of its callable, ``d5 bench`` keeps the median of both
over the worker processes as the run's metrics, and ``d5 results show`` prints them
apart from the run-time statistics. None of them is ever a sample.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from json_schema_doc import check

from d5core.lv0.bench_results import STARTUP_METRICS, gather, startup_fields, store_startup
from d5core.measure import Clock, Measurement, MeasureOptions, measure
from d5core.measure.engine import timed_call
from d5core.measure.invocations import Job, JobResult, ProcessRun
from d5core.measure.noise import NOISE_FLOOR_ENV
from d5core.plugins import PluginManager
from d5core.results import ResultsStore

ENV = {"packages": {"d5core": "0.1.0"}, "cpu": {"model": "Test CPU", "logical_cores": 2}}


class Simulated:
    """A clock that moves only when the callable says how long it took, with a log of
    the reads, calls and synchronisations in order."""

    def __init__(self, durations_ns: Iterator[int]) -> None:
        self.now = 0
        self.durations = durations_ns
        self.log: list[str] = []

    def read(self) -> int:
        self.log.append("read")
        return self.now

    def fn(self) -> str:
        self.log.append("fn")
        self.now += next(self.durations)
        return "made"

    def sync(self) -> None:
        self.log.append("sync")

    def clock(self) -> Clock:
        return Clock(self.read, resolution_ns=1.0, overhead_ns=1.0, declared_resolution_ns=1.0)


def slow_first(first_ns: int, then_ns: int) -> Iterator[int]:
    yield first_ns
    while True:
        yield then_ns


def _measure(sim: Simulated, **options: object) -> Measurement:
    opts = MeasureOptions(**options)  # type: ignore[arg-type]
    return measure(sim.fn, opts, clock=sim.clock(), synchronize=sim.sync)


# -- the engine ------------------------------------------------------------------------------


def test_the_first_call_is_timed_on_its_own_and_never_sampled() -> None:
    m = _measure(Simulated(slow_first(2_000_000_000, 1_000_000)), max_samples=20)
    assert m.first_call_s == 2.0
    assert m.warmup_runs == 3  # the first call is one of the warm-up calls
    assert max(m.samples) < 0.01


def test_the_first_call_is_synchronized_before_and_after() -> None:
    sim = Simulated(slow_first(5_000_000, 1_000_000))
    _measure(sim, max_samples=20)
    first = sim.log.index("fn")  # after the read that starts the time budget
    assert sim.log[first - 2 : first + 3] == ["sync", "read", "fn", "sync", "read"]


def test_without_warm_up_there_is_no_first_call_time() -> None:
    m = _measure(Simulated(slow_first(5_000_000, 1_000_000)), warmup=0, max_samples=20)
    assert m.first_call_s is None and m.warmup_runs == 0


def test_warm_up_by_time_alone_still_times_the_first_call() -> None:
    m = _measure(Simulated(slow_first(3_000_000, 1_000_000)), warmup=0, warmup_time_s=0.01)
    assert m.first_call_s == 0.003 and m.warmup_runs >= 1


def test_timed_call_returns_what_it_made_and_its_synchronized_time() -> None:
    sim = Simulated(iter([250_000_000]))
    made, seconds = timed_call(sim.fn, sim.sync, clock=sim.clock())
    assert (made, seconds) == ("made", 0.25)
    assert sim.log == ["sync", "read", "fn", "sync", "read"]


def test_prepare_and_compile_times_are_read_from_the_details() -> None:
    m = _measure(Simulated(slow_first(5_000_000, 1_000_000)), max_samples=20)
    assert (m.prepare_s, m.compile_s) == (None, None)
    m.details = {"prepare_s": 0.5, "compile_s": 0.25, "timed_layout": "NHWC"}
    assert (m.prepare_s, m.compile_s) == (0.5, 0.25)
    m.details = {"prepare_s": "soon", "compile_s": float("nan")}
    assert (m.prepare_s, m.compile_s) == (None, None)


def test_the_measurement_json_carries_the_first_call_time() -> None:
    m = _measure(Simulated(slow_first(7_000_000, 1_000_000)), max_samples=20)
    m.details = {"prepare_s": 0.5}
    data = json.loads(json.dumps(m.to_json()))
    assert data["first_call_s"] == 0.007 and data["details"]["prepare_s"] == 0.5


# -- gathered over processes -------------------------------------------------------------------


def _runs(first: list[float | None], prepare: list[float]) -> JobResult:
    base = _measure(Simulated(slow_first(1_000_000, 1_000_000)), max_samples=10)
    runs = []
    for i, (f, p) in enumerate(zip(first, prepare, strict=True)):
        details = {"prepare_s": p, "timed_layout": "NCHW"}
        m = dataclasses.replace(base, first_call_s=f, details=details)
        runs.append(
            ProcessRun(job=0, round=i, pid=100 + i, position=0, round_size=1, measurement=m)
        )
    return JobResult(Job("op", {}), runs)


def test_gathering_keeps_the_median_over_the_processes_of_each_start_up_cost() -> None:
    result = _runs([1.0, None, 9.0, 2.0], [0.1, 0.4, 0.3, 0.2])
    gathered = gather(result).measurement
    assert startup_fields(gathered) == {"prepare_s": 0.25, "first_call_s": 2.0, "compile_s": None}
    assert gathered.details["timed_layout"] == "NCHW"
    assert result.runs[0].measurement.details["prepare_s"] == 0.1  # the runs are untouched


# -- stored, and shown apart -------------------------------------------------------------------


def _open(db: Path) -> ResultsStore:
    return ResultsStore.open(db, manager=PluginManager({}, discover_installed=False))


@pytest.fixture
def stored(tmp_path, monkeypatch) -> tuple[Path, str, str]:
    """A net run with start-up costs, and one without."""
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.1, 0.1))
    db = tmp_path / "results.sqlite"
    m = _measure(Simulated(slow_first(12_000_000, 1_000_000)), max_samples=20)
    m.details = {"prepare_s": 0.25, "compile_s": 0.2}
    labels = {"executor": "jaxish", "mode": "inference", "batch": 32}
    with _open(db) as store, store.run("net", "with", environment=ENV) as with_costs:
        store.add_measurement(with_costs, "time", m.samples, labels=labels, unit="s")
        store_startup(store, with_costs, m, labels)
    with _open(db) as store, store.run("net", "without", environment=ENV) as without:
        store.add_measurement(without, "time", m.samples, labels=labels, unit="s")
    return db, with_costs, without


def test_start_up_costs_are_stored_as_metrics_in_seconds_with_the_labels_of_the_time(stored):
    db, run, _ = stored
    with _open(db) as store:
        metrics = {k.name: k for k in store.metrics(run)}
    assert set(metrics) == set(STARTUP_METRICS.values())
    assert metrics["first_call_time"].value == 0.012
    assert metrics["prepare_time"].labels == {"executor": "jaxish", "mode": "inference",
                                              "batch": 32}  # fmt: skip
    assert {k.unit for k in metrics.values()} == {"s"}
    assert {k.better for k in metrics.values()} == {"lower"}


def test_results_show_prints_the_start_up_costs_apart_from_the_metrics(stored, d5_cli):
    db, run, _ = stored
    shown = d5_cli("results", "show", run, "--db", str(db))
    assert shown.exit_code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    head = lines.index("compile and first call (not in the samples; median over processes)")
    assert lines[head + 1] == (
        "  batch=32, executor=jaxish, mode=inference: prepare 250 ms, compile 200 ms, "
        "first call 12 ms"
    )
    assert "prepare_time" not in shown.stdout and "\nmetrics" not in shown.stdout


def test_results_show_of_a_run_without_start_up_costs_prints_no_such_line(stored, d5_cli):
    db, _, run = stored
    shown = d5_cli("results", "show", run, "--db", str(db))
    assert shown.exit_code == 0, shown.stderr
    assert "compile and first call" not in shown.stdout


def test_results_show_json_lists_them_among_the_metrics(stored, d5_cli):
    db, run, _ = stored
    shown = d5_cli("results", "show", run, "--db", str(db), "--json")
    assert shown.exit_code == 0, shown.stderr
    data = json.loads(shown.stdout)["data"]
    check("results show", data)
    values = {k["name"]: k["value"] for k in data["metrics"]}
    assert values == {"prepare_time": 0.25, "compile_time": 0.2, "first_call_time": 0.012}


# -- d5 bench op, end to end, with a backend that compiles ----------------------------------

PLUGIN = """
from d5core.hookspecs import hookimpl
d5_plugin_api = ">=1.0,<2"

@hookimpl
def d5_environment_info():
    return {}
"""
BACKEND = """
import numpy as np
from d5core.levels.operators import Operator, OperatorBackend

class Relu(Operator):
    op_type = "Relu"
    def forward(self, inputs):
        return [np.maximum(inputs[0], 0)]
    def details(self):
        return {"compile_s": 0.125, "timed_layout": "flat"}

class Backend(OperatorBackend):
    name = "compiling"
    def supported(self):
        return ["Relu"]
    def create(self, op_type, attributes, inputs):
        return Relu(attributes)
"""


def test_bench_op_reports_and_stores_the_start_up_costs_of_each_job(
    d5_site, d5_cli, tmp_path, monkeypatch
):
    d5_site.add(
        "d5-plugin-compiling",
        entry_points={"d5.hooks": {"compiling": "compiling_plugin"},
                      "d5.operators": {"compiling": "compiling_backend:Backend"}},
        modules={"compiling_plugin.py": PLUGIN, "compiling_backend.py": BACKEND},
    )  # fmt: skip
    monkeypatch.setenv("PYTHONPATH", str(d5_site.path))
    monkeypatch.setenv(NOISE_FLOOR_ENV, "0.03")
    db = str(tmp_path / "r.sqlite")
    bench = d5_cli("bench", "op", "Relu", "--backends", "compiling", "--shape", "8x8",
                   "--processes", "2", "--warmup", "1", "--min-samples", "6",
                   "--time-budget", "0.02", "--db", db, "--json")  # fmt: skip
    assert bench.exit_code == 0, bench.stderr
    (row,) = json.loads(bench.stdout)["data"]
    check("bench op", [row])
    assert row["compile_s"] == 0.125
    assert row["prepare_s"] >= 0 and row["first_call_s"] > 0
    shown = d5_cli("results", "show", row["run_id"], "--db", db)
    assert shown.exit_code == 0, shown.stderr
    assert (
        "  backend=compiling, direction=forward, dtype=float32, problem=Relu[8x8]: prepare "
        in shown.stdout
    )
    assert ", compile 125 ms, first call " in shown.stdout
