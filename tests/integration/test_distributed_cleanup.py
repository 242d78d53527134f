"""``d5 run --ranks N``: the job never outlives its parent.

SIGKILL, SIGTERM and SIGINT (Ctrl-C) to the parent leave no mpiexec, hydra proxy or rank
after 5 s; SIGTERM and SIGINT mark the run interrupted. The two mechanisms behind it are
pinned one by one: mpiexec's death signal and the ranks' watch of the parent.
(benchmarks/rank_cleanup.py runs more trials.)
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from d5core.results.store import ResultsStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"
D5 = Path(sys.executable).with_name("d5")
#: How long the job may take to disappear after its parent was signalled.
DEADLINE_S = 5.0


def _alive(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _job(parent: subprocess.Popen[str], ranks: int) -> list[psutil.Process]:
    """The parent's descendants once ``ranks`` ranks run (mpiexec, proxies, ranks)."""
    me = psutil.Process(parent.pid)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 90 and parent.poll() is None:
        job = [p for p in me.children(recursive=True) if _alive(p)]
        with contextlib.suppress(psutil.Error):
            if sum("d5core" in " ".join(p.cmdline()) for p in job) >= ranks:
                return job
        time.sleep(0.1)
    pytest.fail(f"the ranks did not start: {parent.communicate()[1][-2000:]}")


def _gone_within(procs: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Those of ``procs`` still alive after ``seconds`` (returns early when none is)."""
    t0 = time.monotonic()
    left = procs
    while left and time.monotonic() - t0 < seconds:
        time.sleep(0.05)
        left = [p for p in left if _alive(p)]
    return left


def _sigint_as_at_a_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT],
                         ids=lambda s: signal.Signals(s).name)  # fmt: skip
def test_the_ranks_end_within_5_s_of_a_signal_to_their_parent(tmp_path, sig, mpi_env):
    db = tmp_path / "runs.sqlite"
    cmd = [str(D5), "run", str(RECIPE), "--ranks", "2", "--set", "lr=1e-9", "--db", str(db)]
    # As a user's Ctrl-C finds it: with SIGINT at its default. A test run launched in the
    # background (CI started by a non-interactive shell with `&`) inherits SIGINT ignored,
    # and d5 leaves an ignored signal ignored, as nohup asks (StopSignals).
    parent = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                              env=mpi_env, preexec_fn=_sigint_as_at_a_terminal)  # fmt: skip
    job: list[psutil.Process] = []
    try:
        job = _job(parent, 2)
        time.sleep(0.5)
        parent.send_signal(sig)
        survivors = _gone_within(job, DEADLINE_S)
        assert not survivors, [" ".join(p.cmdline())[:100] for p in survivors]
        code = parent.wait(timeout=30)
    finally:
        for proc in job:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        if parent.poll() is None:
            parent.kill()
        parent.wait()
    err = [line for line in parent.stderr.read().splitlines() if line.strip()]
    with ResultsStore.open(db) as store:
        (run,) = store.list_runs()
    if sig == signal.SIGKILL:
        assert run.status == "incomplete"
        return
    name = signal.Signals(sig).name
    assert code == 128 + sig, err[-5:]  # what the parent said, should this race again
    assert len(err) == 1 and f"interrupted by {name}" in err[0], err
    assert run.status == "interrupted"
    assert run.error and f"interrupted by {name}" in run.error


_WATCHER = """
import sys, time
from d5core.lv3.launch import RankContext
RankContext(0, 2, None).watch_parent(sys.argv[1])
time.sleep(60)
"""


def test_a_rank_exits_within_a_second_of_its_parents_end():
    parent = subprocess.Popen(["sleep", "1"])
    spec = f"{parent.pid}@{socket.gethostname()}"
    rank = subprocess.Popen([sys.executable, "-c", _WATCHER, spec], stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        parent.wait()
        t0 = time.monotonic()
        code = rank.wait(timeout=10)
        assert time.monotonic() - t0 < 2.0
    finally:
        rank.kill()
    assert code == 1
    assert f"(pid {parent.pid}) has ended" in rank.stderr.read()


def test_a_rank_ignores_a_parent_on_another_host():
    rank = subprocess.Popen([sys.executable, "-c", _WATCHER, "1@not-this-host.invalid"])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            rank.wait(timeout=2.0)
    finally:
        rank.kill()
        rank.wait()


_MIDDLE = """
import subprocess, sys
from d5core.lv3.launch import _die_with_parent
child = subprocess.Popen(["sleep", "60"], preexec_fn=_die_with_parent())
print(child.pid, flush=True)
sys.stdin.read()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_mpiexec_gets_sigterm_when_its_parent_is_killed():
    middle = subprocess.Popen([sys.executable, "-c", _MIDDLE], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert middle.stdout is not None
    child = psutil.Process(int(middle.stdout.readline()))
    try:
        assert _alive(child)
        middle.kill()
        middle.wait()
        assert not _gone_within([child], 2.0)
    finally:
        with contextlib.suppress(psutil.Error):
            child.kill()


def test_watch_directories_of_dead_parents_are_swept(tmp_path, monkeypatch):
    from d5core.lv3.launch import _process_start, _sweep_watch_directories

    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    dead = subprocess.Popen(["sleep", "30"])
    started = _process_start(dead.pid)
    dead.kill()
    dead.wait()
    for name, pid, start in [("d5-ranks-dead", dead.pid, started),
                             ("d5-ranks-live", os.getpid(), _process_start(os.getpid()))]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "parent").write_text(f"{pid} {start}")
    (tmp_path / "d5-ranks-unknown").mkdir()  # no parent file: not ours to judge
    _sweep_watch_directories()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d5-ranks-live", "d5-ranks-unknown"]
