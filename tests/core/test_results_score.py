"""Issue 33: ``d5 results score`` on a store filled with trial records."""

from __future__ import annotations

import math

import pytest
from json_schema_doc import check

from d5core.cli.output import read_json
from d5core.lv2.algorithms.trials import TrialRecord, record_trial
from d5core.plugins import PluginManager
from d5core.results import ResultsStore

ENV = {"packages": {"d5core": "0.1.0"}, "cpu": {"model": "Test CPU", "logical_cores": 2}}

# Study times (one trial per study; None: missed), worked out by hand:
#   adam: w1 [10, 12, 11] -> median 11;  w2 [20, miss, 30] -> 30
#   sgd:  w1 [22, 20, 24] -> 22;         w2 [miss, miss, 40] -> miss
# ratios: w1 adam 1, sgd 2; w2 adam 1, sgd inf.
# scores: adam 1; sgd (4 - 2) / (2 * 3) = 1/3.
# speed-up of sgd against adam (the best score, the default baseline): w1 only, 11/22.
TIMES = {
    ("adam", "w1"): [10.0, 12.0, 11.0],
    ("adam", "w2"): [20.0, None, 30.0],
    ("sgd", "w1"): [22.0, 20.0, 24.0],
    ("sgd", "w2"): [None, None, 40.0],
}


def _open(db):
    return ResultsStore.open(db, manager=PluginManager({}, discover_installed=False))


def _fill(db, campaign="c0ffee01", suite="tiny", times=TIMES):
    with _open(db) as store:
        for (algorithm, workload), studies in times.items():
            for study, t in enumerate(studies):
                record = TrialRecord(
                    campaign=campaign, suite=suite, suite_hash="h1", workload=workload,
                    algorithm=algorithm, executor="numpy", ruleset="external", study=study,
                    trial=0, seed=study, outcome="reached" if t is not None else "missed",
                    time_to_target_s=t, eval_s=0.5, budget_s=60.0,
                )  # fmt: skip
                record_trial(store, record, environment=ENV)


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "r.sqlite"
    _fill(path)
    return path


def test_the_table_shows_scores_reached_workloads_speedups_and_times(d5_cli, db):
    result = d5_cli("results", "score", "--db", str(db))
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "suite tiny, campaign c0ffee01, ruleset external: 3 studies x 1 trials" in out
    assert "12 trials (3 missed, 9 reached)" in out
    lines = {line.split()[1]: line for line in out.splitlines() if "@numpy" in line[:20]}
    assert "1.000" in lines["adam@numpy"] and "2/2" in lines["adam@numpy"]
    assert "0.333" in lines["sgd@numpy"] and "1/2" in lines["sgd@numpy"]
    assert "0.50x over 1 of 2 workloads" in lines["sgd@numpy"]
    rows = [line for line in out.splitlines() if line.lstrip("│ ").startswith(("w1", "w2"))]
    w2_sgd = next(r for r in rows if "w2" in r and "sgd@numpy" in r)
    assert "missed" in w2_sgd and "1/3" in w2_sgd
    w1_adam = next(r for r in rows if "w1" in r and "adam@numpy" in r)
    assert " 11 " in w1_adam and "10 – 12" in w1_adam
    assert "baseline adam@numpy (the best score; --baseline to choose)" in out


def test_json_follows_the_documented_shape_and_misses_are_null(d5_cli, db):
    result = d5_cli("results", "score", "--db", str(db), "--json", "--baseline", "sgd")
    assert result.exit_code == 0, result.stderr
    data = read_json(result.stdout, "results score")
    check("results score", data)
    assert data["campaign"] == "c0ffee01" and data["baseline"] == "sgd@numpy"
    entries = {e["entry"]: e for e in data["entries"]}
    assert entries["adam@numpy"]["score"] == 1.0
    assert entries["sgd@numpy"]["score"] == pytest.approx(1 / 3)
    assert entries["adam@numpy"]["speedup"]["value"] == pytest.approx(2.0)  # 22 / 11
    times = {(t["entry"], t["workload"]): t for t in data["times"]}
    missed = times[("sgd@numpy", "w2")]
    assert missed["time_s"] is None and missed["ratio"] is None and not missed["reached"]
    assert missed["study_times_s"] == [None, None, 40.0]
    assert times[("adam@numpy", "w2")]["time_s"] == 30.0
    assert times[("adam@numpy", "w2")]["interval"]["high"] is None  # a study missed
    assert data["outcomes"] == {"missed": 3, "reached": 9}


