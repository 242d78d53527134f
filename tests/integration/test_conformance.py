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
    assert checked == {"onnxruntime", "numpy", "torch", "tensorflow", "jax"}


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


def _stored_runs(db: Path) -> list[object]:
    from d5core.results import ResultsStore

    if not db.exists():
        return []
    with ResultsStore.open(db) as store:
        return list(store.list_runs())


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--timeout", "-1"), "--timeout must be 0 (no limit)"),
        (("--timeout", "nan"), "--timeout must be 0 (no limit)"),
        (("--timeout", "1e300"), "--timeout must be 0 (no limit)"),
        (("--limit", "0"), "--limit must be 1 or more"),
        (("--limit", "-3"), "--limit must be 1 or more"),
        (("--pattern", "^test_no_such_case$"), "matches no node case"),
    ],
    ids=["negative_timeout", "nan_timeout", "huge_timeout", "zero_limit", "negative_limit",
         "empty_selection"],
)  # fmt: skip
def test_a_bad_timeout_limit_or_empty_selection_is_one_line_and_exit_2(
    d5_cli, tmp_path, args, named
) -> None:
    db = tmp_path / "r.sqlite"
    result = d5_cli("conformance", "onnxruntime", "--db", str(db), *args)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stderr.startswith("d5: error: ") and result.stderr.count("\n") == 1
    assert named in result.stderr
    assert _stored_runs(db) == []


def test_an_empty_data_directory_is_refused_in_one_line(d5_cli, tmp_path) -> None:
    empty = tmp_path / "cases"
    empty.mkdir()
    (empty / "not_a_case").mkdir()
    result = d5_cli("conformance", "onnxruntime", "--db", str(tmp_path / "r.sqlite"),
                    "--data-dir", str(empty))  # fmt: skip
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "holds no onnx node test case" in result.stderr
    with pytest.raises(UsageError, match="holds no onnx node test case"):
        run_conformance("onnxruntime", data_dir=empty)


@pytest.mark.parametrize("broken", ["model", "data"])
def test_a_binary_or_truncated_case_file_is_refused_naming_the_case(
    d5_cli, tmp_path, broken
) -> None:
    (case,) = node_cases("^test_relu$")
    folder = tmp_path / "cases" / "test_relu"
    data = folder / "test_data_set_0"
    data.mkdir(parents=True)
    (folder / "model.onnx").write_bytes(
        b"\xff\xfe\x00garbage" if broken == "model" else case.model.SerializeToString()
    )
    from onnx import numpy_helper

    (inputs, outputs) = case.data_sets[0]
    (data / "input_0.pb").write_bytes(numpy_helper.from_array(inputs[0]).SerializeToString())
    (data / "output_0.pb").write_bytes(
        numpy_helper.from_array(outputs[0]).SerializeToString()[: 7 if broken == "data" else None]
    )
    result = d5_cli("conformance", "onnxruntime", "--db", str(tmp_path / "r.sqlite"),
                    "--data-dir", str(tmp_path / "cases"))  # fmt: skip
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "test_relu cannot be read" in result.stderr


def test_a_readable_data_directory_still_runs() -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        report = run_conformance("onnxruntime", data_dir=_one_case_dir(Path(tmp) / "cases"))
    assert (report.total, report.passed) == (1, 1)


def test_the_summary_gives_the_own_rate_beside_the_rate_with_fallback(d5_cli, tmp_path) -> None:
    """numpy runs Sin on onnx.reference and Relu on its own code: the summary line must
    not let the fallback's pass pass for the executor's."""
    db = tmp_path / "r.sqlite"
    result = d5_cli("conformance", "numpy", "--db", str(db), "--pattern", r"^test_(sin|relu)$")
    assert result.exit_code == 0, result.stderr
    line = result.stdout.splitlines()[0]
    assert "2/2 onnx" in line
    assert "(100.0% with its fallback; 1/2, 50.0%, on its own code)" in line
    again = d5_cli("conformance", "numpy", "--db", str(db), "--pattern", r"^test_(sin|relu)$",
                   "--json")  # fmt: skip
    data = read_json(again.stdout)
    assert (data["passed_with_fallback"], data["passed_own"], data["own_pass_rate"]) == (1, 1, 0.5)
    (run, *_) = _stored_runs(db)
    assert run.config["passed_with_fallback"] == 1


