"""Issue 19: ``d5 results compare`` on two inference runs: the latency samples, the
LoadGen percentiles, rates and validity by their directions, and warnings when the
executors ran under other loads or thread counts. Runs are stored by hand through
:func:`d5core.loadgen.store.store_scenario`; no LoadGen runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from d5core.loadgen.loadgen import ScenarioResult
from d5core.loadgen.settings import ScenarioSettings
from d5core.loadgen.store import store_scenario
from d5core.report.comparison import compare_runs
from d5core.results.store import ResultsStore


def _result(
    tmp_path: Path, latencies: list[float], *, qps: float, valid: bool, threads: int
) -> ScenarioResult:
    logs = tmp_path / f"logs-{qps}-{threads}-{valid}"
    logs.mkdir(exist_ok=True)
    (logs / "mlperf_log_summary.txt").write_text("Result is : VALID\n")
    keys = ("50", "90", "95", "97", "99", "99.9")
    settings = ScenarioSettings(scenario="server", target_qps=qps, latency_bound_ms=10.0)
    return ScenarioResult(
        executor="numpy",
        scenario="server",
        mode="performance",
        valid=valid,
        failed_checks=[] if valid else ["Performance constraints satisfied"],
        metric_name="Completed samples per second",
        metric_value=qps,
        percentiles_s={k: float(np.percentile(latencies, float(k))) for k in keys},
        qps_with_overhead=qps,
        qps_without_overhead=qps * 1.2,
        early_stopping={"met": True, "lines": [], "estimates_s": {}},
        latencies_s=latencies,
        log_dir=str(logs),
        settings=settings.check(),
        threads={"count": threads, "setting": "OMP_NUM_THREADS"},
        samples_issued=len(latencies),
    )


def _run(store: ResultsStore, result: ScenarioResult) -> str:
    with store.run("inference", "inference lenet5 server", config={"model": "lenet5"}) as rid:
        store_scenario(store, rid, result, "lenet5")
    return rid


def test_a_slower_invalid_candidate_is_worse_and_the_other_load_is_warned(tmp_path):
    rng = np.random.default_rng(0)
    fast = [float(v) for v in rng.uniform(1e-3, 1.2e-3, 200)]
    slow = [v * 3 for v in fast]
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        a = _run(store, _result(tmp_path, fast, qps=100.0, valid=True, threads=1))
        b = _run(store, _result(tmp_path, slow, qps=120.0, valid=False, threads=2))
        c = compare_runs(store, a, b)
    (latency,) = c.comparisons
    assert latency["metric"] == "latency" and latency["better"] == "lower"
    assert latency["verdict"] == "worse" and latency["ratio"] > 2.5
    rows = {m["name"]: m for m in c.metrics}
    for key in ("50", "90", "95", "97", "99", "99.9"):
        assert rows[f"latency_p{key}"]["better"] == "lower"
        assert rows[f"latency_p{key}"]["verdict"] == "worse"
    assert rows["qps"]["better"] == "higher" and rows["qps"]["verdict"] == "better"
    assert rows["qps_without_overhead"]["better"] == "higher"
    assert rows["valid"]["baseline"] == 1.0 and rows["valid"]["candidate"] == 0.0
    assert rows["valid"]["verdict"] == "worse"
    (settings,) = c.settings_warnings
    assert settings.startswith("numpy ran under other LoadGen settings")
    assert "target_qps 100.0 vs 120.0" in settings
    (threads,) = c.threads["warnings"]
    assert "numpy ran with 1 thread" in threads and "2 threads" in threads
    assert settings in c.warnings() and threads in c.warnings()
    assert c.to_json()["settings_warnings"] == [settings]


def test_runs_under_the_same_load_raise_no_setting_warning(tmp_path):
    rng = np.random.default_rng(1)
    one = [float(v) for v in rng.uniform(1e-3, 1.2e-3, 200)]
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        a = _run(store, _result(tmp_path, one, qps=100.0, valid=True, threads=1))
        b = _run(store, _result(tmp_path, one, qps=100.0, valid=True, threads=1))
        c = compare_runs(store, a, b)
    assert c.settings_warnings == [] and c.threads["warnings"] == []
    assert {m["verdict"] for m in c.metrics} == {"same"}
    assert c.comparisons[0]["verdict"] == "same"


def test_the_table_says_each_untested_scalar_verdict_may_be_noise(tmp_path, d5_cli):
    """Issue 28 ("a hollow better"): a scalar metric has one value a side, so no test can
    confirm its change; every such verdict says so in its row, not only in the caption."""
    rng = np.random.default_rng(2)
    fast = [float(v) for v in rng.uniform(1e-3, 1.2e-3, 200)]
    db = tmp_path / "results.sqlite"
    with ResultsStore.open(db) as store:
        a = _run(store, _result(tmp_path, fast, qps=100.0, valid=True, threads=1))
        b = _run(store, _result(tmp_path, [v * 3 for v in fast], qps=100.0, valid=True,
                                threads=1))  # fmt: skip
    out = d5_cli("results", "compare", a, b, "--db", str(db)).stdout
    rows = [" ".join(line.split()) for line in out.splitlines() if "latency_p" in line]
    assert len(rows) == 6
    for row in rows:
        assert "worse (slower) (untested: one value a side, may be noise)" in row
