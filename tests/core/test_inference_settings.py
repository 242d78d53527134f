"""Inference engine, without plugins: scenario settings and their one-line errors,
LoadGen's logs parsed (texts captured from real LoadGen 6.0.17 runs), the system under
test's batching on a hand-made executor, and how a result is stored."""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from d5core.errors import UsageError
from d5core.levels.networks import GraphExecutor
from d5core.loadgen.loadgen import (
    LATENCY_BOUND_CHECK,
    OFFLINE_HEADROOM,
    OFFLINE_SAMPLE_OVERHEAD_S,
    PERCENTILES,
    SERVER_MAX_QPS,
    ScenarioFailed,
    ScenarioResult,
    parse_detail,
    parse_summary,
    read_result,
    resolve_settings,
    trace_latencies,
)
from d5core.loadgen.settings import (
    DEFAULT_SAMPLES_PER_QUERY,
    DEFAULT_SERVER_LATENCY_MS,
    SCENARIOS,
    ScenarioSettings,
    default_threads,
    thread_environment,
)
from d5core.loadgen.store import (
    COMPRESS_ABOVE,
    CONFIG_KEY,
    RUN_KIND,
    artifacts_dir,
    keep_logs,
    kept_log_names,
    record_failure,
    run_name,
    store_scenario,
)
from d5core.loadgen.sut import (
    InferenceSUT,
    OutputLayout,
    call_batch,
    decode_response,
    fixed_batch,
    sample_library,
)
from d5core.lv1.runner import load_model
from d5core.onnx.network import Network
from d5core.results.store import ResultsStore

# -- texts LoadGen wrote (summaries trimmed to a few test parameters) ------------------

SERVER_SUMMARY = (
    "================================================\n"
    "MLPerf Results Summary\n"
    "================================================\n"
    "SUT name : PySUT\n"
    "Scenario : Server\n"
    "Mode     : PerformanceOnly\n"
    "Completed samples per second    : 494.53\n"
    "Result is : INVALID\n"
    "  Performance constraints satisfied : NO\n"
    "  Min duration satisfied : Yes\n"
    "  Min queries satisfied : Yes\n"
    "  Early stopping satisfied: NO\n"
    "Recommendations:\n"
    " * Reduce target QPS to improve latency.\n"
    "Early Stopping Result:\n"
    " * Run unsuccessful.\n"
    " * Processed 498 queries.\n"
    " * Would need to run at least 1238 more queries,\n"
    " with the run being successful if every additional\n"
    " query were under latency.\n"
    "\n"
    "================================================\n"
    "Additional Stats\n"
    "================================================\n"
    "Scheduled samples per second : 494.84\n"
    "Min latency (ns)                : 556389\n"
    "Max latency (ns)                : 14844242\n"
    "Mean latency (ns)               : 1044769\n"
    "50.00 percentile latency (ns)   : 634753\n"
    "90.00 percentile latency (ns)   : 1232288\n"
    "95.00 percentile latency (ns)   : 2010608\n"
    "97.00 percentile latency (ns)   : 3842665\n"
    "99.00 percentile latency (ns)   : 10726991\n"
    "99.90 percentile latency (ns)   : 14844242\n"
    "\n"
    "================================================\n"
    "Test Parameters Used\n"
    "================================================\n"
    "samples_per_query : 1\n"
    "target_qps : 500\n"
    "target_latency (ns): 10000000\n"
    "max_async_queries : 0\n"
    "\n"
    "No warnings encountered during test.\n"
    "\n"
    "No errors encountered during test.\n"
)