def test_the_newest_campaign_is_scored_unless_one_is_named(d5_cli, tmp_path):
    path = tmp_path / "two.sqlite"
    _fill(path, campaign="aaaa1111")
    faster = {k: [None if t is None else t / 2 for t in v] for k, v in TIMES.items()}
    _fill(path, campaign="bbbb2222", times=faster)
    newest = read_json(d5_cli("results", "score", "--db", str(path), "--json").stdout)
    assert newest["campaign"] == "bbbb2222" and newest["other_campaigns"] == ["aaaa1111"]
    older = read_json(
        d5_cli("results", "score", "--db", str(path), "--json", "--campaign", "aaaa").stdout
    )
    times = {(t["entry"], t["workload"]): t["time_s"] for t in older["times"]}
    assert times[("adam@numpy", "w1")] == 11.0
    assert math.isclose(
        {(t["entry"], t["workload"]): t["time_s"] for t in newest["times"]}[("adam@numpy", "w1")],
        5.5,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--campaign", "zzz"), "no campaign 'zzz' in "),
        (("--suite", "gpu"), "no trials of suite 'gpu' in "),
        (("--baseline", "adamw"), "--baseline 'adamw' is not among the scored algorithms"),
    ],
)
def test_bad_selections_are_one_line_and_exit_2(d5_cli, db, args, message):
    result = d5_cli("results", "score", "--db", str(db), *args)
    assert result.exit_code == 2, result.stdout
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr


def test_a_campaign_prefix_within_its_suite_is_accepted(d5_cli, db):
    result = d5_cli("results", "score", "--db", str(db), "--suite", "tiny", "--campaign", "c0f")
    assert result.exit_code == 0, result.stderr
    assert "campaign c0ffee01" in result.stdout


def test_an_empty_store_and_a_missing_one_are_one_line_and_exit_2(d5_cli, tmp_path):
    empty = tmp_path / "empty.sqlite"
    _open(empty).close()
    result = d5_cli("results", "score", "--db", str(empty))
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "no algorithm trials in" in result.stderr and "d5 bench algorithms" in result.stderr
    missing = d5_cli("results", "score", "--db", str(tmp_path / "nope.sqlite"))
    assert missing.exit_code == 2 and missing.stderr.count("\n") == 1
    assert "no results database at" in missing.stderr


def test_the_other_results_commands_are_still_there(d5_cli, db):
    listed = d5_cli("results", "list", "--db", str(db), "--kind", "algorithm-trial")
    assert listed.exit_code == 0, listed.stderr
    assert "tiny/w1/adam" in listed.stdout
    assert "already taken" not in listed.stderr


def test_the_report_draws_the_campaigns_profile_and_times_from_all_its_trials(db):
    from d5core.levels.report import ReportRun
    from d5core.lv2.algorithms.figures import figures

    with _open(db) as store:
        newest = store.list_runs(limit=1)  # one selected trial: the rest come from the store
        runs = [ReportRun.from_stored(s) for s in store.read_runs([r.id for r in newest])]
        profile, times = figures(runs, store)
    assert profile.key.startswith("algo-profile-") and times.key.startswith("algo-times-")
    assert len(profile.runs) == 12 and profile.section == "training"
    sgd = profile.data["entries"]["sgd@numpy"]
    # sgd: r = 2 on w1, inf on w2 -> rho 0 on [1, 2), 1/2 from 2 on; score 1/3
    assert (sgd["tau"], sgd["rho"]) == ([1.0, 2.0, 4.0], [0.0, 0.5, 0.5])
    assert sgd["score"] == pytest.approx(1 / 3)
    assert times.data["workloads"]["w2"]["sgd@numpy"] == {
        "study_times": [None, None, 40.0], "time": None, "missed_studies": 2,
    }  # fmt: skip
    assert times.data["workloads"]["w1"]["adam@numpy"]["time"] == 11.0
    assert figures([], None) == []
