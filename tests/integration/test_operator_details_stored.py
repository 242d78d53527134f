"""What an operator says about how it ran (``Operator.details()``, plugin API 1.2) is
stored with its measurements: the TensorFlow backend's convolution says it was timed
channels-last, in the worker processes and in the parent alike."""

from __future__ import annotations

import pytest

from d5core.cli.output import read_json
from d5core.levels.operators import Operator
from d5core.lv0.jobs import operator_details, problem_to_json
from d5core.lv0.runner import problem_for
from d5core.measure.engine import MeasureOptions
from d5core.results.store import ResultsStore
from d5core.testing.operators import bench_ops


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "results.sqlite"
    monkeypatch.setenv("D5_DB", str(path))
    return path


def test_bench_op_stores_the_layout_tensorflow_timed(db, d5_cli):
    result = d5_cli(
        "bench", "op", "Conv", "--backends", "numpy,tensorflow",
        "--shape", "1x3x8x8,4x3x3x3", "--processes", "1", "--time-budget", "0.05",
        "--rel-ci", "0", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = read_json(result.stdout)
    with ResultsStore.open(db) as store:
        stored = {
            m.labels["backend"]: m.details.get("details")
            for m in store.measurements(rows[0]["run_id"])
            if m.metric == "time"
        }
    assert stored["tensorflow"]["timed_layout"] == "NHWC"
    # the reference says nothing about itself; d5 adds what it checked while timing and
    # how long preparing the timed callable took (never a sample)
    d5_adds = {"timed_accuracy", "prepare_s"}
    assert {k: v for k, v in stored["numpy"].items() if k not in d5_adds} == {}
    assert stored["numpy"]["timed_accuracy"]["status"] == "pass"
    assert stored["numpy"]["prepare_s"] >= 0


def test_the_runner_called_as_a_library_keeps_the_details_too():
    problem = problem_for("Conv", shapes=[(1, 3, 8, 8), (4, 3, 3, 3)])
    options = MeasureOptions(time_budget_s=0.02, rel_ci=0)
    (timing,) = bench_ops([problem], ["tensorflow"], options=options)
    assert timing.measurement.details["timed_layout"] == "NHWC"
    assert problem_to_json(problem)  # the same problem the workers get


class _Talkative(Operator):
    op_type = "Talk"

    def forward(self, inputs):  # pragma: no cover - never run here
        return inputs

    def details(self):
        raise RuntimeError("lost its voice")


class _Old:
    """An operator object from before plugin API 1.2: no details() at all."""


def test_details_of_an_operator_without_them_or_failing_are_empty():
    assert operator_details(_Old()) == {}
    assert operator_details(_Talkative()) == {}
