"""The error for an operator an executor lacks names the installed executors that run it
(GraphExecutor.supports / check_supported / unsupported), leaving out broken entries."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pytest

import d5core.plugins
from d5core.errors import UsageError
from d5core.levels.networks import (
    GraphExecutor,
    executors_supporting,
    missing_operator_message,
    operator_alternatives,
)
from d5core.testing.networks import mlp


class _Listed(GraphExecutor):
    name: ClassVar[str] = "listed"
    supported_ops: ClassVar[frozenset[str]] = frozenset({"Gemm", "Erf"})

    def __init__(self, network: Any, *, device: str = "cpu") -> None:
        super().__init__(network, device=device)
        self.check_supported()

    def inference(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {}


class _Anything(_Listed):
    """Says nothing about its operators (empty supported_ops): it cannot tell."""

    name: ClassVar[str] = "anything"
    supported_ops: ClassVar[frozenset[str]] = frozenset()


class _Versioned(_Listed):
    """Runs Erf from opset 13 on only."""

    name: ClassVar[str] = "versioned"

    @classmethod
    def supports(cls, op_type: str, domain: str = "", opset: int | None = None) -> bool:
        return op_type == "Erf" and (opset is None or opset >= 13)


class _Raises(_Listed):
    name: ClassVar[str] = "raises"

    @classmethod
    def supports(cls, op_type: str, domain: str = "", opset: int | None = None) -> bool:
        raise RuntimeError("a broken plugin")


class _Manager:
    def __init__(self, entries: dict[str, Any]) -> None:
        self.entries = entries

    def names(self, group: str) -> list[str]:
        assert group == "d5.frameworks"
        return list(self.entries)

    def load(self, group: str, name: str) -> Any:
        entry = self.entries[name]
        if isinstance(entry, Exception):
            raise entry
        return entry


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = {
        "listed": _Listed,
        "anything": _Anything,
        "versioned": _Versioned,
        "raises": _Raises,
        "broken": ImportError("No module named 'sdk'"),
    }
    monkeypatch.setattr(d5core.plugins, "get_plugin_manager", lambda: _Manager(entries))


def test_supports_defaults_to_supported_ops_and_none_without_them() -> None:
    assert _Listed.supports("Erf") is True
    assert _Listed.supports("Sin") is False
    assert _Anything.supports("Sin") is None


@pytest.mark.usefixtures("installed")
def test_executors_supporting_sorts_yes_and_cannot_tell_and_drops_broken() -> None:
    assert executors_supporting("Erf", "", 17) == (["listed", "versioned"], ["anything"])
    assert executors_supporting("Erf", "", 11) == (["listed"], ["anything"])
    assert executors_supporting("Erf", exclude="listed") == (["versioned"], ["anything"])


@pytest.mark.usefixtures("installed")
def test_the_message_is_one_line_naming_the_operator_node_and_executors() -> None:
    message = missing_operator_message("narrow", "Erf", "n7", opset=17)
    assert message == (
        "the narrow executor does not support operator 'Erf' (node 'n7'); executors that "
        "do: listed, versioned; anything may (they do not say)"
    )
    assert operator_alternatives("Sin") == (
        "no other installed executor does ('d5 list-plugins' lists them); anything may "
        "(they do not say)"
    )
    custom = missing_operator_message("narrow", "Frob", "n1", domain="com.example")
    assert "operator 'com.example.Frob' (node 'n1')" in custom


@pytest.mark.usefixtures("installed")
def test_check_supported_raises_it_for_the_first_unsupported_node() -> None:
    # mlp: Gemm, Tanh, ...; the listed executor runs Gemm and Erf only
    with pytest.raises(UsageError) as info:
        _Listed(mlp(loss=False))
    message = str(info.value)
    assert message.startswith("the listed executor does not support operator 'Tanh' (node '")
    assert message.endswith(
        "; no other installed executor does ('d5 list-plugins' lists them)"
        "; anything may (they do not say)"
    )


def test_an_executor_that_cannot_tell_refuses_nothing() -> None:
    assert _Anything(mlp(loss=False)).details() == {}
