"""Issue 12: ``d5 bench`` measures in fresh worker processes (items 1, 4 and 5).

Runs in the core lane (no d5 plugin installed): the operator backend is a fake plugin
installed into a temporary site, which the worker processes find through PYTHONPATH.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from d5core.cli.output import read_json
from d5core.errors import UsageError
from d5core.lv0.bench_results import by_process, gather, rate_headline, stored_summary, within_noise
from d5core.lv0.jobs import op_job, problem_from_json, problem_to_json
from d5core.lv0.workloads.problems import all_suites, conv_problem
from d5core.measure.engine import MeasureOptions, measure
from d5core.measure.invocations import Job, JobResult, ProcessRun, job_kinds, job_target
from d5core.measure.nested import BETWEEN_UNKNOWN
from d5core.measure.noise import (
    NOISE_FLOOR_ENV,
    ensure_noise_floor,
    noise_floor_override,
)
from d5core.results.store import ResultsStore

PLUGIN = """
from d5core.hookspecs import hookimpl
d5_plugin_api = ">=1.0,<2"

@hookimpl
def d5_environment_info():
    return {}
"""

BACKEND = """
import numpy as np
from d5core.levels.operators import Operator, OperatorBackend

class Relu(Operator):
    op_type = "Relu"
    def forward(self, inputs):
        return [np.maximum(inputs[0], 0)]

class Backend(OperatorBackend):
    name = "fakerelu"
    def supported(self):
        return ["Relu"]
    def create(self, op_type, attributes, inputs):
        return Relu(attributes)
