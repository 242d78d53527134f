"""A database named by URL is opened by the plugin that knows its scheme
(``d5_results_backend``): d5's own team store for ``postgresql://``, a third party's for
its own scheme, and one line naming the scheme when nobody opens it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from d5core.errors import UsageError
from d5core.hookspecs import hookimpl
from d5core.results import ResultsStore
from d5core.results.sqlite_backend import SqliteBackend

ENV = {"cpu": {"model": "Test CPU"}}


def _file_scheme_plugin(root: Path, calls: list[tuple[str, bool]]) -> Any:
    """A plugin that keeps ``teamfile://NAME`` stores as SQLite files under ``root``."""

    @hookimpl
    def d5_results_backend(url: str, create: bool, timeout_s: float) -> Any:
        if not url.startswith("teamfile://"):
            return None
        calls.append((url, create))
        return SqliteBackend.open(
            root / url.removeprefix("teamfile://"), create=create, timeout_s=timeout_s
        )

    return SimpleNamespace(d5_results_backend=d5_results_backend)


def test_a_plugin_opens_the_urls_of_its_own_scheme(d5_plugin_manager, tmp_path):
    calls: list[tuple[str, bool]] = []
    d5_plugin_manager.register(_file_scheme_plugin(tmp_path, calls), "teamfile")
    with ResultsStore.open("teamfile://shared.sqlite", manager=d5_plugin_manager) as store:
        run_id = store.record_measurement_run("gemm", {"time": [1.0, 2.0]}, environment=ENV)
        assert store.location == str(tmp_path / "shared.sqlite")
    with ResultsStore.open("teamfile://shared.sqlite", create=False) as store:
        assert store.get_run(run_id).status == "complete"
    assert calls == [("teamfile://shared.sqlite", True), ("teamfile://shared.sqlite", False)]


def test_a_url_nobody_opens_is_refused_in_one_line_naming_its_scheme(d5_plugin_manager):
    with pytest.raises(UsageError) as err:
        ResultsStore.open("mysql://me:secret@db.example/d5", manager=d5_plugin_manager)
    message = str(err.value)
    assert "\n" not in message
    assert "'mysql'" in message and "postgresql://" in message
    assert "secret" not in message and "***" in message


def test_a_plugin_that_returns_no_backend_object_is_named(d5_plugin_manager):
    @hookimpl
    def d5_results_backend(url: str, create: bool, timeout_s: float) -> Any:
        return "not a backend"

    d5_plugin_manager.register(SimpleNamespace(d5_results_backend=d5_results_backend), "bad")
    with pytest.raises(UsageError, match="returned str, not a StoreBackend"):
        ResultsStore.open("weird://x/y", manager=d5_plugin_manager)


def test_a_plugin_refusing_a_url_reaches_the_user_as_its_own_line(d5_plugin_manager):
    @hookimpl
    def d5_results_backend(url: str, create: bool, timeout_s: float) -> Any:
        raise UsageError("the team server needs a VPN: connect first")

    d5_plugin_manager.register(SimpleNamespace(d5_results_backend=d5_results_backend), "vpn")
    with pytest.raises(UsageError, match="needs a VPN"):
        ResultsStore.open("corp://results/d5", manager=d5_plugin_manager)
