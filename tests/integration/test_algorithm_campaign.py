"""``d5 bench algorithms``: every trial in a fresh process, recorded once, resumed after a
kill, and a trial that goes wrong is a recorded miss, never the campaign's end.

The campaigns here are tiny (a 2-epoch digits MLP, a handful of trials) so that they run
in seconds on 2 cores; each trial still is a real ``d5 run`` in its own process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from d5core.cli.output import read_json
from d5core.lv2.algorithms.campaign import (
    AlgorithmChoice,
    CampaignSpec,
    parse_algorithms,
    plan,
    trial_seed,
    workload_recipe,
)
from d5core.lv2.algorithms.suites import load_suite
from d5core.lv2.algorithms.trials import TRIAL_KIND, load_trials
from d5core.lv2.recipes import load_recipe
from d5core.results.store import ResultsStore
from d5core.testing import make_distribution

TINY_RECIPE = """
[fixed]
model = "mlp"
model_options = { hidden = [16] }
dataset = "digits"
sampler = "shuffle"
epochs = 2
test_every = "epoch"
target_accuracy = 0.99

[mutable]
executor = "numpy"
optimizer = "momentum"
lr = 0.05
batch_size = 64

[metrics]
final_test_accuracy = { min = 0.99 }
"""

TINY_SUITE = """
name = "tiny"
description = "one fast workload for the tests"

[[workload]]
name = "tiny-digits"
recipe = "tiny-digits.toml"
target = { accuracy = 0.3 }
budget_s = 30
"""

#: Two algorithms of d5.algorithms for the bad-input campaign: one raises while
#: training, one diverges. Installed in a directory the trials' processes find on
#: PYTHONPATH.
FAKE_ALGORITHMS = """
import numpy as np
from d5core.levels.training import TrainingAlgorithm

class Exploding(TrainingAlgorithm):
    name = "exploding"
    search_space = {"lr": {"distribution": "log_uniform", "min": 0.01, "max": 0.1}}

    def settings(self, workload, hyperparameters):
        return {"optimizer": "momentum", "lr": hyperparameters["lr"]}

    def data_selection(self, indices, step, rng):
        if step == 2:
            raise RuntimeError("boom at step 2")
        return indices

class Diverging(TrainingAlgorithm):
    name = "diverging"
    search_space = {"lr": 1e30}

    def settings(self, workload, hyperparameters):
        return {"optimizer": "momentum", "lr": hyperparameters["lr"]}
