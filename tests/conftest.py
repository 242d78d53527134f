"""Shared test set-up: every test starts without a cached process-wide plugin manager."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from d5core.plugins import reset_plugin_manager


@pytest.fixture(autouse=True)
def _fresh_plugin_manager() -> Iterator[None]:
    reset_plugin_manager(None)
    yield
    reset_plugin_manager(None)


@pytest.fixture(autouse=True)
def _results_outside_the_users_store(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command a test runs without ``--db`` writes to a database of the test session,
    never to the user's own (``~/.local/share/d5``); a test that sets ``D5_DB`` keeps it."""
    import os

    if "D5_DB" not in os.environ:
        session_dir = tmp_path_factory.getbasetemp() / "d5-default-store"
        session_dir.mkdir(exist_ok=True)
        monkeypatch.setenv("D5_DB", str(session_dir / "results.sqlite"))


@pytest.fixture(autouse=True)
def _a_quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs a test stores record a quiet machine's load, however busy the machine
    running the tests is: tables, comparisons and reports mark runs measured on a busy
    machine (issue 28), and what a test sees must not depend on the load. A test that
    simulates load patches ``os.getloadavg`` itself, after this."""
    import os

    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0), raising=False)


# -- results stores on both backends ----------------------------------------------------


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[object]:
    """A private PostgreSQL server for the session (d5core.testing.postgres), stopped at
    the end. Skipped with the reason where PostgreSQL is not installed, except under CI
    (``CI=true``), where a missing server fails the test."""
    import os

    from d5core.testing.postgres import PostgresCluster, postgres_unavailable

    reason = postgres_unavailable()
    if reason is not None:
        reason = f"PostgreSQL store tests need a local server: {reason}"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; under CI this check must run", pytrace=False)
        pytest.skip(reason)
    cluster = PostgresCluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_db(postgres_cluster) -> str:  # type: ignore[no-untyped-def]
    """The URL of a fresh, empty database on the session's PostgreSQL server."""
    url: str = postgres_cluster.create_database()
    return url


@pytest.fixture
def postgres_url(postgres_db: str) -> str:
    """The same as ``postgres_db``: a fresh, empty database's URL."""
    return postgres_db


@pytest.fixture(params=["sqlite", "postgresql"])
def store_target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A new, empty results database on each backend: an SQLite file path, then a
    PostgreSQL URL; what ``ResultsStore.open`` and ``--db`` take."""
    if request.param == "postgresql":
        url: str = request.getfixturevalue("postgres_db")
        return url
    return str(tmp_path_factory.mktemp("store") / "results.sqlite")
