"""Issue 28 (2): every worker d5 starts dies with it. SIGKILL of d5 (no chance to clean
up) leaves no measurement worker, LoadGen worker or rank process alive after 5 s; and
``d5 bench comm`` has a time limit and checks its store before the sweep, under an
outside mpiexec too. (benchmarks/kill_trials.py runs 20 trials of each kind.)"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest

D5 = Path(sys.executable).with_name("d5")
#: How long the workers may take to disappear after d5 was killed.
DEADLINE_S = 5.0
#: How long the workers may take to appear (a guard against a hang, not a measure).
START_S = 180.0


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _workers(parent: subprocess.Popen[str], marker: str, count: int) -> list[psutil.Process]:
    """Every live descendant of ``parent`` once ``count`` of them name ``marker``."""
    me = psutil.Process(parent.pid)
    t0 = time.monotonic()
    while time.monotonic() - t0 < START_S and parent.poll() is None:
        with contextlib.suppress(psutil.Error):
            below = [p for p in me.children(recursive=True) if _alive(p)]
            if sum(marker in " ".join(p.cmdline()) for p in below) >= count:
                return below
        time.sleep(0.05)
    err = parent.stderr.read() if parent.stderr is not None else ""
    pytest.fail(f"no {marker} started under d5: {err[-2000:]}")


def _left_after(procs: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Those of ``procs`` still alive after ``seconds`` (returns once none is)."""
    t0 = time.monotonic()
    left = [p for p in procs if _alive(p)]
    while left and time.monotonic() - t0 < seconds:
        time.sleep(0.05)
        left = [p for p in left if _alive(p)]
    return left


def _sigkill_d5_while(
    args: Sequence[str], marker: str, env: dict[str, str], count: int = 1
) -> list[str]:
    """Start ``d5 ARGS``, wait for ``count`` workers naming ``marker``, SIGKILL d5 and
    return the command lines of its descendants still alive 5 s later."""
    parent = subprocess.Popen([str(D5), *args], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
    found: list[psutil.Process] = []
    try:
        found = _workers(parent, marker, count)
        time.sleep(0.5)  # let them get going
        parent.kill()
        parent.wait()
        return [" ".join(p.cmdline())[:120] for p in _left_after(found, DEADLINE_S)]
    finally:
        for proc in found:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if parent.poll() is None:
            parent.kill()
        parent.wait()


def test_a_measurement_worker_dies_with_a_sigkilled_d5(tmp_path):
    args = ["bench", "op", "Gemm", "--backends", "numpy", "--shape", "64x64,64x64",
            "--processes", "1", "--time-budget", "600", "--max-samples", "10000000",
            "--rel-ci", "0", "--db", str(tmp_path / "r.sqlite")]  # fmt: skip
    survivors = _sigkill_d5_while(args, "d5core.measure._worker", dict(os.environ))
    assert survivors == []


def test_the_loadgen_worker_dies_with_a_sigkilled_d5(tmp_path):
    pytest.importorskip("mlperf_loadgen")
    args = ["bench", "net", "lenet5", "--executors", "numpy", "--scenario", "single-stream",
            "--min-duration", "600", "--db", str(tmp_path / "r.sqlite")]  # fmt: skip
    survivors = _sigkill_d5_while(args, "d5core.loadgen.worker", dict(os.environ))
    assert survivors == []


def test_the_ranks_of_bench_comm_die_with_a_sigkilled_d5(tmp_path, mpi_env):
    args = ["bench", "comm", "--ranks", "2", "--min-bytes", "1024", "--max-bytes", "1024",
            "--samples", "10000000", "--db", str(tmp_path / "r.sqlite")]  # fmt: skip
    survivors = _sigkill_d5_while(args, "d5core", mpi_env, count=2)
    assert survivors == []


def test_a_bench_comm_job_past_its_time_limit_fails_in_one_line(tmp_path, d5_ranks):
    db = tmp_path / "r.sqlite"
    done = d5_ranks("bench", "comm", "--ranks", "2", "--min-bytes", "1024", "--max-bytes",
                    "1024", "--samples", "10000000", "--timeout", "2", "--db", str(db))  # fmt: skip
    errors = [line for line in done.stderr.splitlines() if line.startswith("d5: error:")]
    assert done.returncode == 1, done.stderr[-2000:]
    assert errors == ["d5: error: 2 ranks: the job on 2 ranks timed out after 2 s (nothing stored)"]


def test_bench_comm_under_an_outside_mpiexec_checks_its_store_before_the_sweep(tmp_path, mpi_env):
    # At a365460 the ranks swept (here: for ever) and only then found the store unusable.
    store = tmp_path / "not-sqlite.db"
    store.write_bytes(os.urandom(2048))
    mpiexec = shutil.which("mpiexec", path=mpi_env.get("PATH")) or str(D5.with_name("mpiexec"))
    command = [mpiexec, "-n", "2", str(D5), "bench", "comm", "--min-bytes", "1024",
               "--max-bytes", "1024", "--samples", "10000000", "--db", str(store)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=mpi_env, timeout=120)
    errors = [line for line in done.stderr.splitlines() if line.startswith("d5: error:")]
    assert done.returncode == 2, done.stderr[-2000:]
    assert len(errors) == 1 and "is not a d5 results database" in errors[0], done.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--ranks", "100000"], ["--ranks 100000", "at most"]),
        (["--max-bytes", "40000000000"], ["--max-bytes 40000000000", "GB", "available"]),
        (["--samples", "100000000000"], ["--samples", "at most 10,000,000"]),
        (["--link-peak", "inf"], ["--link-peak"]),
        (["--link-peak", "nan"], ["--link-peak"]),
    ],
)
def test_bench_comm_refuses_what_cannot_fit_before_any_rank_starts(tmp_path, d5_cli, args, words):
    db = tmp_path / "r.sqlite"
    result = d5_cli("bench", "comm", *args, "--db", str(db))
    assert result.exit_code == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)
    assert not db.exists()


