"""Issue 28, section 5: accuracy while timed: the outputs of the timed callable, sampled
inside the timed loop (the engine, LoadGen's system under test), checked against the
untimed ones after timing."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from d5core.lv0.timed_accuracy import as_arrays, check_sampled
from d5core.measure.audit import OutputSample
from d5core.measure.engine import MeasureOptions, measure

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cheaters import install_cheaters

BRIEF_AUDIT = ["--processes", "3", "--min-samples", "8", "--time-budget", "0.05", "--warmup", "1"]


def test_the_engine_keeps_what_the_chosen_timed_samples_returned():
    calls = []

    def fn() -> int:
        calls.append(None)
        return len(calls)

    keep = OutputSample(frozenset({0, 2}))
    options = MeasureOptions(warmup=2, min_samples=6, max_samples=6, rel_ci=0.0)
    m = measure(fn, options, keep=keep)
    assert len(keep.outputs) == 2
    before = m.warmup_runs + m.calibration_runs
    # The last call of sample 0 and of sample 2, counted after warm-up and calibration.
    assert keep.outputs == [before + m.block_size, before + 3 * m.block_size]


def test_a_timed_output_that_differs_from_the_untimed_one_fails_the_check():
    expected = [np.arange(6.0).reshape(2, 3)]
    assert check_sampled([[expected[0].copy()]] * 3, expected).status == "pass"
    wrong = check_sampled([[expected[0] + 1]], expected)
    assert wrong.failed and "output 0 differs" in wrong.detail


def test_a_timed_callable_that_returns_nothing_fails_the_check():
    found = check_sampled([None], [np.zeros(3)])
    assert found.status == "empty" and found.failed


def test_timed_outputs_are_read_from_dicts_tuples_and_io_bindings():
    class Binding:
        def copy_outputs_to_cpu(self) -> list[np.ndarray]:
            return [np.ones(2)]

    (got,) = as_arrays(Binding())
    assert got.tolist() == [1.0, 1.0]
    assert [a.tolist() for a in as_arrays({"x": np.zeros(1), "y": np.ones(1)}, names=["y"])] == [
        [1.0]
    ]
    assert as_arrays({"x": np.zeros(1)}, names=["missing"]) is None


def _sut(executor_class: type) -> object:
    from d5core.loadgen.settings import ScenarioSettings
    from d5core.loadgen.sut import InferenceSUT
    from d5core.lv1.runner import load_model

    network = load_model("mlp")
    settings = ScenarioSettings("single-stream", performance_sample_count=4)
    return InferenceSUT(executor_class(network), network, settings)


def test_loadgen_checks_the_outputs_of_prepared_calls_made_under_load():
    from d5_plugin_numpy.executor import NumpyExecutor

    sut = _sut(NumpyExecutor)
    for k in range(20):
        sut.run_call([k % 4])
    found = sut.timed_accuracy()
    assert (found.status, found.checked) == ("pass", 3)


def test_loadgen_fails_an_executor_whose_prepared_call_is_idle_or_stale(tmp_path):
    install_cheaters(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        from d5_cheaters import IdleExecutor, StaleExecutor
    finally:
        sys.path.remove(str(tmp_path))
    for cheater, status in ((IdleExecutor, "empty"), (StaleExecutor, "fail")):
        sut = _sut(cheater)
        for k in range(20):  # never sample 0, whose outputs the stale executor keeps
            sut.run_call([1 + k % 3])
        assert sut.timed_accuracy().status == status, cheater.__name__


def test_the_report_draws_each_audited_backend_s_verdicts_as_stored(tmp_path):
    from d5core.lv0 import audit_figures
    from d5core.results.store import ResultsStore
    from d5core.testing.report_runs import report_runs

    checks = [
        {"subject": "caching", "check": "accuracy while timed", "passed": True, "line": "",
         "data": {}},
        {"subject": "caching", "check": "no caching", "passed": False, "line": "",
         "data": {"ratio": 0.01}},
        {"subject": "caching", "check": "seed variation", "passed": True, "line": "",
         "data": {}},
    ]  # fmt: skip
    with ResultsStore.open(tmp_path / "r.sqlite") as store:
        with store.run("audit", "audit op Relu", config={"checks": checks}) as run_id:
            pass
        with store.run("op", "bench Relu") as other:
            pass
        runs = report_runs(store, [run_id, other])
    (figure,) = audit_figures.figures(runs)
    assert figure.runs == (run_id,) and figure.section == "audit"
    (row,) = figure.data["rows"]
    assert row["subject"] == "caching" and row["ratio"] == 0.01
    assert row["checks"] == {
        "accuracy while timed": True, "no caching": False, "seed variation": True
    }  # fmt: skip
    assert audit_figures.figures(runs[1:]) == []


def _timed_check(job) -> dict:
    sample = OutputSample(frozenset({0, 1}))
    sample.outputs.extend(job.fn() for _ in range(2))
    return job.check(sample)


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_the_timed_callables_of_real_operators_pass_the_check(backend, direction):
    from d5core.lv0.jobs import op_job, problem_to_json
    from d5core.lv0.runner import problem_for

    for op in ("Gemm", "Conv", "Softmax"):
        problem = problem_to_json(problem_for(op))
        job = op_job(problem, backend, "float32", direction, 0)
        found = _timed_check(job)
        assert found["status"] == "pass", (op, found)


@pytest.mark.parametrize("executor", ["numpy", "torch", "onnxruntime"])
def test_the_timed_steps_of_real_executors_pass_the_check(executor):
    from d5core.lv1.jobs import net_job

    modes = ["inference"] + (["train-step"] if executor != "onnxruntime" else [])
    for mode in modes:
        found = _timed_check(net_job("mlp", executor, 4, mode, 0))
        assert found["status"] == "pass", (mode, found)


def test_an_mxnet_style_array_is_read_through_asnumpy_though_it_has_detach():
    class NDArray:  # MXNet's NDArray has detach() but no numpy()
        def asnumpy(self) -> np.ndarray:
            return np.full(2, 3.0)

        def detach(self) -> NDArray:
            return self

    (got,) = as_arrays((NDArray(),))
    assert got.tolist() == [3.0, 3.0]
