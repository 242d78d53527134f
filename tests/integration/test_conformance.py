"""``d5 conformance``: onnx's backend node tests against executors, and baselines."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from d5core.cli.output import read_json
from d5core.errors import UsageError
from d5core.lv1.conformance import (
    ConformanceReport,
    check_baseline,
    node_cases,
    run_case,
    run_conformance,
)
from d5core.plugins.catalog import installed_versions

SMALL = r"^test_(relu|add)(_|$)"
#: test_adagrad needs the ai.onnx.preview.training domain, which onnxruntime's inference
#: build does not implement: it is unsupported, never passing.
WITH_UNSUPPORTED = r"^test_(relu|adagrad)$"


def test_small_pattern_passes_on_onnxruntime_and_is_classified() -> None:
    expected_names = {c.name for c in node_cases(SMALL)}
    report = run_conformance("onnxruntime", pattern=SMALL)
    assert {r.name for r in report.results} == expected_names
    assert report.total == len(expected_names) >= 5
    assert report.counts == {"passed": report.total, "failed": 0, "unsupported": 0, "error": 0}
    assert report.pass_rate == 1.0
    assert set(report.by_op_type()) == {"Relu", "Add"}
    assert report.failures == []
    assert "test_relu" in report.passing


def test_unsupported_operator_is_classified_unsupported() -> None:
    report = run_conformance("onnxruntime", pattern=WITH_UNSUPPORTED)
    status = {r.name: r.status for r in report.results}
    assert status == {"test_relu": "passed", "test_adagrad": "unsupported"}
    (adagrad,) = [r for r in report.results if r.name == "test_adagrad"]
    assert "Adagrad" in adagrad.message and "\n" not in adagrad.message
    assert report.by_op_type()["Adagrad"]["unsupported"] == 1


def test_limit_runs_the_first_cases_by_name() -> None:
    report = run_conformance("onnxruntime", pattern=SMALL, limit=2)
    assert [r.name for r in report.results] == sorted(c.name for c in node_cases(SMALL))[:2]
    assert not report.complete


class _Wrong:
    def __init__(self, model) -> None:
        self.outputs = [o.name for o in model.graph.output]

    def inference(self, feeds):
        return {name: np.zeros((1,), np.float32) for name in self.outputs}


class _Refuses:
    def __init__(self, model) -> None:
        raise UsageError(f"cannot run operator {model.graph.node[0].op_type} here")


class _Crashes:
    def __init__(self, model) -> None:
        pass

    def inference(self, feeds):
        raise RuntimeError("boom\nsecond line")


class _Slow(_Crashes):
    def inference(self, feeds):
        time.sleep(5)


@pytest.mark.parametrize(
    ("factory", "status", "message"),
    [
        (_Wrong, "failed", "output 'y': shape (1,), expected (3, 4, 5)"),
        (_Refuses, "unsupported", "UsageError: cannot run operator Relu here"),
        (_Crashes, "error", "RuntimeError: boom"),
        (_Slow, "error", "timed out after 0.2 s"),
    ],
)
def test_each_outcome_is_classified(factory, status, message) -> None:
    (case,) = node_cases("^test_relu$")
    result = run_case(factory, case, timeout_s=0.2)
    assert (result.name, result.op_type, result.status) == ("test_relu", "Relu", status)
    assert result.message == message


def test_bad_pattern_and_unknown_executor_are_usage_errors(d5_cli) -> None:
    result = d5_cli("conformance", "onnxruntime", "--pattern", "(")
    assert result.exit_code == 2
    assert "is not a regular expression" in result.stderr
    result = d5_cli("conformance", "no-such-executor", "--pattern", "^test_relu$")
    assert result.exit_code == 2


#: Executors whose baseline entry is recorded, and checked, in an environment of their
#: own (MXNet needs numpy 1.23): their plugin's tests hold it to that environment.
ENVIRONMENT_OF_ITS_OWN = {"mxnet"}


def _installed(executor: str) -> dict[str, str]:
    """The versions a baseline of ``executor`` recorded here would hold."""
    import onnx

    from d5core.plugins import get_plugin_manager

    distribution = get_plugin_manager().record("d5.frameworks", executor).distribution
    return {**installed_versions(distribution), "onnx": onnx.__version__}


def _baseline(path: Path, passed: int, passing: list[str] | None = None) -> Path:
    entry: dict[str, object] = {
        "passed": passed,
        "total": 1884,
        "versions": _installed("onnxruntime"),
    }
    if passing is not None:
        entry["passing"] = passing
    path.write_text(json.dumps({"onnxruntime": entry}))
    return path


def test_baseline_with_more_passing_cases_exits_1_naming_them(d5_cli, tmp_path) -> None:
    baseline = _baseline(tmp_path / "b.json", 2, ["test_adagrad", "test_relu"])
    result = d5_cli(
        "conformance", "onnxruntime", "--pattern", WITH_UNSUPPORTED, "--baseline", str(baseline)
    )
    assert result.exit_code == 1, result.stderr
    assert "1 case(s) pass, the baseline" in result.stderr
    assert "expects 2; newly failing: test_adagrad" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_baseline_count_without_names_is_compared_as_is(d5_cli, tmp_path) -> None:
    baseline = _baseline(tmp_path / "b.json", 10_000)
    result = d5_cli(
        "conformance", "onnxruntime", "--pattern", SMALL, "--json", "--baseline", str(baseline)
    )
    assert result.exit_code == 1
    assert read_json(result.stdout, "conformance")["baseline"]["ok"] is False


def test_baseline_that_still_holds_exits_0(d5_cli, tmp_path) -> None:
    baseline = _baseline(tmp_path / "b.json", 1, ["test_relu"])
    result = d5_cli(
        "conformance", "onnxruntime", "--pattern", WITH_UNSUPPORTED, "--baseline", str(baseline)
    )
    assert result.exit_code == 0, result.stderr
    assert "onnxruntime: 1/2 onnx" in result.stdout


def test_update_baseline_needs_a_complete_run(d5_cli, tmp_path) -> None:
    result = d5_cli(
        "conformance",
        "onnxruntime",
        "--pattern",
        SMALL,
        "--update-baseline",
        "--baseline",
        str(tmp_path / "b.json"),
    )
    assert result.exit_code == 2
    assert "needs a complete run" in result.stderr


def test_check_baseline_restricts_a_selection_to_the_cases_it_ran() -> None:
    report = ConformanceReport("onnxruntime", pattern="x")
    baseline = {"onnxruntime": {"passed": 1000, "passing": ["test_a", "test_b"]}}
    check = check_baseline(report, baseline)
    assert (check.expected, check.ok, check.newly_failing) == (0, True, [])


def test_recorded_baseline_covers_onnxruntime() -> None:
    recorded = Path(__file__).resolve().parents[2] / "conformance" / "baseline.json"
    data = json.loads(recorded.read_text())
    entry = data["onnxruntime"]
    assert entry["passed"] == len(entry["passing"]) <= entry["total"]
    assert "test_relu" in entry["passing"]


@pytest.mark.parametrize("executor", ["onnxruntime", "numpy", "torch", "tensorflow"])
def test_pass_count_does_not_fall_below_the_checked_in_baseline(executor, d5_cli) -> None:
    baseline = Path(__file__).resolve().parents[2] / "conformance" / "baseline.json"
    result = d5_cli("conformance", executor, "--baseline", str(baseline), "--no-failures")
    assert result.exit_code == 0, result.stderr


def test_checked_in_baseline_matches_the_installed_framework_versions() -> None:
    """The pins in the plugins' pyproject.toml and conformance/baseline.json move together:
    a baseline counted with another onnxruntime (or torch, or onnx) is not this one's."""
    baseline = json.loads((Path(__file__).parents[2] / "conformance" / "baseline.json").read_text())
    checked = set()
    for executor, entry in baseline.items():
        if executor in ENVIRONMENT_OF_ITS_OWN:
            continue  # checked by its plugin's own session, in its environment
        assert entry.get("versions") == _installed(executor), executor
        checked.add(executor)
    assert checked == {"onnxruntime", "numpy", "torch", "tensorflow"}


def test_baseline_from_other_versions_is_named_in_a_warning(d5_cli, tmp_path) -> None:
    baseline = _baseline(tmp_path / "b.json", 1, ["test_relu"])
    data = json.loads(baseline.read_text())
    data["onnxruntime"]["versions"]["onnxruntime"] = "1.31.1"
    baseline.write_text(json.dumps(data))
    result = d5_cli(
        "conformance", "onnxruntime", "--pattern", "^test_relu$", "--baseline", str(baseline)
    )
    assert result.exit_code == 0, result.stderr
    installed = _installed("onnxruntime")["onnxruntime"]
    assert f"onnxruntime 1.31.1 -> {installed}" in result.stderr
    assert "re-record it with --update-baseline" in result.stderr


def test_recorded_baseline_keeps_the_versions_it_was_counted_with(tmp_path) -> None:
    from d5core.lv1.conformance import update_baseline

    report = run_conformance("onnxruntime", pattern="^test_relu$")
    report.pattern = None  # recorded as if complete: only the versions matter here
    written = update_baseline(tmp_path / "b.json", report)
    assert written["onnxruntime"]["versions"] == _installed("onnxruntime")
    assert check_baseline(report, written).version_changes == []
