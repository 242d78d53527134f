"""Issue 14: ``d5 bench`` records the thread count each backend ran with in its worker
processes, and flags backends, and runs, compared with different counts.

numpy and torch get different counts from the environment alone: numpy's BLAS threads
follow ``OMP_NUM_THREADS`` (d5's rule for numpy), while torch takes ``MKL_NUM_THREADS``
first. With ``OMP_NUM_THREADS=2 MKL_NUM_THREADS=1`` numpy runs 2 threads and torch 1 on
any machine; with both 1, the two agree.
"""

from __future__ import annotations

import json

import pytest

from d5core.cli.output import read_json
from d5core.results.store import ResultsStore

DIFFERENT = {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "1"}
EQUAL = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
FAST = ["--processes", "2", "--time-budget", "0.01", "--min-samples", "6", "--warmup", "1"]
TORCH = "torch.get_num_threads()"


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "results.sqlite"
    monkeypatch.setenv("D5_DB", str(path))
    return path


def _bench_op(d5_cli, monkeypatch, threads, *args):
    for name, value in threads.items():
        monkeypatch.setenv(name, value)  # the workers inherit it
    done = d5_cli(
        "bench", "op", "Relu", "--backends", "numpy,torch", "--shape", "32x32", *FAST, *args
    )
    assert done.exit_code == 0, done.stderr
    return done


def _stored_fitness(db, run_id):
    with ResultsStore.open(db) as store:
        return store.get_run(run_id).config["fitness"]


def _warnings(stderr):
    return [line for line in stderr.splitlines() if "thread" in line and "warning" in line]


def test_bench_op_flags_numpy_and_torch_run_with_different_thread_counts(db, d5_cli, monkeypatch):
    done = _bench_op(d5_cli, monkeypatch, DIFFERENT)
    expected = (
        "the compared backends ran with different thread counts: numpy 2 threads "
        f"(OMP_NUM_THREADS), torch 1 thread ({TORCH})"
    )
    (warning,) = _warnings(done.stderr)
    assert warning.startswith(f"d5: warning: {expected}; ")
    table = [line for line in done.stdout.splitlines() if "Relu[32x32]" in line]
    assert [line.split("│")[-3].strip() for line in table] == ["2", "1"]  # threads column
    run_id = done.stdout.split(", run ")[1].split()[0]
    fitness = _stored_fitness(db, run_id)
    assert [w for w in fitness["warnings"] if "thread counts" in w] == [
        warning[len("d5: warning: ") :]
    ]
    counts = fitness["thread_counts"]
    assert counts["numpy"]["threads"] == 2 and counts["numpy"]["reported"] == ["2", "2"]
    assert counts["torch"]["threads"] == 1 and counts["torch"]["setting"] == TORCH
    assert counts["torch"]["reported"] == ["1", "1"]  # what torch said in each worker


def test_equal_counts_give_no_warning_and_compare_flags_the_backend_whose_count_changed(
    db, d5_cli, monkeypatch
):
    same = read_json(_bench_op(d5_cli, monkeypatch, EQUAL, "--json").stdout, "bench op")
    assert [(r["backend"], r["threads"], r["thread_warning"]) for r in same] == [
        ("numpy", 1, None),
        ("torch", 1, None),
    ]
    baseline = same[0]["run_id"]
    assert not [w for w in _stored_fitness(db, baseline)["warnings"] if "thread" in w]
    changed = read_json(_bench_op(d5_cli, monkeypatch, DIFFERENT, "--json").stdout, "bench op")
    candidate = changed[0]["run_id"]
    assert {r["thread_warning"] for r in changed} != {None}

    done = d5_cli("results", "compare", baseline, candidate, "--json")
    assert done.exit_code == 0, done.stderr
    threads = json.loads(done.stdout)["data"]["threads"]
    line = (
        f"numpy ran with 1 thread in baseline {baseline} and 2 threads in candidate "
        f"{candidate} (OMP_NUM_THREADS): a change may come from the thread count"
    )
    assert threads["warnings"] == [line]  # torch ran with 1 thread in both: no warning
    assert threads["baseline"]["torch"]["threads"] == threads["candidate"]["torch"]["threads"]
    assert f"d5: warning: {line}" in done.stderr.splitlines()
    shown = d5_cli("results", "compare", baseline, candidate)
    assert f"WARNING: {line}" in shown.stdout


def test_bench_net_flags_executors_run_with_different_thread_counts(db, d5_cli, monkeypatch):
    for name, value in DIFFERENT.items():
        monkeypatch.setenv(name, value)
    done = d5_cli(
        "bench", "net", "mlp", "--executors", "numpy,torch", "--batch", "4", *FAST, "--json"
    )
    assert done.exit_code == 0, done.stderr
    rows = read_json(done.stdout, "bench net")
    assert [(r["executor"], r["threads"], r["thread_setting"]) for r in rows] == [
        ("numpy", 2, "OMP_NUM_THREADS"),
        ("torch", 1, TORCH),
    ]
    (warning,) = {r["thread_warning"] for r in rows}
    assert warning.startswith(
        "the compared backends ran with different thread counts: numpy 2 threads "
        f"(OMP_NUM_THREADS), torch 1 thread ({TORCH})"
    )
    assert f"d5: warning: {warning}" in done.stderr.splitlines()
    assert warning in _stored_fitness(db, rows[0]["run_id"])["warnings"]