MULTI_SUMMARY = (
    "================================================\n"
    "MLPerf Results Summary\n"
    "================================================\n"
    "SUT name : PySUT\n"
    "Scenario : MultiStream\n"
    "Mode     : PerformanceOnly\n"
    "99.0th percentile latency (ns) : 1453096\n"
    "Result is : VALID\n"
    "  Min duration satisfied : Yes\n"
    "  Min queries satisfied : Yes\n"
    "  Early stopping satisfied: Yes\n"
    "Early Stopping Result:\n"
    " * Processed at least 662 queries (900).\n"
    " * Would discard 1 highest latency queries.\n"
    " * Early stopping 99.0th percentile estimate: 3423093\n"
    "\n"
    "================================================\n"
    "Additional Stats\n"
    "================================================\n"
    "Per-query latency:\n"
    "Min latency (ns)                : 944418\n"
    "Max latency (ns)                : 11110683\n"
    "Mean latency (ns)               : 1075858\n"
    "50.00 percentile latency (ns)   : 1047632\n"
    "90.00 percentile latency (ns)   : 1139860\n"
    "95.00 percentile latency (ns)   : 1190605\n"
    "97.00 percentile latency (ns)   : 1232358\n"
    "99.00 percentile latency (ns)   : 1453096\n"
    "99.90 percentile latency (ns)   : 11110683\n"
    "\n"
    "================================================\n"
    "Test Parameters Used\n"
    "================================================\n"
    "samples_per_query : 8\n"
    "target_qps : 1000\n"
    "target_latency (ns): 0\n"
    "max_async_queries : 1\n"
    "\n"
    "No warnings encountered during test.\n"
    "\n"
    "No errors encountered during test.\n"
)

SINGLE_ERROR_SUMMARY = (
    "================================================\n"
    "MLPerf Results Summary\n"
    "================================================\n"
    "SUT name : PySUT\n"
    "Scenario : SingleStream\n"
    "Mode     : PerformanceOnly\n"
    "90.0th percentile latency (ns) : 6289486\n"
    "Result is : INVALID\n"
    "  Min duration satisfied : NO\n"
    "  Min queries satisfied : Yes\n"
    "  Early stopping satisfied: Yes\n"
    "Recommendations:\n"
    " * Decrease the expected latency so the loadgen pre-generates more queries.\n"
    "Early Stopping Result:\n"
    " * Processed at least 64 queries (100).\n"
    " * Would discard 2 highest latency queries.\n"
    " * Early stopping 90.0th percentile estimate: 8679508\n"
    " * Not enough queries processed for 99.0th percentile\n"
    " early stopping estimate (would need to process at\n"
    " least 662 total queries).\n"
    "\n"
    "================================================\n"
    "Additional Stats\n"
    "================================================\n"
    "QPS w/ loadgen overhead         : 418.32\n"
    "QPS w/o loadgen overhead        : 535.54\n"
    "\n"
    "Min latency (ns)                : 454728\n"
    "Max latency (ns)                : 11141599\n"
    "Mean latency (ns)               : 1867289\n"
    "50.00 percentile latency (ns)   : 535168\n"
    "90.00 percentile latency (ns)   : 6289486\n"
    "95.00 percentile latency (ns)   : 8100535\n"
    "97.00 percentile latency (ns)   : 8679508\n"
    "99.00 percentile latency (ns)   : 11141599\n"
    "99.90 percentile latency (ns)   : 11141599\n"
    "\n"
    "================================================\n"
    "Test Parameters Used\n"
    "================================================\n"
    "samples_per_query : 1\n"
    "target_qps : 10\n"
    "target_latency (ns): 0\n"
    "max_async_queries : 1\n"
    "\n"
    "No warnings encountered during test.\n"
    "\n"
    "1 ERROR encountered. See detailed log.\n"
)

OFFLINE_SUMMARY = (
    "================================================\n"
    "MLPerf Results Summary\n"
    "================================================\n"
    "SUT name : PySUT\n"
    "Scenario : Offline\n"
    "Mode     : PerformanceOnly\n"
    "Samples per second: 9715.16\n"
    "Result is : INVALID\n"
    "  Min duration satisfied : NO\n"
    "  Min queries satisfied : Yes\n"
    "  Early stopping satisfied: Yes\n"
    "Recommendations:\n"
    " * Increase expected QPS so the loadgen pre-generates a larger (coalesced) query"
    ".\n"
    "\n"
    "================================================\n"
    "Additional Stats\n"
    "================================================\n"
    "Min latency (ns)                : 8674832\n"
    "Max latency (ns)                : 226450193\n"
    "Mean latency (ns)               : 117739763\n"
    "50.00 percentile latency (ns)   : 118052523\n"
    "90.00 percentile latency (ns)   : 204140606\n"
    "95.00 percentile latency (ns)   : 217191661\n"
    "97.00 percentile latency (ns)   : 220082110\n"
    "99.00 percentile latency (ns)   : 226450193\n"
    "99.90 percentile latency (ns)   : 226450193\n"
    "\n"
    "================================================\n"
    "Test Parameters Used\n"
    "================================================\n"
    "samples_per_query : 2200\n"
    "target_qps : 2000\n"
    "target_latency (ns): 0\n"
    "max_async_queries : 1\n"
    "\n"
    "No warnings encountered during test.\n"
    "\n"
    "No errors encountered during test.\n"
)

