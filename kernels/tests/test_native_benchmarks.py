"""The native kernels' benchmark scripts (benchmarks/native_gemm.py, native_conv.py) run
end to end on tiny problems and report what they promise: every side's GFLOP/s as a
share of the FMA peak, the ratios with their per-round range, the load each row was
measured at, and OpenBLAS left to its own kernels. No speed is asserted. They live in the
kernels lane, whose environment has d5-kernels and its ``bench`` extra (torch,
threadpoolctl) that the scripts import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# Short and never waiting: the tests check the report, not the machine.
QUICK = ["--threads", "1", "--rounds", "2", "--retries", "0", "--max-wait", "0"]
QUICK += ["--wait-budget", "0"]

pytestmark = pytest.mark.slow


def run_script(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OPENBLAS_")}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / name), *args],
        capture_output=True,
        text=True,
        env={**environ, **(env or {})},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def gemm_report() -> dict[str, Any]:
    args = ["--sizes", "64", "--shapes", "48x16x32:At", "--dtype", "float32,float64", *QUICK]
    report: dict[str, Any] = json.loads(run_script("native_gemm.py", *args, "--json"))
    return report


def _check_side(side: dict[str, float], roof: float) -> None:
    assert side["gflops"] > 0 and side["ms"] > 0
    assert side["peak_fraction"] == pytest.approx(side["gflops"] / roof)


def _check_ratio(ratio: dict[str, float], native: float, other: float) -> None:
    assert ratio["ratio"] == pytest.approx(native / other)
    assert 0 < ratio["min"] <= ratio["max"]


def _check_load(report: dict[str, Any]) -> None:
    for row in report["rows"]:
        assert row["load_under_cores"] == (row["load"] < report["cores"])
        assert row["attempts"] == 1  # --retries 0
    assert report["all_rows_under_cores"] == all(r["load_under_cores"] for r in report["rows"])
    assert report["waiting"]["spent_s"] == 0


def test_gemm_report_has_every_dtype_shape_and_side_as_a_share_of_the_peak(gemm_report):
    assert gemm_report["machine"] and gemm_report["isa"] in gemm_report["isa_line"]
    peaks = gemm_report["peak_gflops_per_core"]
    assert set(peaks) == {"float32", "float64"} and min(peaks.values()) > 0
    rows = gemm_report["rows"]
    assert [(r["dtype"], r["shape"]) for r in rows] == [
        ("float32", "64x64x64"),
        ("float32", "48x16x32:At"),
        ("float64", "64x64x64"),
        ("float64", "48x16x32:At"),
    ]
    for row in rows:
        assert row["threads"] == 1
        assert row["roof_gflops"] == pytest.approx(peaks[row["dtype"]])
        assert row["flops"] == 2 * row["m"] * row["n"] * row["k"]
        for side in ("native", "numpy", "torch"):
            _check_side(row[side], row["roof_gflops"])
        for other in ("numpy", "torch"):
            ratio = row[f"native_vs_{other}"]
            _check_ratio(ratio, row["native"]["gflops"], row[other]["gflops"])
        assert row["native_vs_best"] == min(
            row["native_vs_numpy"]["ratio"], row["native_vs_torch"]["ratio"]
        )
    assert rows[1]["trans_a"] and not rows[1]["trans_b"]
    _check_load(gemm_report)


def test_gemm_restarts_without_openblas_overrides_so_openblas_picks_its_kernels(gemm_report):
    # Forced to Haswell, OpenBLAS would report Haswell kernels; the script must start
    # again without the variable and report what OpenBLAS chooses on its own.
    args = ["--sizes", "32", "--shapes", "", "--dtype", "float64", *QUICK, "--json"]
    env = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "100000"}
    report = json.loads(run_script("native_gemm.py", *args, env=env))
    assert report["openblas_env_removed"] == ["OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"]
    assert report["blas"] == gemm_report["blas"]
    assert gemm_report["openblas_env_removed"] == []


def test_gemm_table_names_the_kernels_peak_and_load():
    args = ["--sizes", "32", "--shapes", "", "--dtype", "float32", *QUICK]
    text = run_script("native_gemm.py", *args)
    assert "machine: " in text and "load average" in text
    assert "d5-kernels ISA" in text and "FMA peak per core" in text
    assert "| float32 | 1 | 32x32x32 |" in text
    assert "of the faster library on" in text
    assert "stay under the core count" in text or "stayed under the core count" in text


def test_gemm_rejects_an_unreadable_shape_in_one_line():
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / "native_gemm.py"), "--shapes", "12x3", *QUICK],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1].startswith("cannot read GEMM shape '12x3'")


def test_conv_report_names_the_native_algorithm_and_the_resnet_layers():
    from d5core.testing.operators import suite

    args = ["--suite", "resnet20-conv3x3", "--batch", "1", *QUICK, "--json"]
    report = json.loads(run_script("native_conv.py", *args))
    problems = [p for p in suite("resnet20-conv3x3") if p.inputs[0].shape[0] == 1]
    rows = report["rows"]
    assert [r["problem"] for r in rows] == [p.label for p in problems]
    assert [r["flops"] for r in rows] == [p.flops for p in problems]
    peak = report["peak_gflops_per_core"]["float32"]
    for row in rows:
        assert row["algorithm"]  # whatever lowering the native operator chose
        assert row["roof_gflops"] == pytest.approx(peak)
        for side in ("native", "torch"):
            _check_side(row[side], row["roof_gflops"])
        ratio = row["native_vs_torch"]
        _check_ratio(ratio, row["native"]["gflops"], row["torch"]["gflops"])
    _check_load(report)


@pytest.fixture
def rounds(monkeypatch: pytest.MonkeyPatch) -> Any:
    """benchmarks/_rounds.py on a 2-core machine whose load the test sets."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import _rounds

    monkeypatch.setattr(_rounds, "cores", lambda: 2)
    return _rounds


