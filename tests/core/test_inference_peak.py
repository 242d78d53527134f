"""Find-peak's search (d5core.loadgen.peak, issue 19 item 2) against a stand-in for
run_scenario whose runs are VALID up to a known QPS: the bracket, the bisection, the
bound on runs, and that every run made is reported."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from d5core.errors import UsageError
from d5core.loadgen import loadgen
from d5core.loadgen.peak import PeakRun, find_peak
from d5core.loadgen.settings import ScenarioSettings

SERVER = ScenarioSettings("server", latency_bound_ms=10.0, min_duration_s=0.5)


class _Server:
    """run_scenario's stand-in: a run is VALID when its target QPS is at most ``peak``;
    p99 grows with the load. ``chosen`` is the QPS the worker picks when given none."""

    def __init__(self, peak: float, chosen: float = 40.0) -> None:
        self.peak, self.chosen = peak, chosen
        self.calls: list[dict[str, Any]] = []

    def __call__(self, model, executor, settings, log_dir, *, batch=None):
        assert settings.mode == "performance" and settings.scenario == "server"
        assert Path(log_dir).is_dir()
        qps = settings.target_qps if settings.target_qps is not None else self.chosen
        self.calls.append({"qps": settings.target_qps, "log_dir": str(log_dir), "batch": batch})
        valid = qps <= self.peak
        return SimpleNamespace(
            valid=valid,
            failed_checks=[] if valid else ["99th percentile latency over the bound"],
            percentiles_s={"99": 0.001 * qps / self.peak},
            settings=settings.with_values(target_qps=qps),
            log_dir=str(log_dir),
        )


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch):
    def install(peak: float, chosen: float = 40.0) -> _Server:
        fake = _Server(peak, chosen)
        monkeypatch.setattr(loadgen, "run_scenario", fake)
        return fake

    return install


def test_doubling_then_bisection_finds_the_peak_within_the_tolerance(server, tmp_path):
    fake = server(peak=300.0)
    result = find_peak("lenet5", "numpy", SERVER.with_values(target_qps=50.0), tmp_path)
    assert result.method == "bisection" and result.converged
    assert [r.qps for r in result.runs[:4]] == [50.0, 100.0, 200.0, 400.0]
    assert result.qps is not None and 0.95 * 300 <= result.qps <= 300.0
    assert result.lowest_invalid is not None and result.lowest_invalid - result.qps <= 0.05 * 400
    # every run is reported, VALID or not, in the order made, each in its own log dir
    assert [r.qps for r in result.runs] == [c["qps"] for c in fake.calls]
    assert [r.valid for r in result.runs] == [q <= 300.0 for q in (c["qps"] for c in fake.calls)]
    assert len({c["log_dir"] for c in fake.calls}) == len(fake.calls)
    assert all(isinstance(r, PeakRun) and r.p99 is not None for r in result.runs)
    assert "peak server QPS" in result.message and "INVALID" in result.message


def test_an_invalid_start_halves_down_to_a_valid_run(server, tmp_path):
    server(peak=30.0)
    result = find_peak("m", "e", SERVER, tmp_path, low=200.0, max_runs=12)
    assert [r.valid for r in result.runs[:4]] == [False, False, False, True]
    assert [r.qps for r in result.runs[:4]] == [200.0, 100.0, 50.0, 25.0]
    assert result.converged and 0.95 * 30 <= (result.qps or 0) <= 30.0


def test_the_worker_chosen_qps_starts_the_search_when_none_is_given(server, tmp_path):
    fake = server(peak=1000.0, chosen=40.0)
    result = find_peak("m", "e", SERVER, tmp_path, max_runs=3)
    assert fake.calls[0]["qps"] is None
    assert [r.qps for r in result.runs] == [40.0, 80.0, 160.0]
    assert result.qps == 160.0 and not result.converged
    assert "not converged" in result.message


def test_max_runs_bounds_the_search_and_high_caps_it(server, tmp_path):
    fake = server(peak=10_000.0)
    result = find_peak("m", "e", SERVER, tmp_path, low=10.0, high=100.0, max_runs=4)
    assert len(fake.calls) == 4 and len(result.runs) == 4
    assert all(r.qps <= 100.0 for r in result.runs) and result.lowest_invalid is None
    assert result.qps == max(r.qps for r in result.runs)


def test_no_valid_run_is_reported_with_every_qps_tried(server, tmp_path):
    server(peak=0.1)
    result = find_peak("m", "e", SERVER, tmp_path, low=80.0, max_runs=3)
    assert result.qps is None and not result.converged
    assert [r.qps for r in result.runs] == [80.0, 40.0, 20.0]
    assert result.message == (
        "e: no server run was VALID (3 run(s) by bisection, target QPS tried: 80, 40, 20); "
        "lower the target QPS or raise the latency bound"
    )
    data = result.to_json()
    assert [r["valid"] for r in data["runs"]] == [False] * 3
    assert data["runs"][0]["failed_checks"] == ["99th percentile latency over the bound"]


@pytest.mark.parametrize(
    ("settings", "kwargs", "expected"),
    [
        (ScenarioSettings("offline"), {}, "use --scenario server, not offline"),
        (SERVER, {"low": -1.0}, "low must be a positive number"),
        (SERVER, {"low": 50.0, "high": 20.0}, "high 20 must be above low 50"),
        (SERVER, {"tolerance": 0.0}, "tolerance must be between 0 and 1"),
        (SERVER, {"max_runs": 0}, "max_runs must be an integer >= 1"),
    ],
)
def test_bad_find_peak_arguments_are_refused_in_one_line(
    server, tmp_path, settings, kwargs, expected
):
    fake = server(peak=100.0)
    with pytest.raises(UsageError, match=expected):
        find_peak("m", "e", settings, tmp_path, **kwargs)
    assert fake.calls == []
