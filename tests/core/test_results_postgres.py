"""The PostgreSQL results store: its schema marker and migrations, bad input in one line
with nothing changed, and runs of killed writers on other hosts.

What both backends share runs in test_results_store.py and test_results_kill.py; these
are PostgreSQL's counterparts of the SQLite-file-only tests there.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from d5core.errors import UsageError
from d5core.plugins import PluginManager
from d5core.results import SCHEMA_VERSION, ResultsStore, read_store
from d5core.results import schema as schema_mod
from d5core.results.paths import resolve_db
from d5core.teamstore import postgres_schema
from d5core.testing.postgres import PostgresCluster, query_database

ENV = {"cpu": {"model": "Test CPU"}, "argv": ["d5", "bench"]}


@pytest.fixture
def manager() -> PluginManager:
    return PluginManager({}, discover_installed=False)


def _dbname(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def _one_line(exc: pytest.ExceptionInfo[UsageError]) -> str:
    message = str(exc.value)
    assert "\n" not in message, message
    return message


# -- the schema ---------------------------------------------------------------------


def test_a_new_database_is_marked_d5_at_the_current_version(postgres_db, manager):
    with ResultsStore.open(postgres_db, manager=manager) as store:
        assert store.backend == "postgresql"
    assert query_database(postgres_db, "SELECT application, version FROM d5_schema") == [
        ("d5rs", SCHEMA_VERSION)
    ]
    tables = {
        t
        for (t,) in query_database(
            postgres_db, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        )
    }
    assert tables == {
        "d5_schema",
        "environments",
        "runs",
        "measurements",
        "samples",
        "run_metrics",
        "run_tags",
        "artifacts",
    }


def test_reals_are_double_precision_and_ids_bigint_identities(postgres_db, manager):
    with ResultsStore.open(postgres_db, manager=manager) as store:
        run_id = store.begin_run("op", "x", environment=ENV)
        mid = store.add_measurement(run_id, "time", [0.1 + 1e-12, 1 / 3])
        assert store.samples(mid) == [0.1 + 1e-12, 1 / 3]  # float4 would round these
    types = dict(
        query_database(
            postgres_db,
            "SELECT table_name || '.' || column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema()",
        )
    )
    assert types["samples.value"] == types["run_metrics.value"] == "double precision"
    assert types["runs.proc_started"] == "double precision"
    assert types["measurements.id"] == types["environments.id"] == "bigint"
    assert types["artifacts.data"] == "bytea"


def test_postgresql_migrations_end_at_the_sqlite_version():
    assert schema_mod.latest_version(postgres_schema.POSTGRES_MIGRATIONS) == SCHEMA_VERSION
    assert [m.version for m in postgres_schema.POSTGRES_MIGRATIONS][-1] == SCHEMA_VERSION


def test_concurrent_openers_of_a_new_database_migrate_it_once(postgres_db):
    errors: list[BaseException] = []
    start = threading.Barrier(6)

    def opener() -> None:
        try:
            start.wait()
            with ResultsStore.open(
                postgres_db, manager=PluginManager({}, discover_installed=False)
            ):
                pass
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert query_database(postgres_db, "SELECT application, version FROM d5_schema") == [
        ("d5rs", SCHEMA_VERSION)
    ]


def test_a_later_migration_is_applied_and_a_failing_one_changes_nothing(
    postgres_db, manager, monkeypatch
):
    with ResultsStore.open(postgres_db, manager=manager) as store:
        run_id = store.record_measurement_run("kept", {"time": [1.0, 2.0]}, environment=ENV)
    bad = schema_mod.Migration(
        SCHEMA_VERSION + 1,
        "test step",
        ("CREATE TABLE half_done (x INTEGER)", "ALTER TABLE no_such_table ADD COLUMN y TEXT"),
    )
    monkeypatch.setattr(
        postgres_schema, "POSTGRES_MIGRATIONS", (*postgres_schema.POSTGRES_MIGRATIONS, bad)
    )
    with pytest.raises(UsageError, match="cannot create or upgrade") as err:
        ResultsStore.open(postgres_db, manager=manager)
    _one_line(err)
    assert query_database(postgres_db, "SELECT version FROM d5_schema") == [(SCHEMA_VERSION,)]
    assert query_database(postgres_db, "SELECT to_regclass('half_done') IS NULL") == [(True,)]

    good = schema_mod.Migration(
        SCHEMA_VERSION + 1, "test step", ("ALTER TABLE runs ADD COLUMN note TEXT",)
    )
    monkeypatch.setattr(
        postgres_schema, "POSTGRES_MIGRATIONS", (*postgres_schema.POSTGRES_MIGRATIONS[:-1], good)
    )
    with ResultsStore.open(postgres_db, manager=manager) as store:
        assert store.get_run(run_id).status == "complete"
    assert query_database(postgres_db, "SELECT version FROM d5_schema") == [(SCHEMA_VERSION + 1,)]


# -- bad input: one line, nothing changed -------------------------------------------


def test_a_database_from_a_newer_d5_is_refused_naming_both_versions(postgres_db, manager):
    with ResultsStore.open(postgres_db, manager=manager):
        pass
    query_database(postgres_db, "UPDATE d5_schema SET version = 99")
    with pytest.raises(UsageError) as err:
        ResultsStore.open(postgres_db, manager=manager)
    message = _one_line(err)
    assert "schema version 99" in message and f"up to {SCHEMA_VERSION}" in message
    assert query_database(postgres_db, "SELECT version FROM d5_schema") == [(99,)]


def test_a_database_of_another_application_is_refused_and_left_untouched(postgres_db, manager):
    query_database(postgres_db, "CREATE TABLE customers (id INTEGER, name TEXT)")
    query_database(postgres_db, "INSERT INTO customers VALUES (1, 'ada')")
    with pytest.raises(UsageError) as err:
        ResultsStore.open(postgres_db, manager=manager)
    message = _one_line(err)
    assert "not a d5 results database" in message
    assert "database of another application" in message and "customers" in message
    tables = query_database(
        postgres_db, "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
    )
    assert tables == [("customers",)]
    assert query_database(postgres_db, "SELECT * FROM customers") == [(1, "ada")]


def test_a_d5_schema_table_of_another_marker_is_refused(postgres_db, manager):
    query_database(postgres_db, "CREATE TABLE d5_schema (application TEXT, version INTEGER)")
    query_database(postgres_db, "INSERT INTO d5_schema VALUES ('zzzz', 1)")
    with pytest.raises(UsageError, match="database of another application"):
        ResultsStore.open(postgres_db, manager=manager)
    assert query_database(postgres_db, "SELECT * FROM d5_schema") == [("zzzz", 1)]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://postgres@127.0.0.1:notaport/d5", "bad database URL"),
        ("postgresql:///d5", "names no host"),
        ("postgresql://postgres@127.0.0.1:5432", "names no database"),
        ("postgresql://postgres@127.0.0.1:5432/", "names no database"),
        ("mysql://root@127.0.0.1/d5", "unsupported database URL"),
    ],
)
def test_a_bad_url_says_which_form_is_expected(url, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError) as err:
        ResultsStore.open(url)
    message = _one_line(err)
    assert expected in message and "postgresql://user@host:port/dbname" in message
    assert list(tmp_path.iterdir()) == []  # no file made of the URL


def test_a_password_is_never_shown(postgres_cluster, manager):
    url = postgres_cluster.create_database()
    parts = urlsplit(url)
    with_password = url.replace("postgres@", "postgres:s3cret@")
    with ResultsStore.open(with_password, manager=manager) as store:
        assert (
            store.location == f"postgresql://postgres:***@{parts.netloc.split('@')[1]}{parts.path}"
        )
    with pytest.raises(UsageError) as err:
        ResultsStore.open("postgresql://postgres:s3cret@127.0.0.1:notaport/d5")
    assert "s3cret" not in str(err.value) and "***" in str(err.value)


def test_an_unreachable_server_names_host_and_port(manager):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens there once closed
    with pytest.raises(UsageError) as err:
        ResultsStore.open(f"postgresql://postgres@127.0.0.1:{port}/d5", manager=manager)
    message = _one_line(err)
    assert f"127.0.0.1:{port} is not reachable (connection refused)" in message


def test_a_missing_database_names_it(postgres_cluster, manager):
    with pytest.raises(UsageError) as err:
        ResultsStore.open(postgres_cluster.url("no_such_db"), manager=manager)
    assert "no database 'no_such_db'" in _one_line(err)


def test_an_unknown_user_is_named(postgres_cluster, manager):
    url = postgres_cluster.url("postgres").replace("postgres@", "nobody_here@")
    with pytest.raises(UsageError) as err:
        ResultsStore.open(url, manager=manager)
    assert "no user 'nobody_here'" in _one_line(err)


def test_failed_authentication_is_one_line(postgres_cluster: PostgresCluster, manager):
    """A user with a password, checked by scram (the cluster trusts everyone else)."""
    postgres_cluster.execute(
        "postgres", "DO $$ BEGIN CREATE ROLE d5_pw LOGIN PASSWORD 'right'; "
        "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
    )  # fmt: skip
    hba = postgres_cluster.data / "pg_hba.conf"
    rules = hba.read_text()
    if "d5_pw" not in rules:
        hba.write_text("host all d5_pw 127.0.0.1/32 scram-sha-256\n" + rules)
        postgres_cluster.execute("postgres", "SELECT pg_reload_conf()")
    url = postgres_cluster.url("postgres").replace("postgres@", "d5_pw:wrong@")
    with pytest.raises(UsageError) as err:
        ResultsStore.open(url, manager=manager)
    message = _one_line(err)
    assert "authentication failed for user 'd5_pw'" in message and "wrong" not in message


def test_without_psycopg_a_url_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(UsageError) as err:
        ResultsStore.open("postgresql://postgres@127.0.0.1:5432/d5")
    assert "pip install 'd5core[postgres]'" in _one_line(err)


def test_reading_an_empty_database_is_a_usage_error_and_creates_nothing(postgres_db):
    with pytest.raises(UsageError) as err:
        read_store(postgres_db)
    assert "no d5 results in" in _one_line(err) and "the database is empty" in str(err.value)
    tables = "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
    assert query_database(postgres_db, tables) == [(0,)]


def test_a_url_reaches_the_store_from_d5_db_and_through_a_path(postgres_db, monkeypatch):
    with ResultsStore.open(postgres_db):
        pass
    monkeypatch.setenv("D5_DB", postgres_db)
    assert resolve_db(None) == postgres_db
    assert resolve_db(Path(postgres_db)) == postgres_db  # pathlib's "//" -> "/" undone
    with read_store(None) as store:
        assert store.location == postgres_db and store.list_runs() == []
        with pytest.raises(UsageError, match="is not a file"):
            _ = store.path


# -- killed writers on other hosts ------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, time
    from d5core.plugins import PluginManager
    from d5core.results import ResultsStore

    with ResultsStore.open(sys.argv[1], manager=PluginManager({}, discover_installed=False)) as s:
        run_id = s.begin_run("measure", "writer", environment={"cpu": {"model": "x"}})
        s.add_measurement(run_id, "time", [1.0, 2.0])
        print(run_id, flush=True)
        time.sleep(600)
    """
)


