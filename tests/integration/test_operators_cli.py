"""``d5 validate op`` and ``d5 bench op`` end to end, on the numpy and torch backends."""

from __future__ import annotations

import pytest

from d5core.cli.output import read_json
from d5core.lv0.runner import problem_for, validate_op
from d5core.lv0.workloads.problems import DEFAULT_PROBLEMS

OPS = sorted(DEFAULT_PROBLEMS)


@pytest.fixture(autouse=True)
def _private_db(tmp_path, monkeypatch):
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("op", OPS)
def test_every_operator_passes_validation(op, backend, dtype):
    """The checks ``d5 validate op`` runs in its worker, here in this process: one check
    worker per operator would start torch 100 times over (the command itself is run
    end to end below)."""
    result = validate_op(problem_for(op), backend, dtype=dtype)
    assert result.passed, result.report.failures()
    assert result.against == "numpy"
    assert result.report.outputs, "no output was compared"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("op", ["Conv", "Gemm", "LSTM"])
def test_validate_op_passes_end_to_end_in_its_check_worker(op, backend, dtype, d5_cli):
    result = d5_cli("validate", "op", op, "--backend", backend, "--dtype", dtype, "--json")
    report = read_json(result.stdout)
    assert result.exit_code == 0, report["failures"]
    assert report["passed"] is True
    assert report["against"] == "numpy"
    assert report["outputs"], "no output was compared"
    assert report["worker_failure"] == ""


SCALED = """
import numpy as np
from d5core.hookspecs import hookimpl
from d5core.levels.operators import Operator
d5_plugin_api = ">=1.0"

class ScaledTanh(Operator):
    op_type = "Tanh"
    def forward(self, inputs):
        return [np.tanh(inputs[0])]
    def backward(self, grad_outputs, inputs, outputs):
        return [1.01 * grad_outputs[0] * (1 - outputs[0] ** 2)]

@hookimpl
def d5_custom_operators():
    return {"Tanh": ScaledTanh}
"""


def test_backward_scaled_by_one_percent_fails_naming_the_input(d5_site, d5_cli):
    d5_site.add(
        "d5-plugin-scaled",
        entry_points={"d5.hooks": {"scaled": "scaled_mod"}},
        modules={"scaled_mod.py": SCALED},
    )
    result = d5_cli("validate", "op", "Tanh", "--backend", "custom", "--dtype", "float64")
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1
    assert "gradient of input 0 (X)" in result.stderr
    full = d5_cli("validate", "op", "Tanh", "--backend", "custom", "--json")
    report = read_json(full.stdout)
    failed = [g for g in report["gradients"] if not g["passed"]]
    assert {g["method"] for g in failed} == {"reference", "full"}
    assert all(g["index"] == 0 and g["name"] == "X" for g in failed)
    assert all(o["passed"] for o in report["outputs"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["validate", "op", "Frobnicate", "--backend", "numpy"], "no default problem for operator 'Frobnicate'"),
        (["validate", "op", "Relu", "--backend", "tensorflowish"], "no level 0: operator backend named 'tensorflowish'"),
        (["validate", "op", "MatMul", "--backend", "numpy", "--shape", "3x4,5x6"], "MatMul"),
        (["validate", "op", "Relu", "--backend", "torch", "--dtype", "int8"], "does not support dtype 'int8'"),
        (["validate", "op", "Relu", "--backend", "numpy", "--shape", "3xfour"], "cannot read shape '3xfour'"),
        (["bench", "op", "Gemm", "--backends", "numpy", "--suite", "nope"], "no operator suite named 'nope'"),
        (["bench", "op", "Gemm", "--backends", "numpy", "--min-samples", "2"], "min_samples must be at least 6"),
        (["bench", "op", "Gemm", "--backends", ","], "no backends given"),
    ],
)
def test_bad_input_is_a_one_line_error_with_exit_two(args, message, d5_cli):
    result = d5_cli(*args)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("d5: error: ")
    assert result.stderr.count("\n") == 1
    assert message in result.stderr


def test_bench_op_reports_each_backend_and_stores_every_sample(d5_cli, tmp_path):
    result = d5_cli(
        "bench", "op", "Gemm", "--backends", "numpy,torch", "--shape", "64x32,32x16,16",
        "--direction", "both", "--time-budget", "0.2", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = read_json(result.stdout)
    assert {(r["backend"], r["direction"]) for r in rows} == {
        ("numpy", "forward"), ("numpy", "backward"), ("torch", "forward"), ("torch", "backward"),
    }  # fmt: skip
    for row in rows:
        assert row["ci_low"] <= row["median"] <= row["ci_high"]
        assert row["n"] >= 6
        flops = 2 * 64 * 16 * 32 * (2 if row["direction"] == "backward" else 1)
        assert row["gflops"] == pytest.approx(flops / row["median"] / 1e9)
    shown = d5_cli("results", "show", rows[0]["run_id"], "--json")
    assert shown.exit_code == 0, shown.stderr
    assert rows[0]["run_id"] in shown.stdout


def test_bench_op_suite_reports_gflops_and_peak_fraction(d5_cli):
    result = d5_cli(
        "bench", "op", "Gemm", "--backends", "torch", "--suite", "cpu-small",
        "--time-budget", "0.1", "--max-samples", "20", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = read_json(result.stdout)
    assert len(rows) == 6
    assert all(r["gflops"] > 0 for r in rows)
    assert all(0 < r["peak_fraction"] < 2 for r in rows)