ACCURACY_SUMMARY = "\nNo warnings encountered during test.\n\nNo errors encountered during test.\n"

DETAIL = (
    ':::MLLOG {"key": "error_runtime", "value": "Ending early: Ran out of generated q'
    "ueries to issue before the minimum query count and test duration were reached. P"
    "lease update the relevant expected latency or target qps in the TestSettings so "
    'they are more accurate.", "time_ms": 236.755105, "namespace": "mlperf::logging",'
    ' "event_type": "POINT_IN_TIME", "metadata": {"is_error": true, "is_warning": fal'
    'se, "file": "loadgen.cc", "line_no": 513, "pid": 28541, "tid": 28541}}\n'
    ':::MLLOG {"key": "result_validity", "value": "INVALID", "time_ms": 237.768586, "'
    'namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {"is_e'
    'rror": false, "is_warning": false, "file": "results.cc", "line_no": 674, "pid": '
    '28541, "tid": 28541}}\n'
    ':::MLLOG {"key": "result_query_count", "value": 100, "time_ms": 237.768586, "nam'
    'espace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata": {"is_erro'
    'r": false, "is_warning": false, "file": "results.cc", "line_no": 712, "pid": 285'
    '41, "tid": 28541}}\n'
    ':::MLLOG {"key": "early_stopping_latency_ss", "value": 8679508, "time_ms": 237.7'
    '68586, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadata"'
    ': {"is_error": false, "is_warning": false, "file": "results.cc", "line_no": 737,'
    ' "pid": 28541, "tid": 28541}}\n'
    ':::MLLOG {"key": "loadgen_version", "value": "6.0.17 @ d6147c7eb7", "time_ms": 0'
    '.007952, "namespace": "mlperf::logging", "event_type": "POINT_IN_TIME", "metadat'
    'a": {"is_error": false, "is_warning": false, "file": "version.cc", "line_no": 53'
    ', "pid": 28541, "tid": 28541}}\n'
)

TRACE = (
    '{"traceEvents":[\n'
    '{"name":"GenerateLoadableSets","ph":"X","pid":28340,"tid":28340,"ts":63.605,"dur'
    '":7.791,"args":{}},\n'
    '{"name":"Wait","ph":"X","pid":28340,"tid":28363,"ts":13805.195,"dur":10090.712,"'
    'args":{}},\n'
    '{"name":"Sample","cat":"default","ph":"b","pid":28340,"id":0,"ts":98932.210,"arg'
    's":{"sample_seq":0,"query_seq":0,"sample_idx":52,"issue_start_ns":0,"complete_ns'
    '":4080383}},\n'
    '{"name":"Sample","cat":"default","ph":"e", "pid":28340,"id":0,"ts":103012.593},\n'
    '{"name":"Sample","cat":"default","ph":"b","pid":28340,"id":7,"ts":98932.210,"arg'
    's":{"sample_seq":7,"query_seq":0,"sample_idx":118,"issue_start_ns":0,"complete_n'
    's":4080383}},\n'
    '{"name":"Sample","cat":"default","ph":"e", "pid":28340,"id":7,"ts":103012.593},\n'
    '{"name":"Sample","cat":"default","ph":"b","pid":28340,"id":8,"ts":103070.799,"ar'
    'gs":{"sample_seq":8,"query_seq":1,"sample_idx":40,"issue_start_ns":0,"complete_n'
    's":920903}},\n'
    '{"name":"Sample","cat":"default","ph":"e", "pid":28340,"id":8,"ts":103991.702},\n'
    '{"name":"Sample","cat":"default","ph":"b","pid":28340,"id":9,"ts":103070.799,"ar'
    'gs":{"sample_seq":9,"query_seq":1,"sample_idx":64,"issue_start_ns":0,"complete_n'
    's":920903}},\n'
    '{"name":"Sample","cat":"default","ph":"e", "pid":28340,"id":9,"ts":103991.702},\n'
    '"otherData":{\n'
    '"ts":1795516178830923.250,\n'
    '"version":"MLPerf LoadGen v1.0"\n'
    "}\n"
    "}\n"
)