#: The five bfloat16 Attention cases whose tensorflow passes an independent recount
#: disputed (their ``_expanded`` forms are what tensorflow runs).
BF16_ATTENTION = (
    r"^test_attention_(3d_causal|4d_attn_mask_causal|4d_causal|4d_causal_padded_kv|"
    r"4d_padded_kv)_bf16$"
)


def _gives(value: np.ndarray):
    class _Gives:
        def __init__(self, model) -> None:
            self.name = model.graph.output[0].name

        def inference(self, feeds):
            return {self.name: value}

    return _Gives


def test_the_exact_answer_of_a_bf16_case_passes_though_it_is_not_within_rtol_1e_3() -> None:
    """onnx's expected bfloat16 outputs carry bfloat16 rounding: the exact answer
    (float64 from the bfloat16 inputs, rounded once) differs from them by up to two ulps,
    far beyond rtol=1e-3. d5 judges bfloat16 as onnx's runner does, with two ulps of
    relative tolerance, so the exact answer passes and one 6 % off does not."""
    from d5core.testing.attention_reference import attention_float64

    cases = node_cases(BF16_ATTENTION)
    assert len(cases) == 5
    for case in cases:
        graph = case.model.graph
        inputs, (expected,) = case.data_sets[0]
        feeds = {info.name: value for info, value in zip(graph.input, inputs, strict=False)}
        exact = attention_float64(graph.node[0], feeds)
        rounded = exact.astype(expected.dtype)
        as_32 = expected.astype(np.float32)
        assert not np.allclose(rounded.astype(np.float32), as_32, rtol=1e-3, atol=1e-7)
        assert run_case(_gives(rounded), case).status == "passed", case.name
        off = (exact * (1 + 2**-4)).astype(expected.dtype)
        result = run_case(_gives(off), case)
        assert result.status == "failed" and "rtol=0.015625" in result.message, case.name


def _one_case_dir(root: Path) -> Path:
    """A --data-dir holding test_relu only, written as onnx's generator lays it out."""
    from onnx import numpy_helper

    (case,) = node_cases("^test_relu$")
    data = root / "test_relu" / "test_data_set_0"
    data.mkdir(parents=True)
    (root / "test_relu" / "model.onnx").write_bytes(case.model.SerializeToString())
    (inputs, outputs) = case.data_sets[0]
    (data / "input_0.pb").write_bytes(numpy_helper.from_array(inputs[0]).SerializeToString())
    (data / "output_0.pb").write_bytes(numpy_helper.from_array(outputs[0]).SerializeToString())
    return root


def test_a_baseline_under_a_file_is_refused_before_any_case_runs(d5_cli, tmp_path) -> None:
    (tmp_path / "plain").write_text("x")
    db = tmp_path / "r.sqlite"
    result = d5_cli("conformance", "onnxruntime", "--db", str(db), "--data-dir",
                    str(_one_case_dir(tmp_path / "cases")), "--update-baseline",
                    "--baseline", str(tmp_path / "plain" / "b.json"))  # fmt: skip
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "which is not a directory" in result.stderr
    assert _stored_runs(db) == []


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
@pytest.mark.parametrize("update", [False, True], ids=["read", "update"])
def test_a_device_as_baseline_is_refused_before_any_case_runs(d5_cli, tmp_path, update) -> None:
    """/dev/zero reads without end and /dev/full takes no write: neither is a baseline."""
    db = tmp_path / "r.sqlite"
    device = "/dev/full" if update and Path("/dev/full").exists() else "/dev/zero"
    result = d5_cli("conformance", "onnxruntime", "--db", str(db), "--data-dir",
                    str(_one_case_dir(tmp_path / "cases")), "--baseline", device,
                    *(["--update-baseline"] if update else []))  # fmt: skip
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and "is not a regular file" in result.stderr
    assert _stored_runs(db) == []