def test_bench_comm_refuses_a_time_limit_that_is_not_a_positive_number(tmp_path):
    for bad in ("0", "-1", "nan", "inf"):
        done = subprocess.run([str(D5), "bench", "comm", "--timeout", bad, "--db",
                               str(tmp_path / "r.sqlite")], capture_output=True, text=True)  # fmt: skip
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
        assert "--timeout" in done.stderr


def _run_status(db: Path) -> tuple[str, dict]:
    from d5core.results.store import ResultsStore

    with ResultsStore.open(db) as store:
        (run,) = store.list_runs()
        return run.status, store.get_run(run.id).config


def test_a_bench_op_job_past_its_time_limit_fails_and_its_run_is_finished(tmp_path, d5_cli):
    # At a365460 bench workers had no time limit: a job that never ends left the run
    # `running` for ever. A 100-s time budget keeps this job far past its 3-s limit.
    db = tmp_path / "r.sqlite"
    result = d5_cli("bench", "op", "Gemm", "--backends", "numpy", "--shape", "64x64,64x64",
                    "--processes", "1", "--time-budget", "100", "--max-samples", "10000000",
                    "--rel-ci", "0", "--timeout", "3", "--db", str(db))  # fmt: skip
    assert result.exit_code == 1, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("d5: error:")]
    assert errors == [
        "d5: error: 1 of 1 measurements failed; numpy Gemm[64x64,64x64] forward: "
        "the worker process timed out after 3 s while running it"
    ], result.stderr
    status, config = _run_status(db)
    assert status == "failed"
    assert config["timeout_s"] == 3.0 and config["invocations"]["timeout_s"] == 3.0


def test_bench_records_its_default_time_limit(tmp_path, d5_cli):
    db = tmp_path / "r.sqlite"
    result = d5_cli("bench", "op", "Gemm", "--backends", "numpy", "--shape", "8x8,8x8",
                    "--processes", "1", "--time-budget", "0.01", "--db", str(db))  # fmt: skip
    assert result.exit_code == 0, result.stderr
    status, config = _run_status(db)
    assert status == "complete" and config["timeout_s"] == pytest.approx(300.02)


@pytest.mark.parametrize("command", [["op", "Gemm", "--backends", "numpy"],
                                     ["net", "mlp", "--executors", "numpy"]])  # fmt: skip
@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf"])
def test_a_bench_time_limit_that_is_not_a_positive_number_exits_2(tmp_path, d5_cli, command, bad):
    db = tmp_path / "r.sqlite"
    result = d5_cli("bench", *command, "--timeout", bad, "--db", str(db))
    assert result.exit_code == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "--timeout" in result.stderr
    assert not db.exists()