# -- settings ----------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_defaults_of_every_scenario_pass_the_check(scenario: str) -> None:
    settings = ScenarioSettings(scenario)
    assert settings.check() is settings
    assert settings.min_duration_s == 2.0 and settings.min_query_count == 100


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"scenario": "burst"},
            "unknown scenario 'burst'; choose one of single-stream, multi-stream, server, offline",
        ),
        ({"scenario": "server", "target_qps": -5.0}, "--target-qps must be positive"),
        ({"scenario": "server", "target_qps": 0}, "--target-qps must be positive"),
        ({"scenario": "server", "latency_bound_ms": 0}, "--latency-bound must be positive"),
        ({"scenario": "single-stream", "latency_bound_ms": -1.0}, "--latency-bound must be"),
        (
            {"scenario": "multi-stream", "samples_per_query": 0},
            "--samples-per-query must be at least 1",
        ),
        (
            {"scenario": "offline", "expected_qps": float("nan")},
            "--expected-qps must be a finite number",
        ),
        ({"scenario": "offline", "min_duration_s": 0}, "--min-duration must be positive"),
        ({"scenario": "offline", "min_query_count": 0}, "--min-query-count must be at least 1"),
        ({"scenario": "offline", "seed": -1}, "--seed must be at least 0"),
        ({"scenario": "offline", "threads": 0}, "--threads must be at least 1"),
        ({"scenario": "offline", "mode": "fast"}, "unknown mode 'fast'"),
        (
            {"scenario": "offline", "target_qps": 10.0},
            "--target-qps applies to the server scenario only",
        ),
        (
            {"scenario": "server", "samples_per_query": 4},
            "--samples-per-query applies to the multi-stream scenario only",
        ),
        (
            {"scenario": "offline", "latency_bound_ms": 5.0},
            "--latency-bound does not apply to the offline scenario",
        ),
    ],
)
def test_bad_settings_are_refused_in_one_line(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        ScenarioSettings(**changes).check()
    text = str(caught.value)
    assert text.startswith(message)
    assert "\n" not in text


def test_settings_round_trip_through_json() -> None:
    settings = ScenarioSettings(
        "server", target_qps=250.0, latency_bound_ms=20.0, min_duration_s=1.5, seed=7,
        threads=1, performance_sample_count=32,
    )  # fmt: skip
    again = ScenarioSettings.from_json(json.loads(json.dumps(settings.to_json())))
    assert again == settings
    with pytest.raises(UsageError, match="unknown scenario setting 'qps'"):
        ScenarioSettings.from_json({"scenario": "server", "qps": 3})
    with pytest.raises(UsageError, match="need a 'scenario'"):
        ScenarioSettings.from_json({"mode": "performance"})


def test_thread_environment_pins_every_pool() -> None:
    assert thread_environment(3) == {
        "OMP_NUM_THREADS": "3",
        "OPENBLAS_NUM_THREADS": "3",
        "MKL_NUM_THREADS": "3",
        "NUMEXPR_NUM_THREADS": "3",
    }
    import os

    cores = len(os.sched_getaffinity(0))
    assert default_threads() == max(1, cores - 1)
    assert set(thread_environment(None).values()) == {str(default_threads())}


WARM = {
    "single_latency_s": 0.002, "single_rate": 500.0, "single_best_latency_s": 0.001,
    "single_best_rate": 1000.0, "batch_latency_s": 0.01, "batch_rate": 3200.0,
    "batch_best_latency_s": 0.008, "batch_best_rate": 4000.0,
}  # fmt: skip


def test_resolve_settings_fills_only_what_was_left_out() -> None:
    server = resolve_settings(ScenarioSettings("server"), WARM)
    assert server.target_qps == 300.0  # 0.3 of the fastest one-sample call's rate
    assert server.latency_bound_ms == DEFAULT_SERVER_LATENCY_MS
    assert server.performance_sample_count == 128
    fast = resolve_settings(ScenarioSettings("server"), {**WARM, "single_best_rate": 1e6})
    assert fast.target_qps == SERVER_MAX_QPS
    given = ScenarioSettings("server", target_qps=42.0, latency_bound_ms=5.0)
    assert resolve_settings(given, WARM).target_qps == 42.0
    assert resolve_settings(given, WARM).latency_bound_ms == 5.0
    offline = resolve_settings(ScenarioSettings("offline"), WARM).expected_qps
    assert offline == round(OFFLINE_HEADROOM / (1 / 3200.0 + OFFLINE_SAMPLE_OVERHEAD_S), 1)
    multi = resolve_settings(ScenarioSettings("multi-stream"), WARM)
    assert multi.samples_per_query == DEFAULT_SAMPLES_PER_QUERY
    single = resolve_settings(ScenarioSettings("single-stream"), WARM)
    assert single.target_qps is None and single.expected_qps is None


# -- LoadGen's logs ------------------------------------------------------------------------


def test_a_server_summary_names_the_failed_checks() -> None:
    summary = parse_summary(SERVER_SUMMARY)
    assert (summary["scenario"], summary["mode"], summary["result"]) == (
        "Server", "PerformanceOnly", "INVALID",
    )  # fmt: skip
    failed = [name for name, ok in summary["checks"].items() if not ok]
    assert failed == ["Performance constraints satisfied", "Early stopping satisfied"]
    assert summary["metric"] == "Completed samples per second"
    assert summary["metric_value"] == 494.53
    assert summary["recommendations"] == ["Reduce target QPS to improve latency."]
    assert summary["early_stopping"]["lines"][-1] == (
        "Would need to run at least 1238 more queries, with the run being successful if "
        "every additional query were under latency."
    )
    assert tuple(summary["percentiles_ns"]) == PERCENTILES
    assert summary["percentiles_ns"]["99"] == 10726991
    assert summary["stats"]["Scheduled samples per second"] == 494.84
    assert summary["parameters"]["target_qps"] == 500
    assert summary["errors"] == "No errors encountered during test."


def test_a_multi_stream_summary_gives_its_early_stopping_estimate() -> None:
    summary = parse_summary(MULTI_SUMMARY)
    assert summary["result"] == "VALID"
    assert all(summary["checks"].values()) and len(summary["checks"]) == 3
    assert summary["metric"] == "99.0th percentile latency (ns)"
    assert summary["early_stopping"]["estimates_ns"] == {"99": 3423093}
    assert summary["percentiles_ns"]["99.9"] == 11110683
    assert summary["parameters"]["samples_per_query"] == 8


def test_a_single_stream_summary_with_an_error() -> None:
    summary = parse_summary(SINGLE_ERROR_SUMMARY)
    assert summary["result"] == "INVALID"
    assert summary["checks"]["Min duration satisfied"] is False
    assert summary["early_stopping"]["estimates_ns"] == {"90": 8679508}
    assert summary["early_stopping"]["lines"][-1].startswith(
        "Not enough queries processed for 99.0th percentile early stopping estimate"
    )
    assert summary["qps_with_overhead"] == 418.32
    assert summary["qps_without_overhead"] == 535.54
    assert summary["errors"] == "1 ERROR encountered. See detailed log."


def test_offline_and_accuracy_summaries() -> None:
    offline = parse_summary(OFFLINE_SUMMARY)
    assert offline["metric"] == "Samples per second" and offline["metric_value"] == 9715.16
    assert offline["checks"]["Min duration satisfied"] is False
    accuracy = parse_summary(ACCURACY_SUMMARY)
    assert accuracy["result"] is None and accuracy["checks"] == {}
    assert accuracy["warnings"] == "No warnings encountered during test."


def test_the_detail_log_gives_values_and_errors() -> None:
    detail = parse_detail("not a log line\n" + DETAIL)
    assert detail["values"]["result_validity"] == "INVALID"
    assert detail["values"]["loadgen_version"].startswith("6.0.17")
    assert len(detail["errors"]) == 1
    assert detail["errors"][0].startswith("error_runtime: Ending early: Ran out of generated")


def test_trace_latencies_per_sample_and_per_query() -> None:
    assert trace_latencies(TRACE) == [0.004080383, 0.004080383, 0.000920903, 0.000920903]
    assert trace_latencies(TRACE, per_query=True) == [0.004080383, 0.000920903]
    assert trace_latencies("") == []


def _log_dir(tmp_path: Path, summary: str, detail: str = "", trace: str = TRACE) -> Path:
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    (logs / "mlperf_log_summary.txt").write_text(summary)
    (logs / "mlperf_log_detail.txt").write_text(detail)
    (logs / "mlperf_log_trace.json").write_text(trace)
    return logs


def test_read_result_of_an_invalid_server_run(tmp_path: Path) -> None:
    settings = ScenarioSettings("server", target_qps=500.0, latency_bound_ms=10.0)
    result = read_result("numpy", settings, _log_dir(tmp_path, SERVER_SUMMARY), samples_issued=4)
    assert result.valid is False
    assert result.failed_checks == ["Performance constraints satisfied", "Early stopping satisfied"]
    assert result.metric_name == "Completed samples per second"
    assert result.qps_with_overhead == 494.53 and result.qps_without_overhead is None
    assert result.percentiles_s["99"] == pytest.approx(0.010726991)
    assert result.latencies_s == [0.004080383, 0.004080383, 0.000920903, 0.000920903]
    assert result.early_stopping["met"] is False
    again = ScenarioResult.from_json(json.loads(json.dumps(result.to_json())))
    assert again == result


def test_read_result_checks_d5s_latency_bound(tmp_path: Path) -> None:
    logs = _log_dir(tmp_path, MULTI_SUMMARY)
    loose = read_result("numpy", ScenarioSettings("multi-stream", latency_bound_ms=2.0), logs)
    assert loose.valid is True and loose.failed_checks == []
    assert loose.metric_name == "99.0th percentile latency (s)"
    assert loose.metric_value == pytest.approx(0.001453096)
    assert loose.latencies_s == [0.004080383, 0.000920903]  # per query in multi-stream
    assert loose.early_stopping["estimates_s"] == {"99": pytest.approx(0.003423093)}
    tight = read_result("numpy", ScenarioSettings("multi-stream", latency_bound_ms=1.0), logs)
    assert tight.valid is False
    assert tight.failed_checks == [f"{LATENCY_BOUND_CHECK} (p99 1.45 ms > 1 ms)"]


def test_read_result_fails_on_loadgen_errors_and_missing_logs(tmp_path: Path) -> None:
    logs = _log_dir(tmp_path, SINGLE_ERROR_SUMMARY, DETAIL)
    with pytest.raises(ScenarioFailed, match=r"^LoadGen logged an error: error_runtime: Ending"):
        read_result("numpy", ScenarioSettings("single-stream"), logs)
    with pytest.raises(ScenarioFailed, match="LoadGen wrote no summary"):
        read_result("numpy", ScenarioSettings("single-stream"), tmp_path / "empty")


def test_an_accuracy_run_has_no_verdict(tmp_path: Path) -> None:
    logs = _log_dir(tmp_path, ACCURACY_SUMMARY)
    result = read_result("numpy", ScenarioSettings("offline", mode="accuracy"), logs)
    assert result.valid is None and result.failed_checks == [] and result.metric_value is None


# -- the system under test -------------------------------------------------------------------


def _fixed_model(batch: int | None) -> Network:
    """y = x @ w, with x of shape (batch, 3); ``None`` leaves the batch symbolic."""
    w = np.arange(6, dtype=np.float32).reshape(3, 2)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "fixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch or "N", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch or "N", 2])],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    onnx.checker.check_model(model)
    return Network(model)


class _MatMul(GraphExecutor):
    """Computes the model above with numpy and remembers the batch of every call."""

    name = "matmul-test"

    def __init__(self, network: Network) -> None:
        super().__init__(network)
        self.batches: list[int] = []

    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = np.asarray(feeds["x"])
        self.batches.append(len(x))
        return {"y": x @ self.network.parameters["w"]}


def test_sample_library_is_seeded_and_one_row_per_sample() -> None:
    network = load_model("lenet5")
    settings = ScenarioSettings("offline", performance_sample_count=10)
    samples = sample_library(network, settings)
    assert len(samples) == 10
    assert all(s["input"].shape == (1, 1, 28, 28) for s in samples)
    again = sample_library(network, settings)
    assert all(np.array_equal(a["input"], b["input"]) for a, b in zip(samples, again, strict=True))
    other = sample_library(
        network, ScenarioSettings("offline", performance_sample_count=10, seed=1)
    )
    assert not np.array_equal(samples[0]["input"], other[0]["input"])
    assert not np.array_equal(samples[0]["input"], samples[1]["input"])


def test_call_batch_per_scenario() -> None:
    network = load_model("lenet5")
    assert fixed_batch(network) is None
    assert call_batch(network, ScenarioSettings("single-stream")) == 1
    assert call_batch(network, ScenarioSettings("server")) == 1
    assert call_batch(network, ScenarioSettings("multi-stream")) == 8
    assert call_batch(network, ScenarioSettings("multi-stream", samples_per_query=6), 4) == 4
    assert call_batch(network, ScenarioSettings("offline")) == 32
    assert call_batch(network, ScenarioSettings("offline"), 16) == 16
    fixed = _fixed_model(4)
    assert fixed_batch(fixed) == 4
    assert call_batch(fixed, ScenarioSettings("single-stream")) == 4
    with pytest.raises(UsageError, match=r"fixed batch of 4 .* cannot be re-batched"):
        call_batch(fixed, ScenarioSettings("offline"), 8)


def test_a_model_without_a_batch_dimension_is_refused() -> None:
    graph = helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"])], "scalar",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )  # fmt: skip
    network = Network(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(UsageError, match="no input with a batch dimension"):
        call_batch(network, ScenarioSettings("single-stream"))


def test_fixed_batch_calls_are_padded_and_accuracy_rows_decode() -> None:
    network = _fixed_model(4)
    settings = ScenarioSettings("multi-stream", mode="accuracy", samples_per_query=6,
                                performance_sample_count=9)  # fmt: skip
    executor = _MatMul(network)
    sut = InferenceSUT(executor, network, settings)
    assert len(sut.samples) == 9 and sut.batch == 4
    rows = sut.run_call([0, 5, 7])
    assert executor.batches == [4]  # three samples padded to the fixed batch
    assert rows is not None and len(rows) == 3
    assert sut.stats.layout == [OutputLayout("y", "float32", (2,))]
    for index, data in zip([0, 5, 7], rows, strict=True):
        expected = sut.samples[index]["x"][0] @ network.parameters["w"]
        decoded = decode_response(data, sut.stats.layout)["y"]
        np.testing.assert_allclose(decoded, expected, rtol=1e-6)
    with pytest.raises(UsageError, match="does not match the outputs' layout"):
        decode_response(rows[0][:-1], [o.to_json() for o in sut.stats.layout])


def test_queries_are_split_into_calls_of_the_batch() -> None:
    network = _fixed_model(None)
    settings = ScenarioSettings("offline", performance_sample_count=5)
    sut = InferenceSUT(_MatMul(network), network, settings, batch=2)

    class Sample:
        def __init__(self, i: int) -> None:
            self.id, self.index = 100 + i, i % 5

    sut.issue_query([Sample(i) for i in range(5)])
    work = [sut._queue.get_nowait() for _ in range(3)]
    assert work == [[(100, 0), (101, 1)], [(102, 2), (103, 3)], [(104, 4)]]
    assert sut.stats.queries == 1


# -- storage ---------------------------------------------------------------------------------


def _result(logs: Path) -> ScenarioResult:
    return ScenarioResult(
        executor="numpy", scenario="single-stream", mode="performance", valid=True,
        failed_checks=[], metric_name="90.0th percentile latency (s)", metric_value=0.0005,
        percentiles_s={p: 0.0004 + i * 1e-4 for i, p in enumerate(PERCENTILES)},
        qps_with_overhead=1800.0, qps_without_overhead=1900.0,
        early_stopping={"met": True, "lines": [], "estimates_s": {"90": 0.00051, "99": 0.0009}},
        latencies_s=[0.0004, 0.0005, 0.0006], log_dir=str(logs),
        settings=ScenarioSettings("single-stream", performance_sample_count=128),
        threads={"count": 2, "environment": {"OMP_NUM_THREADS": "2"}}, samples_issued=3,
    )  # fmt: skip


def test_store_scenario_writes_the_figures_and_keeps_the_logs_in_the_database(
    tmp_path: Path,
) -> None:
    logs = _log_dir(tmp_path, MULTI_SUMMARY)
    db = tmp_path / "results.sqlite"
    with ResultsStore.open(db) as store:
        with store.run(RUN_KIND, run_name("lenet5", "single-stream")) as run_id:
            facts = store_scenario(store, run_id, _result(logs), "lenet5")
            record_failure(store, run_id, "lenet5", "single-stream", "torch",
                           "the torch worker was killed\nby SIGKILL")  # fmt: skip
        run = store.get_run(run_id)
        measurements = store.measurements(run_id)
        metrics = {(m.name, m.labels["executor"]): m for m in store.metrics(run_id)}
        kept = store.artifact_names(run_id)
        summary = store.read_artifact(run_id, "numpy/mlperf_log_summary.txt")
    assert (run.kind, run.name, run.status) == ("inference", "inference lenet5 single-stream",
                                                "complete")  # fmt: skip
    [latency] = measurements
    assert latency.metric == "latency" and latency.unit == "s" and latency.better == "lower"
    assert latency.labels == {"executor": "numpy", "scenario": "single-stream",
                              "mode": "performance"}  # fmt: skip
    assert latency.n == 3
    names = {name for name, _ in metrics}
    assert names == {f"latency_p{p}" for p in PERCENTILES} | {
        "qps", "qps_without_overhead", "valid", "early_stopping_latency_p90",
        "early_stopping_latency_p99",
    }  # fmt: skip
    assert metrics[("valid", "numpy")].value == 1.0
    assert metrics[("qps", "numpy")].unit == "queries/s"
    assert metrics[("latency_p99.9", "numpy")].labels == {
        "executor": "numpy",
        "scenario": "single-stream",
    }
    assert kept == [
        "numpy/mlperf_log_detail.txt", "numpy/mlperf_log_summary.txt",
        "numpy/mlperf_log_trace.json",
    ]  # fmt: skip
    assert summary.decode() == MULTI_SUMMARY
    assert not (tmp_path / "results.artifacts").exists()  # nothing beside the database
    assert [facts["artifacts"] + name for name in facts["log_files"]] == kept
    config = run.config[CONFIG_KEY]
    assert config["model"] == "lenet5" and config["scenario"] == "single-stream"
    assert config["executors"]["numpy"]["artifacts"] == "numpy/"
    assert config["executors"]["numpy"]["log_dir"] == str(logs) == facts["log_dir"]
    assert config["executors"]["numpy"]["threads"]["count"] == 2
    assert config["executors"]["numpy"]["settings"]["performance_sample_count"] == 128
    assert config["executors"]["torch"] == {"error": "the torch worker was killed by SIGKILL"}


def test_large_logs_are_kept_compressed(tmp_path: Path) -> None:
    logs = _log_dir(tmp_path, MULTI_SUMMARY, trace=TRACE * (COMPRESS_ABOVE // len(TRACE) + 1))
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        run_id = store.begin_run(RUN_KIND, "logs")
        kept = keep_logs(store, run_id, logs, "numpy/")
        assert kept == [
            "mlperf_log_detail.txt", "mlperf_log_summary.txt", "mlperf_log_trace.json.gz",
        ]  # fmt: skip
        data = gzip.decompress(store.read_artifact(run_id, "numpy/mlperf_log_trace.json.gz"))
        assert data == (logs / "mlperf_log_trace.json").read_bytes()
        summary = store.read_artifact(run_id, "numpy/mlperf_log_summary.txt")
        assert summary.decode() == MULTI_SUMMARY
        with pytest.raises(UsageError, match="does not exist; nothing to keep"):
            keep_logs(store, run_id, tmp_path / "missing", "torch/")


def test_logs_kept_beside_the_database_by_older_runs_are_still_listed(tmp_path: Path) -> None:
    db = tmp_path / "results.sqlite"
    with ResultsStore.open(db) as store:
        run_id = store.begin_run(RUN_KIND, "old")
        old = artifacts_dir(db, run_id) / "numpy"
        old.mkdir(parents=True)
        (old / "mlperf_log_summary.txt").write_text(MULTI_SUMMARY)
        store.add_artifact(run_id, "torch/mlperf_log_summary.txt", b"new")
        assert kept_log_names(store, run_id) == [
            "numpy/mlperf_log_summary.txt", "torch/mlperf_log_summary.txt",
        ]  # fmt: skip
