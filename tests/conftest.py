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
