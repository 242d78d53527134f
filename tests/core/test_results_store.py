"""The results store: schema and migrations, round trips, durability rules, concurrency.

The tests that take ``store`` (or ``store_target``) run on both backends: an SQLite
file and a PostgreSQL database (tests/conftest.py). The ones about the SQLite file
itself (its schema pragmas, WAL, a foreign file) take ``db`` and ``sqlite_store``.
"""

from __future__ import annotations

import math
import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
import types
from pathlib import Path

import pytest

from d5core.errors import UsageError
from d5core.hookspecs import hookimpl
from d5core.measure.engine import MeasureOptions, measure
from d5core.plugins import PluginManager, PluginWarning
from d5core.results import (
    SCHEMA_VERSION,
    ResultsStore,
    default_db_path,
    resolve_db_path,
)
from d5core.results import schema as schema_mod
from d5core.results import store as store_mod
from d5core.teamstore.documents import import_document
from d5core.testing.postgres import query_database

ENV = {
    "d5": {"version": "0.1.0"},
    "packages": {"d5core": "0.1.0"},
    "cpu": {"model": "Test CPU", "logical_cores": 2},
    "python": {"version": "3.11.7"},
    "hostname": "testhost",
    "argv": ["d5", "bench"],
    "timestamp": "2025-01-01T00:00:00+00:00",
}


@pytest.fixture
def manager() -> PluginManager:
    return PluginManager({}, discover_installed=False)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "results.sqlite"


@pytest.fixture
def sqlite_store(db: Path, manager: PluginManager):
    with ResultsStore.open(db, manager=manager) as s:
        yield s


@pytest.fixture
def store(store_target: str, manager: PluginManager):
    with ResultsStore.open(store_target, manager=manager) as s:
        yield s


@pytest.fixture
def other_store(request, store_target: str, tmp_path: Path, manager: PluginManager):
    """A second, empty store of the same backend as ``store``."""
    if "://" in store_target:
        other = request.getfixturevalue("postgres_cluster").create_database()
    else:
        other = tmp_path / "other.sqlite"
    with ResultsStore.open(other, manager=manager) as s:
        yield s


def _sql(target, sql: str, params: tuple = ()) -> list[tuple]:
    """Rows of ``sql`` run on the database behind the store's back (either backend)."""
    return query_database(target, sql, params)


