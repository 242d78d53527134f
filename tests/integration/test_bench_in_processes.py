"""Issue 12 end to end on the shared plugins: ``d5 bench`` in fresh worker processes."""

from __future__ import annotations

import numpy as np
import pytest

from d5core.cli.output import read_json
from d5core.lv0.jobs import op_job, problem_to_json
from d5core.lv1.jobs import net_job
from d5core.results.store import ResultsStore


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "results.sqlite"
    monkeypatch.setenv("D5_DB", str(path))
    return path


def test_the_torch_op_job_times_what_the_in_process_path_prepares():
    from d5core.lv0.runner import backend_by_name, build_operator, prepare, problem_for

    problem = problem_for("Gemm", shapes=[(8, 4), (4, 3), (3,)])
    inputs = problem.make_inputs("float32", 3)
    operator = build_operator(backend_by_name("torch"), problem, "float32", inputs)
    expected = prepare(operator, "backward", inputs, 3)()
    got = op_job(problem_to_json(problem), "torch", "float32", "backward", 3).fn()
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_the_net_job_refuses_a_training_step_on_an_inference_only_executor():
    from d5core.errors import UsageError

    with pytest.raises(UsageError, match="runs inference only"):
        net_job("mlp", "onnxruntime", 4, "train-step", 0)


def test_bench_net_measures_each_executor_in_processes_and_stores_them(db, d5_cli):
    result = d5_cli(
        "bench", "net", "mlp", "--executors", "numpy,torch", "--batch", "4",
        "--processes", "2", "--time-budget", "0.05", "--rel-ci", "0", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = read_json(result.stdout)
    assert [r["executor"] for r in rows] == ["numpy", "torch"]
    with ResultsStore.open(db) as store:
        run = store.get_run(rows[0]["run_id"])
        measurements = store.measurements(run.id)
        for row in rows:
            assert row["processes"] == 2
            assert row["throughput"] == pytest.approx(4 / row["median"])
            mine = [m for m in measurements if m.labels["executor"] == row["executor"]]
            for m in mine:
                assert sorted(store.samples_by_process(m.id)) == [0, 1], m.metric
            (time,) = [m for m in mine if m.metric == "time"]
            assert time.summary["median"] == pytest.approx(row["median"])
        orders = [r["order"] for r in run.config["invocations"]["rounds"]]
    assert all(sorted(order) == [0, 1] for order in orders)


def test_an_unknown_executor_is_refused_before_any_run(db, d5_cli):
    result = d5_cli("bench", "net", "mlp", "--executors", "numpy,nope")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    with ResultsStore.open(db) as store:
        assert store.list_runs() == []
