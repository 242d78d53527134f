"""A results store that cannot be written (issue 28, section 3): a full disk, or one
that fills during a run, and a read-only store. Each is bad input from the machine, not a
defect of d5: one line naming the store, its filesystem's free space, exit 2, and every
run stored before it kept.

A full disk is simulated with SQLite's own limit on the file's size
(``PRAGMA max_page_count``), which fails writes with the very error a full disk gives
(``SQLITE_FULL``, "database or disk is full"), for the store's own writes; the commands
(``run``, ``validate``, ``bench``) fill a real filesystem, a tmpfs mounted where this
process may (root, as in CI): a capped file still has room inside its pages for a small
run, so only a real full disk tests a whole command reliably.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from d5core.errors import UsageError
from d5core.results.store import ResultsStore

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "digits-mlp.toml"


def _stored_runs(path: Path) -> list[tuple[str, str]]:
    with ResultsStore.open(path, create=False) as store:
        return [(r.id, r.status) for r in store.list_runs()]


@pytest.fixture
def store_with_a_run(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "results.sqlite"
    with ResultsStore.open(path) as store:
        run_id = store.record_measurement_run("kept", {"time": [1.0, 2.0, 3.0]})
    return path, run_id


def _current_store_class() -> type[ResultsStore]:
    """The store class the commands will import: the one in ``sys.modules`` now, which is
    not this module's ``ResultsStore`` when an earlier test made d5 import it afresh."""
    return importlib.import_module("d5core.results.store").ResultsStore  # type: ignore[no-any-return]


@pytest.fixture
def read_only_stores(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every store opened from now on refuses writes as a read-only file does (root,
    which runs CI, may write a file whatever its mode says)."""
    store_class = _current_store_class()
    original = store_class._prepare

    def prepare_then_freeze(self: ResultsStore) -> None:
        original(self)
        self._conn.execute("PRAGMA query_only = 1")

    monkeypatch.setattr(store_class, "_prepare", prepare_then_freeze)


def _assert_one_line_about_a_full_store(stderr: str, path: Path) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    line = lines[0]
    assert line.startswith("d5: error: ") and "Traceback" not in stderr, stderr
    assert str(path) in line and "full" in line and "free on the filesystem at" in line, line
    assert "internal error" not in line and "OperationalError" not in line, line


def test_a_store_that_fills_while_samples_are_written_raises_a_usage_error_and_keeps_the_rest(
    store_with_a_run: tuple[Path, str],
) -> None:
    path, kept = store_with_a_run
    with ResultsStore.open(path) as store:
        run_id = store.begin_run("op", "filling")
        store.add_measurement(run_id, "time", [1.0] * 10)
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(UsageError, match="full") as caught:
            store.add_measurement(run_id, "time", [float(i) for i in range(20000)])
        assert str(path) in str(caught.value) and "\n" not in str(caught.value)
    runs = dict(_stored_runs(path))
    assert runs[kept] == "complete"
    with ResultsStore.open(path, create=False) as store:
        stored = store.read_runs([run_id])[0]
    assert [m.record.n for m in stored.measurements] == [10]  # no half measurement


def test_a_run_whose_store_is_full_is_left_for_incomplete_and_the_error_is_the_full_disk(
    store_with_a_run: tuple[Path, str],
) -> None:
    path, kept = store_with_a_run
    with ResultsStore.open(path) as store:
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        with pytest.raises(UsageError, match="full"), store.run("op", "too big") as run_id:
            store._conn.execute(f"PRAGMA max_page_count = {pages}")
            store.add_measurement(run_id, "time", [float(i) for i in range(20000)])
    assert dict(_stored_runs(path))[kept] == "complete"


def test_d5_validate_op_on_a_read_only_store_exits_2_naming_the_store(
    store_with_a_run: tuple[Path, str], read_only_stores: None, d5_cli
) -> None:
    path, _ = store_with_a_run
    result = d5_cli("validate", "op", "Relu", "--backend", "numpy", "--db", str(path))
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0], result.stderr
    assert "read-only" in lines[0] or "not writable" in lines[0], result.stderr


def test_any_write_to_a_read_only_store_is_a_usage_error_naming_it(
    store_with_a_run: tuple[Path, str], read_only_stores: None
) -> None:
    path, _ = store_with_a_run
    with (
        ResultsStore.open(path) as store,
        pytest.raises(UsageError, match="is read-only") as caught,
    ):
        store.begin_run("op", "never stored")
    assert str(path) in str(caught.value)


# -- a real, tiny filesystem ------------------------------------------------------------


def _can_mount_tmpfs() -> bool:
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or not shutil.which("mount"):
        return False
    return True


@pytest.fixture
def tiny_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 1 MiB tmpfs, mounted for the test (skipped where this process may not mount)."""
    if not _can_mount_tmpfs():
        pytest.skip("mounting a tmpfs needs root on Linux")
    where = tmp_path / f"tiny-{uuid.uuid4().hex[:6]}"
    where.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.parametrize(
    "command",
    [
        ("run", str(RECIPE), "--set", "lr=0.1"),
        ("validate", "op", "Relu", "--backend", "numpy"),
        ("bench", "op", "Relu", "--backends", "numpy", "--shape", "4x4", "--processes", "1"),
    ],
    ids=["run", "validate", "bench"],
)
def test_a_command_on_a_really_full_filesystem_exits_2_and_keeps_the_stored_runs(
    tiny_filesystem: Path, d5_cli, command: tuple[str, ...]
) -> None:
    path = tiny_filesystem / "results.sqlite"
    with ResultsStore.open(path) as store:
        kept = store.record_measurement_run("kept", {"time": [1.0, 2.0, 3.0]})
    filler = os.open(tiny_filesystem / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(filler, b"\0" * 4096):
            pass
    except OSError:
        pass  # the disk is full now
    finally:
        os.close(filler)
    result = d5_cli(*command, "--db", str(path))
    assert result.exit_code == 2, result.stderr
    _assert_one_line_about_a_full_store(result.stderr, path)
    (tiny_filesystem / "filler").unlink()
    assert dict(_stored_runs(path))[kept] == "complete"