def _writer(url: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen([sys.executable, "-c", WRITER, url], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    run_id = proc.stdout.readline().strip()
    assert run_id, "the writer printed no run id"
    return proc, run_id


def test_a_run_of_another_host_whose_writer_was_killed_reads_incomplete(postgres_db, manager):
    proc, run_id = _writer(postgres_db)
    try:
        # As if the writer ran on another node: its pid means nothing here.
        query_database(postgres_db, "UPDATE runs SET hostname = 'node-7' WHERE id = ?", (run_id,))
        with ResultsStore.open(postgres_db, manager=manager) as store:
            assert store.get_run(run_id).status == "running"  # it holds its lock
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        for _ in range(100):  # the server notices the closed connection at once
            with ResultsStore.open(postgres_db, manager=manager) as store:
                run = store.get_run(run_id)
            if run.status != "running":
                break
        assert run.status == "incomplete" and f"pid {proc.pid} on node-7" in (run.error or "")
        assert run.n_measurements == 1
        status = query_database(postgres_db, "SELECT status FROM runs WHERE id = ?", (run_id,))
        assert status == [("incomplete",)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_a_finished_run_releases_its_lock_and_stays_complete(postgres_db, manager):
    from d5core.teamstore.postgres_backend import run_lock_key

    with ResultsStore.open(postgres_db, manager=manager) as store:
        run_id = store.begin_run("op", "x", environment=ENV)
        key = run_lock_key(run_id)
        held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid::bigint = ?"
        objid = key & 0xFFFFFFFF
        assert query_database(postgres_db, held, (objid,)) == [(1,)]
        store.finish_run(run_id)
        assert query_database(postgres_db, held, (objid,)) == [(0,)]
        query_database(postgres_db, "UPDATE runs SET hostname = 'node-7' WHERE id = ?", (run_id,))
        assert store.get_run(run_id).status == "complete"


# -- the private cluster of the tests ------------------------------------------------


def test_a_private_cluster_stops_by_its_pid_and_leaves_nothing(postgres_cluster):
    cluster = PostgresCluster.start()
    pid = cluster.server_pid()
    assert pid is not None
    assert query_database(cluster.create_database("d5"), "SELECT 1") == [(1,)]
    cluster.stop()
    assert not cluster.root.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_without_psycopg_the_cluster_says_why_it_cannot_run(monkeypatch):
    from d5core.testing.postgres import postgres_unavailable

    monkeypatch.setitem(sys.modules, "psycopg", None)
    assert "pip install 'd5core[postgres]'" in (postgres_unavailable() or "")


def test_a_read_only_user_is_refused_in_one_line_and_nothing_is_written(
    postgres_cluster: PostgresCluster, postgres_db, manager
):
    with ResultsStore.open(postgres_db, manager=manager) as store:
        kept = store.record_measurement_run("kept", {"time": [1.0, 2.0]}, environment=ENV)
    dbname = _dbname(postgres_db)
    postgres_cluster.execute(
        "postgres", "DO $$ BEGIN CREATE ROLE d5_reader LOGIN; "
        "EXCEPTION WHEN duplicate_object THEN NULL; END $$"
    )  # fmt: skip
    postgres_cluster.execute(dbname, "GRANT SELECT ON ALL TABLES IN SCHEMA public TO d5_reader")
    reader = postgres_db.replace("postgres@", "d5_reader@")
    with ResultsStore.open(reader, manager=manager) as store:
        assert store.get_run(kept).status == "complete"  # reading is fine
        with pytest.raises(UsageError) as err:
            store.require_writable()
        assert "is not writable" in _one_line(err)
        with pytest.raises(UsageError) as err:
            store.begin_run("op", "refused", environment=ENV)
        assert "read-only for this user" in _one_line(err)
    assert query_database(postgres_db, "SELECT id FROM runs") == [(kept,)]
