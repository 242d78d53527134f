"""``d5 run --ranks N``: data-parallel training under mpiexec, and its watchdog."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from d5core.cli.output import read_json
from d5core.results.store import ResultsStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"


pytestmark = pytest.mark.usefixtures("mpi_env")


def _rank_metrics(store: ResultsStore, run_id: str) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    for m in store.metrics(run_id):
        if m.name.startswith("rank_"):
            out.setdefault(int(m.labels["rank"]), {})[m.name] = m.value
    return out


@pytest.mark.parametrize("ranks", [2, 4])
def test_digits_on_several_ranks_passes_and_stores_per_rank_metrics(tmp_path, ranks, d5_ranks):
    db = tmp_path / "r.sqlite"
    proc = d5_ranks("run", str(RECIPE), "--ranks", str(ranks), "--db", str(db), "--json")
    assert proc.returncode == 0, proc.stderr
    data = read_json(proc.stdout, "run")
    assert data["passed"] is True and data["summary"]["runs"] == 1
    (doc,) = data["runs"]
    assert doc["status"] == "complete" and doc["passed"] is True
    assert doc["metrics"]["final_test_accuracy"] >= 0.9
    assert doc["distributed"]["ranks"] == ranks
    assert doc["distributed"]["scheme"] == "allreduce"
    with ResultsStore.open(db) as store:
        run = store.get_run(doc["run_id"])
        assert run.status == "complete" and run.kind == "train"
        assert run.config["distributed"]["ranks"] == ranks
        per_rank = _rank_metrics(store, doc["run_id"])
        assert sorted(per_rank) == list(range(ranks))
        for values in per_rank.values():
            assert values["rank_steps"] == doc["steps"]
            assert values["rank_bytes_sent"] > 0 and values["rank_bytes_received"] > 0
            assert values["rank_comm_time"] >= 0


def test_a_killed_rank_ends_the_job_and_marks_the_run_failed(tmp_path, d5_ranks):
    db = tmp_path / "r.sqlite"
    env = {"D5_TEST_KILL_RANK": "1", "D5_TEST_KILL_AFTER_STEPS": "5"}
    t0 = time.monotonic()
    proc = d5_ranks("run", str(RECIPE), "--ranks", "2", "--rank-timeout", "10", "--db", str(db),
                    env=env, timeout=60)  # fmt: skip
    wall = time.monotonic() - t0
    assert wall < 40, f"the job took {wall:.1f} s to end"
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "rank 1" in lines[0], proc.stderr
    with ResultsStore.open(db) as store:
        (run,) = store.list_runs()
        assert run.status == "failed" and "rank 1" in (run.error or "")


@pytest.mark.parametrize("ranks", ["0", "-2"])
def test_a_bad_rank_count_exits_2(tmp_path, ranks, d5_ranks):
    proc = d5_ranks("run", str(RECIPE), "--ranks", ranks, "--db", str(tmp_path / "r.sqlite"))
    assert proc.returncode == 2
    assert not (tmp_path / "r.sqlite").exists()


def test_an_unknown_scheme_exits_2_with_one_line(tmp_path, d5_ranks):
    db = tmp_path / "r.sqlite"
    proc = d5_ranks(
        "run", str(RECIPE), "--ranks", "2", "--scheme", "carrier-pigeon", "--db", str(db)
    )
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "carrier-pigeon" in lines[0] and "allreduce" in lines[0]
    assert not db.exists()