def _busy_during_first_attempt(rounds: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A row during whose first measurement the load reaches 3 (over 2 cores); it is 0.5
    at any other time."""
    attempts: list[int] = []
    level = [0.5]

    def measure(watch: Any) -> dict[str, Any]:
        attempts.append(len(attempts) + 1)
        level[0] = 3.0 if len(attempts) == 1 else 0.5
        watch.sample()  # as interleaved() does after each round
        level[0] = 0.5
        return {"attempt": attempts[-1]}

    monkeypatch.setattr(rounds, "load1", lambda: level[0])
    return measure


def test_a_row_the_load_rose_during_is_measured_again(rounds, monkeypatch):
    measure = _busy_during_first_attempt(rounds, monkeypatch)
    row = rounds.measure_row(measure, 2, rounds.Waiting(60.0, 60.0))
    assert row["attempt"] == 2 and row["attempts"] == 2
    assert row["load"] == 0.5 and row["load_under_cores"]


def test_a_row_out_of_retries_is_kept_and_marked_over_the_core_count(rounds, monkeypatch):
    measure = _busy_during_first_attempt(rounds, monkeypatch)
    row = rounds.measure_row(measure, 0, rounds.Waiting(60.0, 60.0))
    assert row["attempts"] == 1 and row["load"] == 3.0 and not row["load_under_cores"]
    report = {"rows": [row], "retries": 0, "waiting": rounds.Waiting(5, 9).report()}
    assert "did NOT stay under the core count during 1 of 1 rows" in rounds.load_footer(report)


def test_a_busy_row_is_not_retried_once_the_wait_budget_is_spent(rounds, monkeypatch):
    # Without time to wait for a quiet machine, measuring again at once would most
    # likely meet the same competition; the run's length stays bounded.
    measure = _busy_during_first_attempt(rounds, monkeypatch)
    row = rounds.measure_row(measure, 2, rounds.Waiting(60.0, 0.0))
    assert row["attempts"] == 1 and not row["load_under_cores"]
