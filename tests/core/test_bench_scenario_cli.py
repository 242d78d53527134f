"""Issue 19: bad settings of ``d5 bench net --scenario`` are refused with one line and
exit 2 before anything runs or is stored (no results database is even created).

Core lane: no executor runs; the settings are checked before the model or an executor
is loaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5core.errors import UsageError
from d5core.loadgen.loadgen import ScenarioResult
from d5core.loadgen.runner import ExecutorOutcome, failures
from d5core.loadgen.scenario_cmd import (
    SCENARIO_FLAGS,
    check_no_scenario_options,
    outcome_table,
)
from d5core.loadgen.settings import ScenarioSettings


def _bench(d5_cli, db: Path, *args: str):
    return d5_cli("bench", "net", "lenet5", "--executors", "numpy", "--db", str(db), *args)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--scenario", "server", "--target-qps", "-5"], ["--target-qps", "positive", "-5"]),
        (["--scenario", "server", "--target-qps", "0"], ["--target-qps", "positive"]),
        (["--scenario", "server", "--latency-bound", "0"], ["--latency-bound", "positive"]),
        (["--scenario", "single-stream", "--latency-bound", "-1"], ["--latency-bound"]),
        (
            ["--scenario", "streaming"],
            [
                "unknown scenario",
                "'streaming'",
                "single-stream",
                "multi-stream",
                "server",
                "offline",
            ],
        ),
        (["--scenario", "offline", "--find-peak"], ["--find-peak", "server", "offline"]),
        (["--find-peak"], ["--find-peak", "--scenario"]),
        (["--target-qps", "10"], ["--target-qps", "--scenario"]),
        (["--threads", "1"], ["--threads", "--scenario"]),
        (["--accuracy"], ["--accuracy", "--scenario"]),
        (["--scenario", "offline", "--target-qps", "10"], ["--target-qps", "server", "offline"]),
        (["--scenario", "server", "--samples-per-query", "4"], ["--samples-per-query"]),
        (["--scenario", "multi-stream", "--samples-per-query", "0"], ["--samples-per-query"]),
        (["--scenario", "offline", "--expected-qps", "-1"], ["--expected-qps"]),
        (["--scenario", "offline", "--latency-bound", "5"], ["--latency-bound", "offline"]),
        (["--scenario", "offline", "--min-duration", "0"], ["--min-duration"]),
        (["--scenario", "offline", "--min-query-count", "0"], ["--min-query-count"]),
        (["--scenario", "offline", "--threads", "0"], ["--threads"]),
        (["--scenario", "offline", "--processes", "3"], ["--processes", "LoadGen"]),
        (["--scenario", "offline", "--time-budget", "1"], ["--time-budget"]),
        (["--scenario", "offline", "--breakdown"], ["--breakdown"]),
        (["--scenario", "offline", "--mode", "train-step"], ["train-step", "inference"]),
        (["--scenario", "server", "--find-peak"], ["--find-peak", "--latency-bound"]),
    ],
)
def test_bad_settings_exit_2_with_one_line_and_store_nothing(d5_cli, tmp_path, args, words):
    db = tmp_path / "results.sqlite"
    result = _bench(d5_cli, db, *args)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("d5: error: ")
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    assert result.stdout == ""
    assert not db.exists()


def test_an_unknown_executor_is_refused_before_anything_is_stored(
    d5_cli, d5_plugin_manager, tmp_path
):
    db = tmp_path / "results.sqlite"
    result = d5_cli(
        "bench", "net", "lenet5", "--executors", "no-such-executor", "--scenario", "offline",
        "--db", str(db),
    )  # fmt: skip
    assert result.exit_code == 2, result.stderr
    assert result.stderr.count("\n") == 1
    assert "no-such-executor" in result.stderr
    assert not db.exists()


def test_an_executor_named_twice_is_refused(d5_cli, tmp_path):
    db = tmp_path / "results.sqlite"
    result = d5_cli(
        "bench", "net", "lenet5", "--executors", "numpy,numpy", "--scenario", "offline",
        "--db", str(db),
    )  # fmt: skip
    assert result.exit_code == 2 and "twice" in result.stderr
    assert not db.exists()


def test_every_scenario_option_is_refused_without_a_scenario():
    for name, flag in SCENARIO_FLAGS.items():
        value = True if name in ("find_peak", "accuracy") else 1
        with pytest.raises(UsageError, match=flag):
            check_no_scenario_options({name: value})
    check_no_scenario_options(dict.fromkeys(SCENARIO_FLAGS))  # none given: fine
    check_no_scenario_options({"find_peak": False, "accuracy": False})


# -- what decides exit 1, and the table -------------------------------------------------------


def _outcome(
    executor: str,
    *,
    valid: bool | None = True,
    failed: tuple[str, ...] = (),
    peak: object = None,
    accuracy: dict[str, object] | None = None,
) -> ExecutorOutcome:
    settings = ScenarioSettings(scenario="server", latency_bound_ms=10.0, target_qps=50.0)
    result = ScenarioResult(
        executor=executor, scenario="server", mode="performance", valid=valid,
        failed_checks=list(failed), metric_name="Completed samples per second",
        metric_value=49.5, percentiles_s={"50": 1e-3, "90": 2e-3, "99": 4e-3, "99.9": 5e-3},
        qps_with_overhead=49.5, qps_without_overhead=60.0,
        early_stopping={"met": True, "lines": [], "estimates_s": {"99": 4.5e-3}},
        latencies_s=[1e-3], log_dir="/nowhere", settings=settings,
        threads={"count": 1, "describe": f"{executor} 1 thread (OMP_NUM_THREADS)"},
        samples_issued=100,
    )  # fmt: skip
    return ExecutorOutcome(executor, result, peak=peak, accuracy=accuracy)


def test_failures_name_each_executor_that_makes_the_command_exit_1():
    from d5core.loadgen.peak import PeakResult

    good = _outcome("numpy", peak=PeakResult("numpy", qps=80.0), accuracy={"passed": True})
    assert failures([good]) == []
    bad = [
        _outcome("torch", valid=False, failed=("Performance constraints satisfied",)),
        _outcome("onnxruntime", peak=PeakResult("onnxruntime", qps=None)),
        _outcome("wrong", accuracy={"passed": False, "message": "3 of 128 samples differ"}),
    ]
    assert failures([good, *bad]) == [
        "torch: INVALID (Performance constraints not satisfied)",
        "onnxruntime: no VALID server QPS found under the latency bound",
        "wrong: accuracy check failed (3 of 128 samples differ)",
    ]


def test_the_table_has_one_row_per_executor_with_its_figures():
    from rich.console import Console

    outcomes = [
        _outcome("numpy", accuracy={"passed": True, "checked": 128, "failed": 0}),
        _outcome("wrong", valid=False, failed=("Early stopping satisfied",),
                 accuracy={"passed": False, "checked": 128, "failed": 3}),
    ]  # fmt: skip
    console = Console(width=400, record=True, no_color=True)
    console.print(outcome_table("lenet5", "server", "abc123", outcomes))
    text = console.export_text()
    numpy_row = next(line for line in text.splitlines() if "│ numpy" in line)
    wrong_row = next(line for line in text.splitlines() if "│ wrong" in line)
    for cell in ("VALID", "Completed samples per second = 49.5", "1 ms", "2 ms", "4 ms",
                 "5 ms", "60", "p99 4.5 ms", "numpy 1 thread", "passed (128 samples)"):  # fmt: skip
        assert cell in numpy_row, cell
    assert "INVALID: Early stopping not satisfied" in wrong_row
    assert "FAILED (3 of 128 differ)" in wrong_row
    assert "peak QPS" not in text  # no column without --find-peak
