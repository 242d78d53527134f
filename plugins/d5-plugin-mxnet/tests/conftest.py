"""Fixtures of the MXNet plugin's tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from d5_plugin_mxnet import executor as executor_module
from d5_plugin_mxnet.graph import program
from d5_plugin_mxnet.graph.program import run_steps


@pytest.fixture
def imperative_passes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts the imperative runs of whole graphs the executor makes to compile."""
    runs: list[int] = []

    def counted(*args: Any, **kwargs: Any) -> Any:
        runs.append(1)
        return run_steps(*args, **kwargs)

    monkeypatch.setattr(executor_module, "run_steps", counted)
    yield runs


@pytest.fixture
def inferences(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """Counts MXNet's shape and type inferences while a symbol is derived."""
    calls: list[int] = []
    inferred = program._inferred

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return inferred(*args, **kwargs)

    monkeypatch.setattr(program, "_inferred", counted)
    yield calls