"""


def _tiny_suite(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny-digits.toml").write_text(TINY_RECIPE, encoding="utf-8")
    path = folder / "tiny.toml"
    path.write_text(TINY_SUITE, encoding="utf-8")
    return path


def _d5(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "d5core", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
        timeout=600,
    )


def _runs(db: Path, kind: str) -> list[Any]:
    with ResultsStore.open(db, create=False) as store:
        return store.list_runs(kind=kind)


@pytest.fixture(scope="module")
def campaign(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """2 algorithms x 2 studies x 2 trials of the tiny suite, run once."""
    folder = tmp_path_factory.mktemp("campaign")
    suite = _tiny_suite(folder)
    db = folder / "results.sqlite"
    args = ("bench", "algorithms", str(suite), "--algorithms", "momentum,adam",
            "--studies", "2", "--trials", "2", "--seed", "7", "--db", str(db))  # fmt: skip
    done = _d5(*args, "--json")
    assert done.returncode == 0, done.stderr
    return {"args": args, "db": db, "data": read_json(done.stdout, "bench algorithms"),
            "stderr": done.stderr, "suite": suite}  # fmt: skip


def test_every_trial_is_recorded_once_with_its_study_trial_seed_and_hyperparameters(campaign):
    with ResultsStore.open(campaign["db"], create=False) as store:
        records = load_trials(store, campaign=campaign["data"]["campaign"])
    assert len(records) == 8
    assert len({r.key for r in records}) == 8
    assert {r.algorithm for r in records} == {"momentum", "adam"}
    assert {r.executor for r in records} == {"numpy"}
    # with seed 7 some draws reach the tiny target within 2 epochs and some do not
    assert {r.outcome for r in records} == {"reached", "missed"}, [r.message for r in records]
    for r in records:
        assert r.seed == trial_seed(7, r.study, r.trial)
        assert r.budget_s == 30 and r.target == {"accuracy": 0.3}
        if r.reached:
            assert 0 < r.time <= 30
    # every algorithm of one study's trial trains with the same seed; each trial its own
    seeds = {(r.study, r.trial): set() for r in records}
    for r in records:
        seeds[(r.study, r.trial)].add(r.seed)
    assert all(len(s) == 1 for s in seeds.values())
    assert len({next(iter(s)) for s in seeds.values()}) == 4
    # a point of each space per trial: the trials of an algorithm differ
    momentum = [json.dumps(r.hyperparameters, sort_keys=True) for r in records
                if r.algorithm == "momentum"]  # fmt: skip
    assert len(set(momentum)) == 4


def test_each_trial_is_a_stored_training_of_the_suites_target_and_budget(campaign):
    with ResultsStore.open(campaign["db"], create=False) as store:
        records = load_trials(store, campaign=campaign["data"]["campaign"])
        trainings = {r.training_run: store.get_run(str(r.training_run)) for r in records}
        figures = {
            r.training_run: {m.name: m.value for m in store.metrics(str(r.training_run))}
            for r in records
        }
    assert len(trainings) == 8
    for r in records:
        run = trainings[r.training_run]
        assert run.kind == "train" and run.status == "complete"
        assert run.seed == r.seed
        assert run.config["mutable"]["algorithm"] == r.algorithm
        assert run.config["mutable"]["hyperparameters"] == r.hyperparameters
        fixed = run.config["fixed"]
        assert fixed["target_accuracy"] == 0.3  # the suite's, not the recipe's 0.99
        assert fixed["time_budget"] == 30
        assert fixed["budget_clock"] == "training"
        assert run.config["metrics"] == {}  # the recipe's thresholds are not the trial's
        assert f"algorithm-campaign-{r.campaign}" in run.tags
        # the trial's time is the training's time to target, its test passes left out
        if r.reached:
            assert r.time == figures[r.training_run]["time_to_target_training"]
        assert r.eval_s == figures[r.training_run]["eval_time"]


def test_the_json_document_holds_the_campaign_its_summary_and_records(campaign):
    data = campaign["data"]
    assert data["suite"] == "tiny" and data["ruleset"] == "external"
    assert (data["studies"], data["trials"], data["seed"]) == (2, 2, 7)
    assert data["algorithms"] == ["momentum", "adam"]
    assert (data["ran"], data["skipped"]) == (8, 0)
    assert len(data["records"]) == 8
    assert {row["algorithm"] for row in data["summary"]} == {"momentum@numpy", "adam@numpy"}
    assert sum(row["trials"] for row in data["summary"]) == 8
    assert "[8/8] tiny-digits" in campaign["stderr"]


def test_running_the_same_command_again_reruns_nothing(campaign):
    db = campaign["db"]
    before = (len(_runs(db, "train")), len(_runs(db, TRIAL_KIND)))
    done = _d5(*campaign["args"])
    assert done.returncode == 0, done.stderr
    assert "8 already recorded, 0 to run" in done.stderr
    assert (len(_runs(db, "train")), len(_runs(db, TRIAL_KIND))) == before
    assert f"d5 results score --campaign {campaign['data']['campaign']}" in done.stdout


def test_a_campaign_killed_in_the_middle_resumes_without_rerunning_a_recorded_trial(tmp_path):
    suite = _tiny_suite(tmp_path)
    db = tmp_path / "results.sqlite"
    args = [sys.executable, "-m", "d5core", "bench", "algorithms", str(suite),
            "--algorithms", "momentum", "--studies", "1", "--trials", "3", "--db", str(db)]  # fmt: skip
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    try:
        while time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.2)
            if db.exists():
                with ResultsStore.open(db, create=False) as store:
                    if load_trials(store):
                        break
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    with ResultsStore.open(db, create=False) as store:
        before = {r.key: r.run_id for r in load_trials(store)}
    assert 1 <= len(before) < 3, "the campaign ended before it could be killed half-way"
    done = _d5(*args[3:])
    assert done.returncode == 0, done.stderr
    assert f"{len(before)} already recorded, {3 - len(before)} to run" in done.stderr
    with ResultsStore.open(db, create=False) as store:
        after = {r.key: r.run_id for r in load_trials(store)}
    assert len(after) == 3
    assert {k: after[k] for k in before} == before  # the recorded ones were kept as they were
    assert len(_runs(db, TRIAL_KIND)) == 3  # and none was recorded again


def test_an_algorithm_that_raises_or_diverges_is_a_recorded_miss(tmp_path):
    site = tmp_path / "site"
    make_distribution(
        site,
        "d5-fake-algorithms",
        entry_points={
            "d5.hooks": {"fake-algorithms": "fake_algorithms_plugin"},
            "d5.algorithms": {
                "exploding": "fake_algorithms:Exploding",
                "diverging": "fake_algorithms:Diverging",
            },
        },
        modules={
            "fake_algorithms_plugin.py": 'd5_plugin_api = ">=1.10,<2"\n',
            "fake_algorithms.py": FAKE_ALGORITHMS,
        },
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    suite = _tiny_suite(tmp_path)
    db = tmp_path / "results.sqlite"
    done = _d5("bench", "algorithms", str(suite), "--algorithms", "exploding,diverging",
               "--studies", "1", "--trials", "1", "--db", str(db), "--json", env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    records = {r["algorithm"]: r for r in read_json(done.stdout, "bench algorithms")["records"]}
    assert records["exploding"]["outcome"] == "failed"
    assert "boom at step 2" in records["exploding"]["message"]
    assert records["diverging"]["outcome"] == "diverged"
    assert records["diverging"]["time_to_target_s"] is None
    # the crashed training was stored too, and the record points at it
    assert records["exploding"]["training_run"] is not None


def test_a_trial_that_outlives_its_wall_clock_limit_is_killed_and_counted_over_budget(
    tmp_path, monkeypatch
):
    from d5core.lv2.algorithms import campaign as runner

    suite = load_suite(_tiny_suite(tmp_path))
    spec = CampaignSpec(suite, (AlgorithmChoice("momentum"),), "external", 1, 1, seed=1)
    (planned,) = plan(spec)
    monkeypatch.setattr(CampaignSpec, "wall_limit_s", lambda self, workload: 0.5)
    recipe = workload_recipe(planned.workload, planned.budget_s, tmp_path)
    started = time.monotonic()
    record = runner.run_trial(spec, planned, recipe, tmp_path / "results.sqlite")
    assert time.monotonic() - started < 30
    assert record.outcome == "over_budget"
    assert "killed after" in record.message


def test_the_workload_recipe_carries_the_suites_target_and_budget_on_the_training_clock(
    tmp_path,
):
    suite = load_suite(_tiny_suite(tmp_path / "suite"))
    (workload,) = suite.workloads
    path = workload_recipe(workload, 45.0, tmp_path)
    recipe = load_recipe(path)
    assert recipe.name == "tiny-digits"
    assert recipe.fixed["target_accuracy"] == 0.3
    assert recipe.fixed["time_budget"] == 45.0
    assert recipe.fixed["budget_clock"] == "training"
    assert recipe.metrics == {}
    assert recipe.mutable == load_recipe(workload.recipe).mutable


def test_self_tuning_runs_one_trial_per_study_at_the_defaults_with_half_again_the_budget(
    tmp_path,
):
    suite = load_suite(_tiny_suite(tmp_path))
    spec = CampaignSpec(suite, parse_algorithms("adam,momentum@torch"), "self", 3, 1)
    trials = plan(spec)
    assert len(trials) == 6
    assert {t.budget_s for t in trials} == {45.0}
    assert {t.trial for t in trials} == {0}
    adam = [t.hyperparameters for t in trials if t.algorithm == "adam"]
    assert adam[0] == adam[1] == adam[2]  # the defaults, every study
    assert {t.executor for t in trials if t.algorithm == "momentum"} == {"torch"}
    assert {t.executor for t in trials if t.algorithm == "adam"} == {"numpy"}


def test_the_campaign_id_follows_what_decides_the_trials_and_not_the_order(tmp_path):
    suite = load_suite(_tiny_suite(tmp_path))

    def cid(algorithms: str, **kw: Any) -> str:
        options = {"ruleset": "external", "studies": 2, "trials": 2, "seed": 0, **kw}
        return CampaignSpec(suite, parse_algorithms(algorithms), **options).id

    base = cid("adam,momentum")
    assert cid("momentum,adam") == base
    assert len({base, cid("adam"), cid("adam,momentum", seed=1), cid("adam,momentum", studies=3),
                cid("adam,momentum", trials=3), cid("adam@torch,momentum")}) == 6  # fmt: skip


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("nope", "--algorithms", "adam"), "unknown suite 'nope'"),
        (("cpu", "--algorithms", "no-such-algorithm"), "unknown algorithm 'no-such-algorithm'"),
        (("cpu", "--algorithms", "adam", "--studies", "0"), "--studies"),
        (("cpu", "--algorithms", "adam", "--trials", "0"), "--trials"),
        (("cpu", "--algorithms", "adam", "--ruleset", "self", "--trials", "3"),
         "--trials does not apply to --ruleset self"),
        (("cpu", "--algorithms", "adam,adam"), "names adam twice"),
        (("cpu", "--algorithms", "adam@"), "NAME@EXECUTOR"),
        (("cpu", "--algorithms", "adam@no-such-executor"), "no-such-executor"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2_before_anything_runs(d5_cli, tmp_path, args, expected):
    db = tmp_path / "results.sqlite"
    result = d5_cli("bench", "algorithms", *args, "--db", str(db))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert not db.exists() or not _runs(db, "train")
