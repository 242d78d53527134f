"""The inference engine end to end: real LoadGen runs of the numpy executor in worker
processes, their results parsed, stored and their logs kept, and the failures a worker
can meet (an executor that raises, one that kills its process, an unknown one)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.loadgen.loadgen import PERCENTILES, ScenarioResult, run_scenario
from d5core.loadgen.settings import ScenarioSettings
from d5core.loadgen.store import (
    CONFIG_KEY,
    RUN_KIND,
    record_failure,
    run_name,
    store_scenario,
)
from d5core.loadgen.sut import ScenarioFailed, decode_response, sample_library
from d5core.lv1.runner import executor_by_name, load_model
from d5core.results.store import ResultsStore

MODEL = "mlp"
#: Short but VALID on this 2-core machine, even when it is busy.
QUICK = {"min_duration_s": 1.0, "threads": 1}
SETTINGS = {
    "single-stream": ScenarioSettings("single-stream", **QUICK),
    "multi-stream": ScenarioSettings("multi-stream", **QUICK),
    "server": ScenarioSettings("server", target_qps=600.0, **QUICK),
    "offline": ScenarioSettings("offline", **QUICK),
}

FAULTY = '''
import os
import signal

from d5core.levels.networks import GraphExecutor

d5_plugin_api = ">=1.0,<2"


class Killer(GraphExecutor):
    """Kills its own process on the first call."""

    def inference(self, feeds):
        os.kill(os.getpid(), signal.SIGKILL)


class Raiser(GraphExecutor):
    """Answers 300 calls (the warm-up's at most 201 among them), then raises."""

    calls = 0

    def inference(self, feeds):
        Raiser.calls += 1
        if Raiser.calls > 300:
            raise ValueError("boom after 300 calls")
        return {o.name: feeds["input"][:, :10].copy() for o in self.network.outputs}
'''


@pytest.fixture
def only_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers load the numpy plugin only: they start faster."""
    monkeypatch.setenv("D5_LOAD_PLUGINS", "d5-plugin-numpy")


@pytest.fixture
def faulty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The executors ``killer`` and ``raiser`` of the distribution ``d5-fixture-faulty``,
    importable by the workers."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "d5_fixture_faulty.py").write_text(textwrap.dedent(FAULTY))
    info = site / "d5_fixture_faulty-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: d5-fixture-faulty\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[d5.hooks]\nfaulty = d5_fixture_faulty\n"
        "[d5.frameworks]\nkiller = d5_fixture_faulty:Killer\nraiser = d5_fixture_faulty:Raiser\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("D5_LOAD_PLUGINS", "d5-plugin-numpy,d5-fixture-faulty")


def _loadgen_percentile(latencies: list[float], pct: str) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * float(pct) / 100))]


@pytest.mark.usefixtures("only_numpy")
@pytest.mark.parametrize("scenario", list(SETTINGS))
def test_every_scenario_is_valid_on_numpy(scenario: str, tmp_path: Path) -> None:
    result = run_scenario(MODEL, "numpy", SETTINGS[scenario], tmp_path / "logs")
    assert result.valid is True, (result.failed_checks, result.details)
    assert result.failed_checks == []
    assert result.metric_value is not None and result.metric_value > 0
    assert set(result.percentiles_s) == set(PERCENTILES)
    # every latency LoadGen logged, from its trace: they give its own percentiles
    for pct in PERCENTILES:
        seen = _loadgen_percentile(result.latencies_s, pct)
        assert seen == pytest.approx(result.percentiles_s[pct], abs=1e-9)
    assert result.samples_issued >= result.settings.min_query_count
    assert result.threads["environment"]["OMP_NUM_THREADS"] == "1"
    assert result.threads["count"] == 1
    if scenario == "multi-stream":
        assert result.samples_issued == 8 * len(result.latencies_s)
        assert result.early_stopping["estimates_s"]["99"] >= result.percentiles_s["99"]
    if scenario == "server":
        assert result.settings.latency_bound_ms == 100.0
        assert result.qps_with_overhead == result.metric_value
    if scenario == "offline":
        assert result.settings.expected_qps is not None  # from the warm-up
    if scenario == "single-stream":
        assert result.qps_with_overhead is not None and result.qps_without_overhead is not None
    again = ScenarioResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again == result


@pytest.mark.usefixtures("only_numpy")
def test_server_far_above_capacity_is_invalid(tmp_path: Path) -> None:
    settings = ScenarioSettings(
        "server", target_qps=20_000.0, latency_bound_ms=10.0, min_duration_s=0.1, threads=1
    )  # lenet5 takes about 0.5 ms a sample on numpy here: at most 2,000 queries a second
    result = run_scenario("lenet5", "numpy", settings, tmp_path / "logs")
    assert result.valid is False
    assert "Performance constraints satisfied" in result.failed_checks
    assert result.percentiles_s["99"] > 0.010


@pytest.mark.usefixtures("only_numpy")
def test_accuracy_mode_logs_every_sample_output(tmp_path: Path) -> None:
    settings = ScenarioSettings("offline", mode="accuracy", performance_sample_count=16, threads=1)
    result = run_scenario(MODEL, "numpy", settings, tmp_path / "logs", batch=5)
    assert result.valid is None and result.accuracy is not None
    logged = json.loads(Path(result.accuracy["log"]).read_text())
    assert sorted(entry["qsl_idx"] for entry in logged) == list(range(16))
    network = load_model(MODEL)
    samples = sample_library(network, result.settings)
    executor = executor_by_name("numpy", network)
    for entry in logged:
        outputs = decode_response(bytes.fromhex(entry["data"]), result.accuracy["outputs"])
        expected = executor.inference(samples[entry["qsl_idx"]])
        for name, value in outputs.items():
            np.testing.assert_allclose(value, expected[name][0], rtol=1e-5, atol=1e-6)


@pytest.mark.usefixtures("faulty")
def test_a_killed_worker_fails_the_run_and_keeps_what_came_before(tmp_path: Path) -> None:
    db = tmp_path / "results.sqlite"
    settings = ScenarioSettings("single-stream", min_duration_s=0.5, threads=1)
    name = run_name(MODEL, "single-stream")
    with ResultsStore.open(db) as store:
        with pytest.raises(ScenarioFailed) as caught, store.run(RUN_KIND, name) as run_id:
            good = run_scenario(MODEL, "numpy", settings, tmp_path / "numpy")
            store_scenario(store, run_id, good, MODEL)
            try:
                run_scenario(MODEL, "killer", settings, tmp_path / "killer")
            except ScenarioFailed as exc:
                record_failure(store, run_id, MODEL, "single-stream", "killer", str(exc))
                raise
        run = store.get_run(run_id)
        metrics = {m.name for m in store.metrics(run_id)}
        measurements = store.measurements(run_id)
    message = str(caught.value)
    assert message.startswith(
        "the killer worker (single-stream) was killed by SIGKILL before it reported a result"
    )
    assert "\n" not in message
    assert run.status == "failed" and run.error == f"ScenarioFailed: {message}"
    assert {"valid", "latency_p90", "qps"} <= metrics
    assert [m.labels["executor"] for m in measurements] == ["numpy"]
    executors = run.config[CONFIG_KEY]["executors"]
    assert executors["killer"] == {"error": message}
    assert executors["numpy"]["valid"] is True
    with ResultsStore.open(db) as store:
        kept = set(store.artifact_names(run_id))
    assert {"numpy/mlperf_log_summary.txt", "numpy/mlperf_log_detail.txt"} <= kept
    assert kept & {"numpy/mlperf_log_trace.json", "numpy/mlperf_log_trace.json.gz"}
    assert not any(name.startswith("killer/") for name in kept)


@pytest.mark.usefixtures("faulty")
def test_an_executor_failing_under_load_is_one_line(tmp_path: Path) -> None:
    settings = ScenarioSettings("single-stream", min_duration_s=1.0, threads=1)
    with pytest.raises(ScenarioFailed) as caught:
        run_scenario(MODEL, "raiser", settings, tmp_path / "logs")
    assert str(caught.value) == (
        "the raiser worker (single-stream) failed: the executor failed on a query: "
        "ValueError: boom after 300 calls"
    )


@pytest.mark.usefixtures("only_numpy")
def test_an_unknown_executor_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="ghostexec") as caught:
        run_scenario(MODEL, "ghostexec", ScenarioSettings("offline"), tmp_path / "logs")
    assert "\n" not in str(caught.value)
    with pytest.raises(UsageError, match="--target-qps must be positive"):
        run_scenario(MODEL, "numpy", ScenarioSettings("server", target_qps=-1.0), tmp_path)