def _raw(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(db, isolation_level=None)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


# -- where the database lives ---------------------------------------------------


def test_explicit_path_wins_over_environment(tmp_path):
    env = {"D5_DB": str(tmp_path / "env.sqlite"), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    assert resolve_db_path(tmp_path / "x.sqlite", environ=env) == tmp_path / "x.sqlite"


def test_d5_db_variable_wins_over_xdg(tmp_path):
    env = {"D5_DB": str(tmp_path / "env.sqlite"), "XDG_DATA_HOME": str(tmp_path / "xdg")}
    assert resolve_db_path(None, environ=env) == tmp_path / "env.sqlite"


def test_default_path_follows_xdg_data_home(tmp_path):
    env = {"XDG_DATA_HOME": str(tmp_path / "xdg")}
    assert resolve_db_path(None, environ=env) == tmp_path / "xdg" / "d5" / "results.sqlite"


def test_default_path_falls_back_to_local_share_when_xdg_is_unset_or_relative():
    expected = Path.home() / ".local" / "share" / "d5" / "results.sqlite"
    assert default_db_path({}) == expected
    assert default_db_path({"XDG_DATA_HOME": "relative/dir"}) == expected


def test_child_processes_get_an_absolute_file_or_the_url_unchanged(tmp_path, monkeypatch):
    from d5core.results.paths import absolute_db

    monkeypatch.chdir(tmp_path)
    assert absolute_db("rel.sqlite") == tmp_path / "rel.sqlite"
    url = "postgresql://team@db.example:5432/d5"
    assert absolute_db(url) == url
    assert absolute_db(None, environ={"D5_DB": url}) == url


def test_opening_creates_missing_parent_directories(tmp_path, manager):
    path = tmp_path / "a" / "b" / "results.sqlite"
    with ResultsStore.open(path, manager=manager):
        pass
    assert path.is_file()


def test_reading_a_missing_database_is_a_usage_error_and_creates_nothing(tmp_path):
    path = tmp_path / "nothing" / "results.sqlite"
    with pytest.raises(UsageError, match="no results database at"):
        ResultsStore.open(path, create=False)
    assert not path.parent.exists()


# -- schema and migrations ---------------------------------------------------------


def test_new_database_has_current_schema_wal_and_d5_marker(db, sqlite_store):
    conn = _raw(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA application_id").fetchone()[0] == schema_mod.APPLICATION_ID
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert {"environments", "runs", "measurements", "samples", "run_metrics"} <= tables


def _with_step(monkeypatch, *statements: str) -> None:
    step = schema_mod.Migration(SCHEMA_VERSION + 1, "test step", tuple(statements))
    monkeypatch.setattr(schema_mod, "MIGRATIONS", (*schema_mod.MIGRATIONS, step))


def test_older_database_is_migrated_and_keeps_its_runs(db, manager, monkeypatch):
    with ResultsStore.open(db, manager=manager) as s:
        run_id = s.begin_run("op", "gemm", environment=ENV)
        s.add_measurement(run_id, "time", [1.0, 2.0, 3.0])
        s.finish_run(run_id)
    _with_step(
        monkeypatch,
        "ALTER TABLE runs ADD COLUMN note TEXT",
        "CREATE INDEX runs_by_note ON runs (note)",
    )
    with ResultsStore.open(db, manager=manager) as s:
        assert s.get_run(run_id).status == "complete"
        assert s.samples(s.measurements(run_id)[0].id) == [1.0, 2.0, 3.0]
    conn = _raw(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
    columns = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    assert "note" in columns


def test_a_failing_migration_leaves_the_database_at_its_old_version(db, manager, monkeypatch):
    with ResultsStore.open(db, manager=manager) as s:
        run_id = s.begin_run("op", "gemm", environment=ENV)
    _with_step(
        monkeypatch,
        "CREATE TABLE half_done (x INTEGER)",
        "ALTER TABLE no_such_table ADD COLUMN y TEXT",
    )
    with pytest.raises(UsageError, match="cannot create or upgrade"):
        ResultsStore.open(db, manager=manager)
    conn = _raw(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "half_done" not in tables
    assert conn.execute("SELECT id FROM runs").fetchall() == [(run_id,)]


def test_database_from_a_newer_d5_is_refused_naming_both_versions(db, sqlite_store):
    sqlite_store.close()
    _raw(db).execute("PRAGMA user_version = 99")
    with pytest.raises(UsageError) as err:
        ResultsStore.open(db)
    message = str(err.value)
    assert "\n" not in message
    assert "schema version 99" in message and f"up to {SCHEMA_VERSION}" in message


def test_text_file_is_refused_and_left_untouched(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("these are my notes\n" * 50)
    before = path.read_bytes()
    with pytest.raises(UsageError) as err:
        ResultsStore.open(path)
    assert str(err.value).startswith(f"{path} is not a d5 results database: ")
    assert "\n" not in str(err.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_sqlite_file_of_another_program_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    conn = _raw(path)
    conn.execute("CREATE TABLE customers (id INTEGER, name TEXT)")
    conn.close()
    with pytest.raises(UsageError, match=r"not a d5 results database.*customers"):
        ResultsStore.open(path)
    tables = [r[0] for r in _raw(path).execute("SELECT name FROM sqlite_master")]
    assert tables == ["customers"]


def test_directory_is_refused(tmp_path):
    with pytest.raises(UsageError, match="is a directory"):
        ResultsStore.open(tmp_path)


# -- round trips ----------------------------------------------------------------------


def test_runs_measurements_samples_and_metrics_round_trip(store):
    run_id = store.begin_run(
        "op",
        "gemm",
        config={"m": 64, "dtype": "float32"},
        environment=ENV,
        seed=2**70,
        recipe_hash="r123",
    )
    samples = [1e-3, 1.2e-3, 0.9e-3, 1.1e-3, 1.0e-3, 1.05e-3, 0.95e-3]
    mid = store.add_measurement(
        run_id, "forward", samples, labels={"backend": "numpy", "shape": [64, 64]}
    )
    store.add_metric(run_id, "accuracy", 0.75, labels={"split": "test"}, unit="1")
    store.finish_run(run_id)

    run = store.get_run(run_id)
    assert (run.kind, run.name, run.status) == ("op", "gemm", "complete")
    assert run.config == {"m": 64, "dtype": "float32"}
    assert run.seed == 2**70 and run.recipe_hash == "r123"
    assert run.pid == os.getpid() and run.hostname == socket.gethostname()
    assert run.finished is not None and run.finished >= run.created
    assert (run.n_measurements, run.n_metrics) == (1, 1)

    (m,) = store.measurements(run_id)
    assert m.id == mid and m.metric == "forward" and m.unit == "s" and m.n == len(samples)
    assert m.labels == {"backend": "numpy", "shape": [64, 64]}
    assert m.summary is not None and m.summary["median"] == pytest.approx(1.0e-3)
    assert m.summary["n"] == len(samples)
    assert store.samples(mid) == samples

    (k,) = store.metrics(run_id)
    assert (k.name, k.value, k.unit, k.labels) == ("accuracy", 0.75, "1", {"split": "test"})

    doc = store.run_document(run_id)
    assert doc["measurements"][0]["samples"] == samples
    assert doc["environment"]["cpu"]["model"] == "Test CPU"


def test_a_measure_result_keeps_how_it_was_taken(store):
    def spin() -> None:
        end = time.perf_counter() + 2e-4
        while time.perf_counter() < end:
            pass

    opts = MeasureOptions(warmup=2, min_samples=8, max_samples=12, time_budget_s=1.0)
    measurement = measure(spin, opts, name="spin")
    run_id = store.begin_run("measure", "spin", environment=ENV)
    mid = store.add_measurement(run_id, "time", measurement)
    (m,) = store.measurements(run_id)
    assert store.samples(mid) == measurement.samples
    assert m.summary == measurement.summary.to_json()
    assert (m.blocked, m.block_size) == (measurement.blocked, measurement.block_size)
    assert (m.warmup_runs, m.stopped_by) == (measurement.warmup_runs, measurement.stopped_by)
    assert m.details["timer_resolution_ns"] == measurement.timer_resolution_ns
    assert m.details["options"]["max_samples"] == 12


def test_nan_samples_are_kept_and_leave_the_summary_empty(store):
    run_id = store.begin_run("train", "loss", environment=ENV)
    mid = store.add_measurement(run_id, "loss", [1.0, float("nan"), 0.5], unit="")
    values = store.samples(mid)
    assert values[0] == 1.0 and math.isnan(values[1]) and values[2] == 0.5
    assert store.measurements(run_id)[0].summary is None
    assert store.run_document(run_id)["measurements"][0]["samples"] == [1.0, None, 0.5]


def test_a_measurement_without_samples_is_refused(store):
    run_id = store.begin_run("op", "x", environment=ENV)
    with pytest.raises(UsageError, match="has no samples"):
        store.add_measurement(run_id, "time", [])


def test_identical_environments_are_stored_once(store_target, store):
    a = store.begin_run("op", "a", environment=ENV)
    b = store.begin_run("op", "b", environment=dict(ENV, argv=["other"], timestamp="later"))
    c = store.begin_run("op", "c", environment=dict(ENV, cpu={"model": "Other CPU"}))
    assert _sql(store_target, "SELECT count(*) FROM environments") == [(2,)]
    ra, rb, rc = store.get_run(a), store.get_run(b), store.get_run(c)
    assert ra.environment_id == rb.environment_id != rc.environment_id
    assert ra.fingerprint == rb.fingerprint != rc.fingerprint
    assert store.environment(a)["argv"] == ["d5", "bench"]
    assert store.environment(b)["argv"] == ["other"]
    assert store.environment(b)["timestamp"] == "later"


def test_begin_run_captures_the_environment_when_none_is_given(store):
    run_id = store.begin_run("op", "gemm", seed=7, recipe_hash="h")
    env = store.environment(run_id)
    assert env["seeds"] == 7 and env["recipe_hash"] == "h"
    assert env["cpu"]["logical_cores"] >= 1


def test_runs_are_listed_newest_first_and_filtered_by_kind(store):
    ids = [store.begin_run(kind, f"r{i}", environment=ENV) for i, kind in enumerate("aabab")]
    assert [r.id for r in store.list_runs()] == ids[::-1]
    assert [r.id for r in store.list_runs(limit=2)] == ids[::-1][:2]
    assert [r.name for r in store.list_runs(kind="b")] == ["r4", "r2"]


# -- run ids ---------------------------------------------------------------------------


def _fixed_ids(monkeypatch, *hexes: str) -> None:
    it = iter(hexes)
    fake = types.SimpleNamespace(uuid4=lambda: types.SimpleNamespace(hex=next(it)))
    monkeypatch.setattr(store_mod, "uuid", fake)


def test_run_is_found_by_a_unique_prefix(store, monkeypatch):
    _fixed_ids(monkeypatch, "abc111" + "0" * 26, "abd222" + "0" * 26)
    first = store.begin_run("op", "a", environment=ENV)
    assert store.get_run("abc").id == first == "abc111000000"


def test_an_ambiguous_prefix_names_the_candidates(store, monkeypatch):
    _fixed_ids(monkeypatch, "abc111" + "0" * 26, "abd222" + "0" * 26)
    store.begin_run("op", "a", environment=ENV)
    store.begin_run("op", "b", environment=ENV)
    with pytest.raises(UsageError, match=r"'ab' is ambiguous.*abc111000000.*abd222000000"):
        store.get_run("ab")


def test_an_unknown_run_id_is_a_one_line_usage_error(store):
    with pytest.raises(UsageError) as err:
        store.get_run("feedface")
    assert "'feedface'" in str(err.value) and "\n" not in str(err.value)


def test_a_colliding_run_id_is_drawn_again(store, monkeypatch):
    _fixed_ids(monkeypatch, "1" * 32, "1" * 32, "2" * 32)
    assert store.begin_run("op", "a", environment=ENV) == "1" * 12
    assert store.begin_run("op", "b", environment=ENV) == "2" * 12


# -- finishing and the rules that keep results ---------------------------------------


def test_a_finished_run_is_never_changed(store):
    run_id = store.begin_run("op", "a", environment=ENV)
    store.finish_run(run_id, "failed", error="boom")
    for attempt in (
        lambda: store.finish_run(run_id),
        lambda: store.add_measurement(run_id, "time", [1.0]),
        lambda: store.add_metric(run_id, "acc", 1.0),
    ):
        with pytest.raises(UsageError, match="already failed"):
            attempt()
    run = store.get_run(run_id)
    assert (run.status, run.error, run.n_measurements, run.n_metrics) == ("failed", "boom", 0, 0)


def test_an_unknown_final_status_is_refused(store):
    run_id = store.begin_run("op", "a", environment=ENV)
    with pytest.raises(UsageError, match="not 'done'"):
        store.finish_run(run_id, "done")
    assert store.get_run(run_id).status == "running"


def test_run_block_finishes_complete_or_failed(store):
    with store.run("op", "ok", environment=ENV) as ok_id:
        store.add_metric(ok_id, "x", 1.0)
    with pytest.raises(ZeroDivisionError), store.run("op", "bad", environment=ENV) as bad_id:
        1 / 0  # noqa: B018
    with store.run("train", "nan", environment=ENV) as div_id:
        store.finish_run(div_id, "diverged", error="loss is NaN at step 3")
    assert store.get_run(ok_id).status == "complete"
    bad = store.get_run(bad_id)
    assert bad.status == "failed" and bad.error == "ZeroDivisionError: division by zero"
    assert store.get_run(div_id).status == "diverged"


def test_record_measurement_run_stores_a_complete_run(store):
    run_id = store.record_measurement_run(
        "pair", {"a": [1.0, 2.0, 3.0], "b": [4.0, 5.0]}, labels={"backend": "x"},
        environment=ENV,
    )  # fmt: skip
    run = store.get_run(run_id)
    assert (run.kind, run.status, run.n_measurements) == ("measure", "complete", 2)
    assert [m.metric for m in store.measurements(run_id)] == ["a", "b"]


def test_result_stored_hook_runs_after_the_run_is_committed(store_target, manager):
    seen: list[tuple[str, str, str]] = []

    def d5_result_stored(run_id: str, database: str) -> None:
        ((status,),) = _sql(database, "SELECT status FROM runs WHERE id = ?", (run_id,))
        seen.append((run_id, database, status))

    manager.register(types.SimpleNamespace(d5_result_stored=hookimpl(d5_result_stored)), "spy")
    with ResultsStore.open(store_target, manager=manager) as s:
        run_id = s.begin_run("op", "a", environment=ENV)
        assert seen == []
        s.finish_run(run_id)
    assert seen == [(run_id, store_target, "complete")]


def test_a_failing_result_stored_hook_loses_nothing(store_target, manager):
    def d5_result_stored(run_id: str, database: str) -> None:
        raise RuntimeError("webhook down")

    manager.register(types.SimpleNamespace(d5_result_stored=hookimpl(d5_result_stored)), "bad")
    with ResultsStore.open(store_target, manager=manager) as s:
        run_id = s.begin_run("op", "a", environment=ENV)
        with pytest.warns(PluginWarning, match=r"'bad' failed in d5_result_stored.*webhook down"):
            s.finish_run(run_id)
        assert s.get_run(run_id).status == "complete"


# -- runs whose process died ----------------------------------------------------------


def test_run_of_a_dead_process_reads_incomplete_and_is_marked_on_open(store_target, store, manager):
    run_id = store.begin_run("op", "a", environment=ENV)
    _sql(store_target, "UPDATE runs SET pid = ? WHERE id = ?", (_dead_pid(), run_id))
    run = store.get_run(run_id)
    assert run.status == "incomplete" and "ended before the run was finished" in run.error
    assert _sql(store_target, "SELECT status FROM runs") == [("running",)]
    with ResultsStore.open(store_target, manager=manager):
        pass
    assert _sql(store_target, "SELECT status FROM runs") == [("incomplete",)]


def test_a_reused_pid_does_not_keep_a_dead_run_running(store_target, store):
    run_id = store.begin_run("op", "a", environment=ENV)
    _sql(
        store_target,
        "UPDATE runs SET proc_started = proc_started - 3600 WHERE id = ?",
        (run_id,),
    )
    assert store.get_run(run_id).status == "incomplete"


def test_runs_of_live_processes_and_other_hosts_stay_running(store_target, store):
    """Another host's run whose writer is still at work (on PostgreSQL: holds its lock;
    on SQLite: nothing tells) is never marked incomplete, even when its pid here is dead."""
    mine = store.begin_run("op", "mine", environment=ENV)
    theirs = store.begin_run("op", "theirs", environment=ENV)
    _sql(
        store_target,
        "UPDATE runs SET hostname = 'elsewhere', pid = ? WHERE id = ?",
        (_dead_pid(), theirs),
    )
    assert store.get_run(mine).status == "running"
    assert store.get_run(theirs).status == "running"


# -- several processes at once ---------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from d5core.plugins import PluginManager
    from d5core.results import ResultsStore

    db, worker, go = sys.argv[1], int(sys.argv[2]), Path(sys.argv[3])
    env = {"cpu": {"model": "Test CPU"}, "argv": ["worker", str(worker)]}
    manager = PluginManager({}, discover_installed=False)
    deadline = time.monotonic() + 60
    while not go.exists() and time.monotonic() < deadline:
        time.sleep(0.002)
    with ResultsStore.open(db, manager=manager) as store:
        for i in range(50):
            run_id = store.begin_run(
                "measure", f"w{worker}-{i}", config={"worker": worker, "i": i},
                environment=env, seed=i,
            )
            store.add_measurement(run_id, "time", [worker + i / 100 + k / 1e4 for k in range(20)])
            store.add_metric(run_id, "index", i)
            store.finish_run(run_id)
    """
)


def test_four_processes_writing_at_once_lose_nothing(store_target, tmp_path, manager):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    db, go = store_target, tmp_path / "go"
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(db), str(w), str(go)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for w in range(4)
    ]
    go.touch()
    outputs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outputs, strict=True):
        assert "locked" not in err
        assert p.returncode == 0, err
    with ResultsStore.open(db, manager=manager) as s:
        runs = s.list_runs()
        assert len(runs) == 200
        assert {r.status for r in runs} == {"complete"}
        assert sorted(r.name for r in runs) == sorted(
            f"w{w}-{i}" for w in range(4) for i in range(50)
        )
        for r in runs:
            worker, i = r.config["worker"], r.config["i"]
            (m,) = s.measurements(r.id)
            assert s.samples(m.id) == [worker + i / 100 + k / 1e4 for k in range(20)]
            assert [k.value for k in s.metrics(r.id)] == [float(i)]
    if "://" not in db:
        assert _sql(db, "PRAGMA integrity_check") == [("ok",)]
    assert _sql(db, "SELECT count(*) FROM environments") == [(1,)]


def test_interrupted_is_a_final_status_and_a_ctrl_c_inside_run_stores_it(store):
    with pytest.raises(KeyboardInterrupt), store.run("train", "digits") as run_id:
        store.add_measurement(run_id, "time", [1.0, 2.0, 3.0])
        raise KeyboardInterrupt
    run = store.get_run(run_id)
    assert run.status == "interrupted" and run.error == "interrupted (SIGINT)"
    assert store.samples(store.measurements(run_id)[0].id) == [1.0, 2.0, 3.0]


def test_a_version_1_database_gains_interrupted_without_losing_measurements(db, manager):
    """Version 3 rebuilds the runs table to widen its status check: the measurements and
    samples that point at the old rows must survive (no cascade on the drop)."""
    with ResultsStore.open(db, manager=manager) as s:
        run_id = s.begin_run("op", "gemm", environment=ENV)
        s.add_measurement(run_id, "time", [1.0, 2.0, 3.0])
        s.finish_run(run_id)
    conn = _raw(db)
    # Take the file back to version 1 by hand: the runs table of version 1 and its rows.
    conn.execute("PRAGMA foreign_keys = OFF")
    conn.execute("PRAGMA legacy_alter_table = ON")  # keep measurements pointing at 'runs'
    conn.execute("BEGIN")
    conn.execute("ALTER TABLE runs RENAME TO runs_now")
    conn.execute(schema_mod.MIGRATIONS[0].statements[1])
    columns = ", ".join(r[1] for r in conn.execute("PRAGMA table_info(runs)"))
    conn.execute(f"INSERT INTO runs ({columns}) SELECT {columns} FROM runs_now")
    conn.execute("DROP TABLE runs_now")
    conn.execute("ALTER TABLE measurements DROP COLUMN better")
    conn.execute("ALTER TABLE run_metrics DROP COLUMN better")
    conn.execute("ALTER TABLE samples DROP COLUMN process")
    conn.execute("DROP TABLE run_tags")
    conn.execute("DROP TABLE artifacts")
    conn.execute("PRAGMA user_version = 1")
    conn.execute("COMMIT")
    with pytest.raises(sqlite3.IntegrityError):
        conn.execute("UPDATE runs SET status = 'interrupted'")
    conn.close()

    with ResultsStore.open(db, manager=manager) as s:
        assert s.get_run(run_id).status == "complete"
        assert s.samples(s.measurements(run_id)[0].id) == [1.0, 2.0, 3.0]
        other = s.begin_run("train", "digits", environment=ENV)
        s.finish_run(other, "interrupted", error="interrupted (SIGTERM)")
        assert s.get_run(other).status == "interrupted"
    conn = _raw(db)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_samples_keep_the_worker_process_that_took_them(store):
    with store.run("op", "gemm") as run_id:
        mid = store.add_measurement(run_id, "time", [1.0, 2.0, 3.0], processes=[0, 0, 1])
        store.append_samples(run_id, {mid: [4.0, 5.0]}, processes={mid: [2, 1]})
        plain = store.add_measurement(run_id, "time", [7.0, 8.0], labels={"b": 1})
        with pytest.raises(UsageError, match="one non-negative integer per sample"):
            store.add_measurement(run_id, "time", [1.0, 2.0], processes=[0])
    assert store.samples(mid) == [1.0, 2.0, 3.0, 4.0, 5.0]
    assert store.samples_by_process(mid) == {0: [1.0, 2.0], 1: [3.0, 5.0], 2: [4.0]}
    assert store.samples_by_process(plain) == {None: [7.0, 8.0]}


# -- artifacts and moving runs between stores --------------------------------------------


def _full_run(store) -> str:
    run_id = store.begin_run(
        "op",
        "gemm",
        config={"m": 64},
        environment=ENV,
        seed=2**70,
        recipe_hash="r1",
        tags=["nightly", "a100"],
    )
    store.add_measurement(
        run_id, "time", [1e-3, float("nan"), 2e-3], labels={"b": "x"}, processes=[0, 0, 1]
    )
    store.add_measurement(run_id, "throughput", [10.0, 11.0], unit="items/s")
    store.add_metric(run_id, "accuracy", 0.5, unit="1")
    store.add_metric(run_id, "loss", float("nan"))
    store.add_artifact(run_id, "log.txt", b"line 1\nline 2\n")
    store.add_artifact(run_id, "trace.bin.gz", bytes(range(256)))
    store.add_artifact(run_id, "numpy/peak/run-01/summary.txt", b"")
    store.finish_run(run_id)
    return run_id


def test_artifacts_are_kept_in_the_database_by_name(store):
    run_id = _full_run(store)
    assert store.artifact_names(run_id) == [
        "log.txt",
        "numpy/peak/run-01/summary.txt",
        "trace.bin.gz",
    ]
    assert store.read_artifact(run_id, "numpy/peak/run-01/summary.txt") == b""
    assert store.read_artifact(run_id, "trace.bin.gz") == bytes(range(256))
    with pytest.raises(UsageError, match="never replaced"):
        store.add_artifact(run_id, "log.txt", b"other")
    assert store.read_artifact(run_id, "log.txt") == b"line 1\nline 2\n"
    with pytest.raises(UsageError, match=r"keeps no artifact .nope.*log.txt"):
        store.read_artifact(run_id, "nope")


@pytest.mark.parametrize("name", ["", "..", "/abs", "a//b", "a/../b", "a/", "a\\b", "x\ny"])
def test_a_bad_artifact_name_is_refused(store, name):
    run_id = store.begin_run("op", "x", environment=ENV)
    with pytest.raises(UsageError, match="artifact"):
        store.add_artifact(run_id, name, b"data")
    assert store.artifact_names(run_id) == []


def test_an_artifact_of_an_unknown_run_is_refused(store):
    with pytest.raises(UsageError, match="no run 'feedbeef'"):
        store.add_artifact("feedbeef", "log.txt", b"data")


def test_an_exported_run_imports_into_another_store_unchanged(store, other_store):
    run_id = _full_run(store)
    doc = store.export_run(run_id)
    assert doc["format"] == "d5-run/1" and doc["run"]["run_id"] == run_id
    assert doc["run"]["tags"] == ["a100", "nightly"] and doc["run"]["seed"] == 2**70
    assert doc["measurements"][0]["samples"] == [1e-3, None, 2e-3]
    assert doc["measurements"][0]["processes"] == [0, 0, 1]
    assert doc["metrics"][1]["value"] is None
    assert [a["name"] for a in doc["artifacts"]] == [
        "log.txt",
        "numpy/peak/run-01/summary.txt",
        "trace.bin.gz",
    ]
    assert "id" not in doc["measurements"][0] and "environment_id" not in doc["run"]

    assert import_document(other_store, doc) is True
    again = other_store.export_run(run_id)
    assert again == doc
    copied = other_store.get_run(run_id)
    assert (copied.status, copied.created, copied.finished) == (
        "complete",
        doc["run"]["created"],
        doc["run"]["finished"],
    )
    assert other_store.read_artifact(run_id, "trace.bin.gz") == bytes(range(256))
    assert other_store.environment(run_id) == store.environment(run_id)


def test_imported_runs_share_an_environment_like_begun_ones(store, other_store):
    first, second = _full_run(store), _full_run(store)
    import_document(other_store, store.export_run(first))
    import_document(other_store, store.export_run(second))
    a, b = other_store.get_run(first), other_store.get_run(second)
    assert (
        a.environment_id == b.environment_id and a.fingerprint == store.get_run(first).fingerprint
    )
    begun = other_store.begin_run("op", "later", environment=ENV)
    assert other_store.get_run(begun).environment_id == a.environment_id


def test_importing_a_run_the_store_holds_returns_false_and_changes_nothing(store, other_store):
    run_id = _full_run(store)
    doc = store.export_run(run_id)
    assert import_document(other_store, doc) is True
    changed = dict(doc, run=dict(doc["run"], name="other"), measurements=[])
    assert import_document(other_store, changed) is False
    assert import_document(store, doc) is False
    assert other_store.export_run(run_id) == doc


def _document(store) -> dict:
    return store.export_run(_full_run(store))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda d: d.pop("run"), "run is missing"),
        (lambda d: d["run"].update(status="finished"), "run.status"),
        (lambda d: d["run"].update(seed="7"), "run.seed"),
        (lambda d: d["run"].update(config=[]), "run.config"),
        (
            lambda d: d["measurements"][1].update(samples=[1.0, "x"]),
            r"measurements\[1\].samples\[1\]",
        ),
        (lambda d: d["measurements"][0].update(processes=[0]), r"measurements\[0\].processes"),
        (lambda d: d["measurements"][0].update(n=99), r"measurements\[0\].n"),
        (lambda d: d["metrics"][0].update(better="up"), r"metrics\[0\].better"),
        (lambda d: d["artifacts"][0].update(data_base64="!!"), r"artifacts\[0\].data_base64"),
        (lambda d: d["artifacts"][0].update(sha256="0" * 64), r"artifacts\[0\].sha256"),
        (lambda d: d["artifacts"][1].update(name="../b"), r"artifacts\[1\].name"),
    ],
)
def test_a_malformed_document_names_the_field_and_writes_nothing(store, other_store, change, field):
    doc = _document(store)
    change(doc)
    with pytest.raises(UsageError, match=field) as info:
        import_document(other_store, doc)
    assert "\n" not in str(info.value)
    assert other_store.list_runs() == []


def test_a_document_of_an_unknown_format_version_is_refused(store, other_store):
    doc = dict(_document(store), format="d5-run/2")
    with pytest.raises(UsageError, match=r"d5-run/2.*upgrade d5core"):
        import_document(other_store, doc)
    with pytest.raises(UsageError, match="format"):
        import_document(other_store, dict(doc, format="something"))
    assert other_store.list_runs() == []


def test_exporting_an_unknown_run_is_a_usage_error(store):
    with pytest.raises(UsageError, match="no run 'feedbeef'"):
        store.export_run("feedbeef")


def test_a_store_names_its_location_and_backend(store_target, store):
    assert store.location == store_target
    assert store.backend == ("postgresql" if "://" in store_target else "sqlite")


def test_a_version_5_database_gains_artifacts_and_keeps_its_runs(db, manager):
    with ResultsStore.open(db, manager=manager) as s:
        run_id = s.record_measurement_run("kept", {"time": [1.0, 2.0]}, environment=ENV)
    conn = _raw(db)
    conn.execute("DROP TABLE artifacts")
    conn.execute("PRAGMA user_version = 5")
    conn.close()
    with ResultsStore.open(db, manager=manager) as s:
        assert s.get_run(run_id).status == "complete"
        s.add_artifact(run_id, "note.txt", b"added after the upgrade")
        assert s.artifact_names(run_id) == ["note.txt"]
    assert _raw(db).execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
