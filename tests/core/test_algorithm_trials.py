"""Issue 33: trial records of ``d5 bench algorithms`` stored as runs and read back."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from d5core.errors import UsageError
from d5core.lv2.algorithms.trials import (
    TRIAL_KIND,
    TrialRecord,
    finished,
    load_trials,
    record_trial,
)
from d5core.plugins import PluginManager
from d5core.results import ResultsStore

ENV = {"packages": {"d5core": "0.1.0"}, "cpu": {"model": "Test CPU", "logical_cores": 2}}


def _record(**changes) -> TrialRecord:
    base = TrialRecord(
        campaign="camp1", suite="cpu", suite_hash="abc", workload="digits-mlp",
        algorithm="adam", executor="numpy", ruleset="external", study=1, trial=2, seed=1234,
        hyperparameters={"lr": 0.003, "beta2": 0.999}, budget_s=60.0,
        target={"accuracy": 0.93}, training_run="r0", outcome="reached",
        time_to_target_s=12.5, eval_s=1.25, message="reached accuracy 0.931",
    )  # fmt: skip
    return replace(base, **changes)


@pytest.fixture
def store(tmp_path):
    with ResultsStore.open(
        tmp_path / "r.sqlite", manager=PluginManager({}, discover_installed=False)
    ) as opened:
        yield opened


def _put(store, record):
    return record_trial(store, record, environment=ENV)


def test_a_trial_round_trips_through_the_store_as_a_complete_run(store):
    record = _record()
    run_id = _put(store, record)
    (back,) = load_trials(store)
    assert back == record and back.run_id == run_id and back.created
    run = store.get_run(run_id)
    assert (run.kind, run.name, run.status, run.seed) == (
        TRIAL_KIND, "cpu/digits-mlp/adam", "complete", 1234,
    )  # fmt: skip
    assert run.config["hyperparameters"] == {"lr": 0.003, "beta2": 0.999}
    metrics = {m.name: (m.value, m.unit, m.better) for m in store.metrics(run_id)}
    assert metrics == {"time_to_target": (12.5, "s", "lower"), "eval_time": (1.25, "s", "lower")}
    assert back.reached and back.time == 12.5 and back.label == "adam@numpy"


def test_a_missed_trial_stores_no_time_to_target_and_reads_back_as_infinite(store):
    record = _record(outcome="over_budget", time_to_target_s=None, message="killed at 90 s")
    run_id = _put(store, record)
    (back,) = load_trials(store)
    assert back.outcome == "over_budget" and not back.reached and back.time == math.inf
    assert [m.name for m in store.metrics(run_id)] == ["eval_time"]
    assert store.get_run(run_id).status == "complete"  # a miss is a result, not a failure


def test_campaign_and_suite_filters_and_finished_keys(store):
    _put(store, _record())
    _put(store, _record(trial=3, executor="torch"))
    _put(store, _record(campaign="camp2", suite="gpu"))
    assert len(load_trials(store)) == 3
    assert {t.campaign for t in load_trials(store, campaign="camp1")} == {"camp1"}
    assert [t.suite for t in load_trials(store, suite="gpu")] == ["gpu"]
    assert load_trials(store, campaign="camp1", suite="gpu") == []
    assert finished(store, "camp1") == {
        ("digits-mlp", "adam", "numpy", 1, 2),
        ("digits-mlp", "adam", "torch", 1, 3),
    }
    assert finished(store, "nope") == set()


def test_an_unfinished_record_is_not_a_trial_and_a_duplicate_counts_once(store):
    record = _record()
    store.begin_run(TRIAL_KIND, "cpu/digits-mlp/adam", config=record.to_config(), environment=ENV)
    assert load_trials(store) == [] and finished(store, "camp1") == set()
    first = _put(store, record)
    _put(store, replace(record, time_to_target_s=99.0))
    (back,) = load_trials(store)
    assert back.run_id == first and back.time_to_target_s == 12.5


def test_a_run_of_the_kind_that_is_not_a_trial_record_is_skipped(store, caplog):
    with store.run(TRIAL_KIND, "junk", config={"campaign": "camp1"}, environment=ENV):
        pass
    _put(store, _record())
    assert len(load_trials(store)) == 1
    assert "lacks the key 'suite'" in caplog.text


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"outcome": "won"}, "trial outcome 'won' is not one of reached, missed"),
        ({"ruleset": "open"}, "trial ruleset 'open' is not one of external, self"),
        ({"study": -1}, "must be 0 or more"),
        ({"time_to_target_s": None}, "reached its target but has no time to target"),
        ({"time_to_target_s": math.nan}, "reached its target but has no time to target"),
    ],
)
def test_a_bad_record_is_refused_in_one_line_before_anything_is_stored(store, changes, message):
    with pytest.raises(UsageError, match=message):
        _put(store, _record(**changes))
    assert store.list_runs() == []