"""


@pytest.fixture
def fake_backend(d5_site, monkeypatch, tmp_path):
    """A ``fakerelu`` operator backend, seen by this process and by worker processes."""
    d5_site.add(
        "d5-plugin-fakerelu",
        entry_points={
            "d5.hooks": {"fakerelu": "fakerelu_plugin"},
            "d5.operators": {
                "fakerelu": "fakerelu_backend:Backend",
                "fakerelu2": "fakerelu_backend:Backend",
            },
        },
        modules={"fakerelu_plugin.py": PLUGIN, "fakerelu_backend.py": BACKEND},
    )
    monkeypatch.setenv("PYTHONPATH", str(d5_site.path))
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))
    monkeypatch.setenv(NOISE_FLOOR_ENV, "0.03")
    return d5_site


def _bench(d5_cli, *args):
    return d5_cli(
        "bench", "op", "Relu", "--backends", "fakerelu", "--shape", "64x64",
        "--time-budget", "0.02", "--min-samples", "6", "--warmup", "1", *args,
    )  # fmt: skip


# -- item 1: jobs that build in the worker what the in-process path times -------------------


def test_op_and_net_are_job_kinds_registered_by_their_levels_through_the_hook():
    assert job_target("op") == job_kinds()["op"] == "d5core.lv0.jobs:op_job"
    assert job_target("net") == job_kinds()["net"] == "d5core.lv1.jobs:net_job"


@pytest.mark.parametrize("name", ["cpu-small", "cpu-small-conv"])
def test_every_suite_problem_survives_the_trip_to_the_worker_unchanged(name):
    for problem in all_suites()[name]:
        data = json.loads(json.dumps(problem_to_json(problem)))
        assert problem_from_json(data) == problem


def test_tuple_attributes_stay_tuples_through_json():
    problem = conv_problem(8, 8, 3, 1, 4, 3, 3, 1, 1, 1, 1)
    problem = type(problem)(problem.op, problem.inputs, {**problem.attributes, "x": (1, 2)})
    back = problem_from_json(json.loads(json.dumps(problem_to_json(problem))))
    assert back.attributes["x"] == (1, 2) and back == problem


def test_the_op_builder_times_the_same_operator_on_the_same_inputs(fake_backend):
    from d5core.lv0.runner import problem_for

    problem = problem_for("Relu", shapes=[(4, 5)])
    prepared = op_job(problem_to_json(problem), "fakerelu", "float32", "forward", 7)
    (out,) = prepared.fn()
    expected = np.maximum(problem.make_inputs("float32", 7)[0], 0)
    np.testing.assert_array_equal(out, expected)
    assert prepared.synchronize is None  # a CPU operator needs no synchronisation


# -- item 1: gathering the processes ---------------------------------------------------------


def _runs(*per_process):
    base = measure(lambda: None, MeasureOptions(min_samples=6, time_budget_s=0.001, warmup=0))
    job = Job("spin", {}, name="x")
    result = JobResult(job=job)
    for i, samples in enumerate(per_process):
        m = type(base)(**{**base.__dict__, "samples": list(samples)})
        result.runs.append(ProcessRun(0, i, 100 + i, 0, 1, m))
    return result


def test_the_headline_is_the_median_of_process_medians_with_the_between_process_ci():
    got = gather(_runs([1.0, 1.1, 1.2], [2.0, 2.1, 2.2], [3.0, 3.3, 3.1]))
    s = got.measurement.summary
    assert s.median == pytest.approx(2.1)  # not the pooled median of 9 samples (2.1 too)
    assert (s.ci_low, s.ci_high) == (got.nested.ci_low, got.nested.ci_high)
    assert s.ci_low < 1.5 and s.ci_high > 2.9  # the spread between processes, not within
    assert got.processes == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    assert got.measurement.samples == [1.0, 1.1, 1.2, 2.0, 2.1, 2.2, 3.0, 3.3, 3.1]


def test_one_process_is_labelled_and_its_within_process_ci_stands_in():
    got = gather(_runs([1.0, 1.1, 1.2, 1.05, 1.15, 1.1]))
    stored = stored_summary(got.measurement.summary, got.nested)
    assert stored["between_label"] == BETWEEN_UNKNOWN and stored["between_known"] is False
    assert stored["between_ci_low"] is None
    assert (stored["ci_low"], stored["ci_high"]) == (
        got.nested.within_ci_low, got.nested.within_ci_high,
    )  # fmt: skip


def test_the_stored_summary_keeps_the_keys_existing_readers_use():
    got = gather(_runs([1.0, 1.2, 1.1], [1.3, 1.4, 1.5], [1.1, 1.0, 1.2]))
    stored = stored_summary(got.measurement.summary, got.nested)
    assert stored["median"] == got.nested.median == pytest.approx(1.1)
    assert stored["ci_low"] == got.nested.ci_low and stored["ci_high"] == got.nested.ci_high
    assert stored["processes"] == 3 and stored["nested"]["process_medians"] == [1.1, 1.4, 1.1]
    assert 0 <= stored["between_share"] <= 1
    assert stored["within_ci_low"] <= stored["median"] <= stored["within_ci_high"]


def test_a_rate_tells_the_same_story_as_the_times_it_came_from():
    # Two processes, each an even count of samples in two modes: a median taken over the
    # rates would average the two middle rates (32 / 0.001 and 32 / 0.01 -> 17,600/s)
    # while the time's median is 5.5 ms (5,818/s).
    got = gather(_runs([0.001, 0.001, 0.01, 0.01], [0.001, 0.001, 0.01, 0.01]))
    rates = [32 / t for t in got.measurement.samples]
    summary, nested = rate_headline(got, 32.0, rates)
    times = got.measurement.summary
    assert summary.median == pytest.approx(32 / times.median) == pytest.approx(32 / 0.0055)
    assert (summary.ci_low, summary.ci_high) == (
        pytest.approx(32 / times.ci_high), pytest.approx(32 / times.ci_low),
    )  # fmt: skip
    assert nested.median == summary.median
    assert nested.process_medians == [pytest.approx(32 / m) for m in got.nested.process_medians]
    assert nested.within_ci_low == pytest.approx(32 / got.nested.within_ci_high)
    assert summary.n == len(rates) and summary.max == pytest.approx(32_000)


def test_derived_samples_are_grouped_by_their_process():
    assert by_process([1, 2, 3, 4], [1, 0, 1, 0]) == [[2, 4], [1, 3]]


def test_medians_closer_than_the_noise_floor_are_within_noise():
    close = within_noise({"a": 1.00, "b": 1.02, "c": 1.10}, 0.03)
    assert close == {"a": ["b"], "b": ["a"], "c": []}
    assert within_noise({"fast": 1.0, "slow": 1.5}, 0.4) == {"fast": [], "slow": []}
    assert within_noise({"a": 1.0, "b": 1.0}, None) == {"a": [], "b": []}


# -- item 4: the noise floor can be set for a test suite --------------------------------------


@pytest.mark.parametrize("raw", ["abc", "-0.1", "1.5", "nan"])
def test_a_bad_noise_floor_variable_is_a_usage_error(raw):
    with pytest.raises(UsageError, match=r"D5_NOISE_FLOOR must be a fraction .* such as 0\.03"):
        noise_floor_override({NOISE_FLOOR_ENV: raw})


def test_the_noise_floor_variable_replaces_the_calibration(tmp_path, monkeypatch):
    monkeypatch.setenv(NOISE_FLOOR_ENV, "0.04")
    with ResultsStore.open(tmp_path / "r.sqlite") as store:
        floor = ensure_noise_floor(store)
        assert floor.machine_floor == 0.04 and floor.source == NOISE_FLOOR_ENV
        assert store.list_runs() == []  # nothing calibrated, nothing stored
    assert noise_floor_override({}) is None


# -- items 1, 4, 5 end to end, in worker processes --------------------------------------------


def test_bench_op_measures_in_processes_and_stores_each_sample_with_its_process(
    fake_backend, d5_cli, tmp_path
):
    result = _bench(d5_cli, "--processes", "3", "--rel-ci", "0", "--json")
    assert result.exit_code == 0, result.stderr
    (row,) = read_json(result.stdout)
    assert row["processes"] == 3 and row["between_known"] is True
    assert row["between_ci_low"] <= row["median"] <= row["between_ci_high"]
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        run = store.get_run(row["run_id"])
        (m,) = [m for m in store.measurements(run.id) if m.metric == "time"]
        groups = store.samples_by_process(m.id)
        pids = {r["pid"] for r in run.config["invocations"]["rounds"]}
    assert sorted(groups) == [0, 1, 2]
    assert m.summary["median"] == pytest.approx(
        float(np.median([np.median(v) for v in groups.values()]))
    )
    assert m.summary["nested"]["n_processes"] == 3
    assert len(pids) == 3  # three fresh worker processes
    assert run.config["invocations"]["order_seed"] == 0
    assert "warnings" in run.config["fitness"]


def test_processes_1_is_labelled_between_run_variance_unknown(fake_backend, d5_cli):
    result = _bench(d5_cli, "--processes", "1")
    assert result.exit_code == 0, result.stderr
    assert BETWEEN_UNKNOWN in result.stdout
    as_json = _bench(d5_cli, "--processes", "1", "--json")
    (row,) = read_json(as_json.stdout)
    assert row["between_label"] == BETWEEN_UNKNOWN and row["processes"] == 1


def test_an_unknown_backend_is_refused_before_any_worker_or_run(fake_backend, d5_cli, tmp_path):
    result = d5_cli("bench", "op", "Relu", "--backends", "fakerelu,nope", "--shape", "8x8")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "nope" in result.stderr
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        assert store.list_runs() == []


def test_a_bad_noise_floor_variable_is_a_one_line_error_before_a_run(
    fake_backend, d5_cli, monkeypatch, tmp_path
):
    monkeypatch.setenv(NOISE_FLOOR_ENV, "lots")
    result = _bench(d5_cli, "--processes", "1")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("d5: error: D5_NOISE_FLOOR must be a fraction")
    assert result.stderr.count("\n") == 1
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        assert [r for r in store.list_runs() if r.kind == "op"] == []


def test_the_first_bench_on_a_machine_calibrates_its_noise_floor(
    fake_backend, d5_cli, monkeypatch, tmp_path
):
    monkeypatch.delenv(NOISE_FLOOR_ENV)
    # Counted as quiet whatever else runs here (a busy calibration is never the floor).
    monkeypatch.setattr("d5core.measure.noise.competition", lambda *args, **kwargs: [])
    monkeypatch.setattr(
        "d5core.measure.noise.BRIEF_OPTIONS",
        MeasureOptions(warmup=0, min_samples=6, time_budget_s=0.01),
    )
    result = _bench(d5_cli, "--processes", "1")
    assert result.exit_code == 0, result.stderr
    assert "measuring this machine's noise floor (first time this machine is seen)" in (
        result.stderr
    )
    assert "noise floor:" in result.stdout and "calibration run" in result.stdout
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        kinds = sorted(r.kind for r in store.list_runs())
        (op_run,) = store.list_runs(kind="op")
    assert kinds == ["calibration", "op"]
    assert not math.isnan(op_run.config["noise_floor"]["machine_floor"])


def test_fitness_warnings_are_printed_and_stored_with_the_run(
    fake_backend, d5_cli, monkeypatch, tmp_path
):
    monkeypatch.setattr(
        "d5core.measure.fitness.assess", lambda before, after, cores=None: ["the machine hums"]
    )
    result = _bench(d5_cli, "--processes", "1", "--json")
    assert result.exit_code == 0, result.stderr
    assert "d5: warning: the machine hums" in result.stderr
    (row,) = read_json(result.stdout)
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        fitness = store.get_run(row["run_id"]).config["fitness"]
    assert fitness["warnings"] == ["the machine hums"]
    assert fitness["before"]["wall_time"] <= fitness["after"]["wall_time"]


def test_processes_stop_once_every_between_process_ci_is_within_rel_ci(fake_backend, d5_cli):
    result = _bench(d5_cli, "--processes", "6", "--rel-ci", "100", "--json")
    assert result.exit_code == 0, result.stderr
    (row,) = read_json(result.stdout)
    assert row["processes"] == 3  # the minimum, then the CI was narrow enough


def test_cpus_pin_the_workers_and_are_recorded(fake_backend, d5_cli, tmp_path):
    result = _bench(d5_cli, "--processes", "1", "--cpus", "0", "--json")
    assert result.exit_code == 0, result.stderr
    (row,) = read_json(result.stdout)
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        config = store.get_run(row["run_id"]).config
    assert config["cpus"] == [0]
    assert config["invocations"]["rounds"][0]["cpus"] == [0]


def test_bad_cpus_are_refused_before_a_run(fake_backend, d5_cli, tmp_path):
    result = _bench(d5_cli, "--cpus", "0-x")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "--cpus '0-x'" in result.stderr
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        assert store.list_runs() == []


def test_two_backends_closer_than_the_noise_floor_are_said_to_be_within_noise(
    fake_backend, d5_cli, monkeypatch
):
    monkeypatch.setenv(NOISE_FLOOR_ENV, "0.9")  # the same code twice: well within 90%
    args = [
        "bench", "op", "Relu", "--backends", "fakerelu,fakerelu2", "--shape", "64x64",
        "--time-budget", "0.02", "--min-samples", "6", "--warmup", "1", "--processes", "1",
    ]  # fmt: skip
    result = d5_cli(*args, "--json")
    assert result.exit_code == 0, result.stderr
    rows = {r["backend"]: r for r in read_json(result.stdout)}
    assert rows["fakerelu"]["noise_floor"] == 0.9
    # Usually well within 90%; a burst of load on a shared machine can still split one
    # process's median from the other's, so the verdict is checked against the medians.
    a, b = rows["fakerelu"]["median"], rows["fakerelu2"]["median"]
    close = max(a, b) / min(a, b) - 1.0 < 0.9
    assert rows["fakerelu"]["within_noise_of"] == (["fakerelu2"] if close else [])
    assert rows["fakerelu2"]["within_noise_of"] == (["fakerelu"] if close else [])
    shown = d5_cli(*args)
    assert "noise floor: 90.0% (set by D5_NOISE_FLOOR)" in shown.stdout


def test_a_job_that_fails_in_its_worker_is_a_one_line_error_and_a_failed_run(
    fake_backend, d5_cli, tmp_path
):
    result = _bench(d5_cli, "--processes", "2", "--direction", "backward")
    assert result.exit_code == 2, result.stderr
    error = result.stderr.splitlines()[-1]  # after the progress lines and any warnings
    assert error.startswith("d5: error: 1 of 1 measurements failed; fakerelu Relu[64x64] ")
    assert error.endswith("backward: operator Relu has no backward")
    with ResultsStore.open(tmp_path / "results.sqlite") as store:
        (run,) = store.list_runs(kind="op")
    assert run.status == "failed"
    assert len(run.config["invocations"]["rounds"]) == 1  # the failed job left the rounds


def test_a_burst_of_load_during_one_process_is_reported_with_its_process(
    fake_backend, d5_cli, monkeypatch
):
    answers = iter([[], ["a burst of load"], []])  # the whole run, then process 1, process 2
    monkeypatch.setattr(
        "d5core.measure.fitness.assess", lambda before, after, cores=None: next(answers)
    )
    result = _bench(d5_cli, "--processes", "2", "--rel-ci", "0")
    assert result.exit_code == 0, result.stderr
    assert "d5: warning: process 1: a burst of load" in result.stderr
    assert "process 2:" not in result.stderr
