"""``d5 run --ranks 2 --communicator gloo``: the gloo engine (d5-plugin-torchdist) under
torchrun and under an outside mpiexec, and its equivalence with the same run over MPI."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from d5core.cli.output import read_json
from d5core.results.store import ResultsStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"

pytestmark = pytest.mark.usefixtures("mpi_env")


@pytest.fixture(autouse=True)
def _needs_gloo() -> None:
    pytest.importorskip("d5_plugin_torchdist.launch")
    if not Path(sys.executable).with_name("torchrun").exists():
        pytest.skip("torchrun is not installed beside this Python")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stored(db: Path, run_id: str) -> dict[str, Any]:
    """What the equivalence compares: the run's final metrics and every rank's row."""
    with ResultsStore.open(db) as store:
        run = store.get_run(run_id)
        assert run.status == "complete", run.error
        metrics = {(m.name, tuple(sorted(m.labels.items()))): m.value
                   for m in store.metrics(run_id)}  # fmt: skip
    kept = ("final_test_accuracy", "final_loss", "rank_final_loss", "rank_steps",
            "rank_samples", "rank_bytes_sent", "rank_bytes_received")  # fmt: skip
    return {key: value for key, value in metrics.items() if key[0] in kept}


def _one_run(proc: Any) -> str:
    assert proc.returncode == 0, proc.stderr
    (doc,) = read_json(proc.stdout, "run")["runs"]
    assert doc["status"] == "complete" and doc["distributed"]["ranks"] == 2
    return str(doc["run_id"])


def test_digits_over_gloo_stores_what_the_same_run_over_mpi_stores(tmp_path, d5_ranks):
    db = tmp_path / "r.sqlite"
    common = ("run", str(RECIPE), "--ranks", "2", "--seed", "3", "--db", str(db), "--json")
    gloo = _one_run(d5_ranks(*common, "--communicator", "gloo"))
    mpi = _one_run(d5_ranks(*common))
    over_gloo, over_mpi = _stored(db, gloo), _stored(db, mpi)
    assert ("rank_bytes_sent", (("rank", 1),)) in over_gloo
    assert over_gloo["final_test_accuracy", ()] >= 0.9
    # two ranks sum two values: the order cannot differ, so neither can the results
    assert over_gloo == over_mpi


@pytest.mark.parametrize("chosen_by", ["variable", "option"])
def test_under_an_outside_mpiexec_the_ranks_meet_over_gloo(
    tmp_path, d5_ranks, mpi_env, chosen_by
):
    from d5_plugin_mpi import launch

    db = tmp_path / "r.sqlite"
    env = {**mpi_env, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(_free_port())}
    choice = ["--communicator", "gloo"]
    if chosen_by == "variable":
        env["D5_DISTRIBUTED_COMMUNICATOR"], choice = "gloo", []
    d5 = str(Path(sys.executable).with_name("d5"))
    cmd = launch.build_command(2, [d5, "run", str(RECIPE), "--seed", "3", "--db", str(db),
                                   *choice, "--json"])  # fmt: skip
    import subprocess

    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    outside = _one_run(proc)
    over_mpi = _one_run(d5_ranks("run", str(RECIPE), "--ranks", "2", "--seed", "3", "--db",
                                 str(db), "--json"))  # fmt: skip
    assert _stored(db, outside) == _stored(db, over_mpi)
    with ResultsStore.open(db) as store:  # each run says which engine carried it
        engines = {store.get_run(rid).config["distributed"]["communicator"]
                   for rid in (outside, over_mpi)}  # fmt: skip
    assert engines == {"gloo", "mpi"}


def test_under_mpiexec_without_master_address_gloo_says_what_to_set(tmp_path, mpi_env):
    import subprocess

    from d5_plugin_mpi import launch

    env = {**mpi_env, "D5_DISTRIBUTED_COMMUNICATOR": "gloo"}
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    d5 = str(Path(sys.executable).with_name("d5"))
    cmd = launch.build_command(2, [d5, "run", str(RECIPE), "--db", str(tmp_path / "r.sqlite")])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2
    errors = [line for line in proc.stderr.splitlines() if line.startswith("d5: error")]
    assert errors and all("MASTER_ADDR and MASTER_PORT" in line for line in errors)


def test_a_rank_killed_under_torchrun_is_named_from_torchrun_report(tmp_path, d5_ranks):
    db = tmp_path / "r.sqlite"
    env = {"D5_TEST_KILL_RANK": "1", "D5_TEST_KILL_AFTER_STEPS": "5"}
    proc = d5_ranks("run", str(RECIPE), "--ranks", "2", "--communicator", "gloo",
                    "--rank-timeout", "10", "--db", str(db), env=env, timeout=90)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "rank 1 exited with signal 9" in lines[0], proc.stderr
    with ResultsStore.open(db) as store:
        (run,) = store.list_runs()
        # gloo, unlike MPI, fails rank 0's pending collective at once, and rank 0 records
        # that error before the parent's diagnosis reaches the store
        assert run.status == "failed" and "rank " in (run.error or "")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--ranks", "2", "--communicator", "pigeon"), ["'pigeon'", "gloo", "mpi"]),
        (("--communicator", "gloo"), ["--communicator needs --ranks"]),
        (("--ranks", "1", "--communicator", "gloo"), ["--communicator needs --ranks"]),
    ],
)
def test_a_bad_communicator_option_exits_2_with_one_line(tmp_path, d5_ranks, args, words):
    db = tmp_path / "r.sqlite"
    proc = d5_ranks("run", str(RECIPE), *args, "--db", str(db))
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and all(w in lines[0] for w in words), proc.stderr
    assert not db.exists()


def test_bench_comm_over_gloo_is_launched_by_torchrun(tmp_path, d5_ranks):
    db = tmp_path / "r.sqlite"
    proc = d5_ranks("bench", "comm", "--communicator", "gloo", "--ranks", "2",
                    "--max-bytes", "4096", "--samples", "6", "--db", str(db), "--json",
                    timeout=180)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    with ResultsStore.open(db) as store:
        (run,) = store.list_runs()
        assert run.config["communicator"] == "gloo"
        assert run.config["launcher"] == "torchrun"
        assert run.config["raw_baseline"] is True
