"""``d5 validate op --custom`` runs each framework's checks in a worker process with a
time limit: a crash in one framework is that framework's failed check, stored, while the
others are still checked; the worker dies with d5; a store that cannot be written is
found before anything is built."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from d5core.results.store import ResultsStore
from d5core.testing.customop import crash_source, forbid_compiling

WORKER = "d5core.validate._check_worker"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return crash_source(tmp_path_factory.mktemp("src"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ops")


def _run(args: list[str], cache: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "D5_OP_CACHE": str(cache), **env}
    command = [sys.executable, "-m", "d5core", "validate", "op", "--custom", *args]
    return subprocess.run(command, capture_output=True, text=True, env=environ, timeout=900)


def test_a_crash_in_one_framework_keeps_and_stores_the_other_frameworks_results(
    source: Path, cache: Path, tmp_path: Path
) -> None:
    pytest.importorskip("torch")
    db = tmp_path / "runs.db"
    # the first process to run the operator (numpy's worker) segfaults; torch's does not
    done = _run([str(source), "--backends", "numpy,torch", "--attr", "fault=9", "--db", str(db),
                 "--json"], cache, D5_CRASH_ONCE=str(tmp_path / "crashed"))  # fmt: skip
    assert done.returncode == 1, done.stderr[-2000:]
    lines = [x for x in done.stderr.splitlines() if x.startswith("d5: error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    assert "numpy: the worker was killed by SIGSEGV during numpy forward" in lines[0]
    assert "failed in 1 of 2 frameworks" in lines[0]
    by_backend = {r["backend"]: r for r in json.loads(done.stdout)["data"]}
    assert by_backend["torch"]["passed"] is True and by_backend["numpy"]["passed"] is False
    with ResultsStore.open(db) as store:
        runs = {r.name: r for r in store.list_runs(kind="validate")}
        assert runs["faulty numpy"].status == "failed"
        assert "SIGSEGV" in (runs["faulty numpy"].error or "")
        assert runs["faulty torch"].status == "complete"
        assert runs["faulty torch"].config["timeout_s"] == 300.0
        for name, want in (("faulty numpy", 0.0), ("faulty torch", 1.0)):
            [passed] = [m.value for m in store.metrics(runs[name].id) if m.name == "passed"]
            assert passed == want


def test_the_time_limit_given_is_recorded_with_the_run(source: Path, cache: Path, tmp_path: Path):
    db = tmp_path / "runs.db"
    done = _run([str(source), "--backends", "numpy", "--timeout", "120", "--db", str(db)], cache)
    assert done.returncode == 0, done.stderr[-2000:]
    with ResultsStore.open(db) as store:
        [run] = store.list_runs(kind="validate")
    assert run.config["timeout_s"] == 120.0


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_timeout_that_is_not_a_positive_number_is_one_line_and_exit_2(
    value: str, source: Path, tmp_path: Path, d5_cli
) -> None:
    result = d5_cli("validate", "op", "--custom", str(source), "--timeout", value,
                    "--db", str(tmp_path / "r.db"))  # fmt: skip
    assert result.exit_code == 2, result.stderr
    assert "--timeout must be a positive number of seconds" in result.stderr


def test_validate_op_custom_on_a_read_only_store_is_one_line_before_anything_is_built(
    source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, d5_cli
) -> None:
    db = tmp_path / "ro.db"
    with ResultsStore.open(db):
        pass
    original = ResultsStore._prepare

    def prepare_then_freeze(self: ResultsStore) -> None:
        original(self)
        self._conn.execute("PRAGMA query_only = 1")  # refuses writes, even for root

    monkeypatch.setattr(ResultsStore, "_prepare", prepare_then_freeze)
    monkeypatch.setenv("D5_OP_CACHE", str(tmp_path / "empty-cache"))
    forbid_compiling(monkeypatch)  # nothing may be built before the store is checked
    result = d5_cli("validate", "op", "--custom", str(source), "--backends", "numpy",
                    "--db", str(db))  # fmt: skip
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(db) in lines[0] and "not writable" in lines[0], lines


def _workers_of(parent: int) -> list[int]:
    """The check workers whose parent is ``parent``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == parent and WORKER in cmdline:
            found.append(int(entry.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_sigkill_of_d5_during_validate_op_custom_leaves_no_worker_alive(
    source: Path, cache: Path, tmp_path: Path
) -> None:
    environ = {**os.environ, "D5_OP_CACHE": str(cache)}
    command = [sys.executable, "-m", "d5core", "validate", "op", "--custom", str(source),
               "--backends", "numpy", "--attr", "fault=5", "--db", str(tmp_path / "r.db")]  # fmt: skip
    d5 = subprocess.Popen(command, env=environ, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        workers: list[int] = []
        give_up = time.monotonic() + 600  # only so that a d5 without workers cannot hang
        while not workers and d5.poll() is None and time.monotonic() < give_up:
            workers = _workers_of(d5.pid)  # the handshake: the worker exists
            time.sleep(0.2)
        assert workers, "d5 ended before starting a check worker"
        d5.send_signal(signal.SIGKILL)
        d5.wait()
        deadline = time.monotonic() + 5
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(w) for w in workers), f"workers {workers} outlived d5"
    finally:
        if d5.poll() is None:
            d5.kill()
        for w in _workers_of(d5.pid):
            os.kill(w, signal.SIGKILL)
