"""Issue 19: the report's latency figures of inference runs draw exactly what is stored.

Runs are stored by hand in a temporary database through
:func:`d5core.loadgen.store.store_scenario` (the function ``d5 bench net --scenario``
stores with), from :class:`ScenarioResult` objects built here, then read back as
``d5 report`` reads them. No executor or LoadGen runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from d5core.loadgen import figures as inference
from d5core.loadgen.loadgen import ScenarioResult
from d5core.loadgen.settings import ScenarioSettings
from d5core.loadgen.store import store_scenario
from d5core.plugins import get_plugin_manager
from d5core.results.store import ResultsStore
from d5core.testing.report_runs import report_runs, stored_measurement, stored_metric


def _result(
    tmp_path: Path,
    executor: str,
    latencies: list[float],
    *,
    scenario: str = "server",
    valid: bool = True,
    failed: tuple[str, ...] = (),
    bound_ms: float | None = 50.0,
    mode: str = "performance",
) -> ScenarioResult:
    """A result as :func:`run_scenario` returns one, its percentiles LoadGen's own
    (here: numpy's, which differ slightly from the samples' own at the tail)."""
    logs = tmp_path / f"logs-{executor}-{scenario}-{mode}"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / "mlperf_log_summary.txt").write_text("Result is : VALID\n")
    keys = ("50", "90", "95", "97", "99", "99.9")
    percentiles = {k: float(np.percentile(latencies, float(k))) * 1.01 for k in keys}
    settings = ScenarioSettings(
        scenario=scenario,
        mode=mode,
        latency_bound_ms=bound_ms,
        target_qps=100.0 if scenario == "server" else None,
    ).check()
    return ScenarioResult(
        executor=executor,
        scenario=scenario,
        mode=mode,
        valid=None if mode == "accuracy" else valid,
        failed_checks=list(failed),
        metric_name="Completed samples per second",
        metric_value=99.0,
        percentiles_s=percentiles,
        qps_with_overhead=99.0,
        qps_without_overhead=120.0,
        early_stopping={"met": True, "lines": [], "estimates_s": {"99": percentiles["99"]}},
        latencies_s=latencies,
        log_dir=str(logs),
        settings=settings,
        threads={"count": 1, "setting": "OMP_NUM_THREADS", "describe": "x 1 thread"},
        samples_issued=len(latencies),
    )


def _store(store: ResultsStore, model: str, results: list[ScenarioResult]) -> str:
    scenario = results[0].scenario
    with store.run("inference", f"inference {model} {scenario}", config={"model": model}) as rid:
        for result in results:
            store_scenario(store, rid, result, model)
    return rid


def _spread(rng: np.random.Generator, low: float, high: float, n: int = 60) -> list[float]:
    return [float(v) for v in np.exp(rng.uniform(np.log(low), np.log(high), n))]


@pytest.fixture
def store(tmp_path: Path):
    with ResultsStore.open(tmp_path / "results.sqlite") as s:
        yield s


def test_the_figure_draws_the_stored_latencies_percentiles_bound_and_verdicts(store, tmp_path):
    rng = np.random.default_rng(0)
    numpy_lat = _spread(rng, 1e-3, 2e-3)
    torch_lat = _spread(rng, 1e-3, 9e-2)  # spans 90x: a log axis
    rid = _store(
        store,
        "lenet5",
        [
            _result(tmp_path, "numpy", numpy_lat),
            _result(
                tmp_path,
                "torch",
                torch_lat,
                valid=False,
                failed=("Performance constraints satisfied",),
            ),
        ],
    )
    runs = report_runs(store, [rid])
    (figure,) = inference.figures(runs)
    assert figure.key.startswith("inference-latency-lenet5-server")
    assert figure.section == "networks" and figure.runs == (rid,)
    data = figure.data
    assert data["model"] == "lenet5" and data["scenario"] == "server"
    assert data["log_scale"] is True and data["latency_bounds_s"] == [0.05]
    rows = {r["executor"]: r for r in data["series"]}
    assert list(rows) == ["numpy", "torch"]
    for name in ("numpy", "torch"):
        stored = stored_measurement(store, rid, "latency", executor=name)
        assert rows[name]["samples"] == store.samples(stored.id)
        for key in ("50", "90", "99", "99.9"):
            metric = stored_metric(store, rid, f"latency_p{key}", executor=name)
            assert rows[name]["percentiles"][key] == metric.value
        assert rows[name]["valid"] == bool(stored_metric(store, rid, "valid", executor=name).value)
        assert rows[name]["latency_bound_s"] == pytest.approx(0.05)
    assert rows["torch"]["failed_checks"] == ["Performance constraints satisfied"]
    assert rows["numpy"]["label"] == "numpy\nVALID"
    assert rows["torch"]["label"] == "torch\nINVALID"
    assert "Performance constraints satisfied" in figure.caption

    (ax,) = figure.figure.axes
    assert ax.get_yscale() == "log"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["numpy\nVALID", "torch\nINVALID"]
    scale = data["drawn_scale"]
    assert data["drawn_unit"] == "ms" and scale == 1e3
    bound_lines = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(bound_lines) == 1
    assert list(bound_lines[0].get_ydata()) == pytest.approx([50.0, 50.0])
    # the percentile markers: one scatter per percentile, a point per executor
    marks = {c.get_label(): c.get_offsets() for c in ax.collections if "LoadGen" in c.get_label()}
    assert set(marks) == {"LoadGen p50", "LoadGen p90", "LoadGen p99", "LoadGen p99.9"}
    for key in ("50", "90", "99", "99.9"):
        drawn = [float(y) for _, y in marks[f"LoadGen p{key}"]]
        assert drawn == pytest.approx([rows[n]["percentiles"][key] * scale for n in rows])


def test_a_narrow_spread_stays_linear_and_a_run_without_bound_draws_none(store, tmp_path):
    rng = np.random.default_rng(1)
    rid = _store(
        store,
        "mlp",
        [_result(tmp_path, "numpy", _spread(rng, 1e-4, 1.5e-4), scenario="offline",
                 bound_ms=None)],
    )  # fmt: skip
    (figure,) = inference.figures(report_runs(store, [rid]))
    (ax,) = figure.figure.axes
    assert figure.data["log_scale"] is False and ax.get_yscale() == "linear"
    assert figure.data["latency_bounds_s"] == []
    assert not [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert figure.data["drawn_unit"] == "µs"


def test_accuracy_runs_and_other_kinds_are_not_drawn(store, tmp_path):
    rng = np.random.default_rng(2)
    rid = _store(
        store, "lenet5",
        [_result(tmp_path, "numpy", _spread(rng, 1e-3, 2e-3), mode="accuracy")],
    )  # fmt: skip
    with store.run("net", "bench lenet5", config={"model": "lenet5"}) as other:
        store.add_measurement(other, "latency", [0.1, 0.2], labels={"executor": "numpy"})
    assert inference.figures(report_runs(store, [rid, other])) == []


def test_several_runs_of_a_scenario_are_labelled_by_run(store, tmp_path):
    rng = np.random.default_rng(3)
    first = _store(store, "lenet5", [_result(tmp_path, "numpy", _spread(rng, 1e-3, 2e-3))])
    second = _store(
        store, "lenet5", [_result(tmp_path, "numpy", _spread(rng, 1e-3, 2e-3), bound_ms=20.0)]
    )
    (figure,) = inference.figures(report_runs(store, [first, second]))
    labels = [r["label"] for r in figure.data["series"]]
    assert labels == [f"numpy ({first[:6]})\nVALID", f"numpy ({second[:6]})\nVALID"]
    assert set(figure.runs) == {first, second}
    assert figure.data["latency_bounds_s"] == [0.02, 0.05]
    # each bound is drawn beside the run it applies to, not across the figure
    (ax,) = figure.figure.axes
    segments = {
        c.get_label(): [tuple(map(tuple, seg)) for seg in c.get_segments()]
        for c in ax.collections
        if c.get_label().startswith("latency bound")
    }
    assert segments == {
        "latency bound 20 ms": [((1.55, 20.0), (2.45, 20.0))],
        "latency bound 50 ms": [((0.55, 50.0), (1.45, 50.0))],
    }


def test_the_figures_come_from_the_loadgen_packages_internal_plugin(store, tmp_path):
    rng = np.random.default_rng(4)
    rid = _store(store, "lenet5", [_result(tmp_path, "numpy", _spread(rng, 1e-3, 2e-3))])
    outcomes = get_plugin_manager().call_each(
        "d5_report_figures", runs=report_runs(store, [rid]), store=store
    )
    drawn = {out.plugin: [f.key for f in out.result or ()] for out in outcomes}
    keys = drawn["d5core:builtins.loadgen"]
    assert any(k.startswith("inference-latency-") for k in keys)
