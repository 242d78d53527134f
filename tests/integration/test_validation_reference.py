"""``D5_REFERENCE`` picks the reference that validation compares with (default numpy),
for operator backends and graph executors alike."""

from __future__ import annotations

import pytest

from d5core.lv0.runner import problem_for, validate_op
from d5core.lv1.runner import validate_network


@pytest.fixture(autouse=True)
def _private_db(tmp_path, monkeypatch):
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))
    monkeypatch.delenv("D5_REFERENCE", raising=False)


def test_operators_are_validated_against_numpy_by_default():
    result = validate_op(problem_for("Relu"), "torch")
    assert (result.against, result.passed) == ("numpy", True)


def test_operator_reference_comes_from_d5_reference(monkeypatch):
    monkeypatch.setenv("D5_REFERENCE", "torch")
    result = validate_op(problem_for("Relu"), "numpy")
    assert (result.against, result.passed) == ("torch", True)
    assert result.to_json()["against"] == "torch"


def test_reference_argument_of_the_runner_wins_over_d5_reference(monkeypatch):
    monkeypatch.setenv("D5_REFERENCE", "torch")
    assert validate_op(problem_for("Relu"), "torch", reference="numpy").against == "numpy"


def test_network_reference_comes_from_d5_reference(monkeypatch):
    monkeypatch.setenv("D5_REFERENCE", "torch")
    result = validate_network("mlp", "numpy")
    assert result.passed and result.to_json()["against"] == "torch"
    assert validate_network("mlp", "numpy", reference="numpy").against == "numpy"


@pytest.mark.parametrize(("level", "what"), [("op", "operator backend"), ("net", "graph executor")])
def test_unknown_d5_reference_exits_2_naming_the_installed_ones(level, what, monkeypatch, d5_cli):
    monkeypatch.setenv("D5_REFERENCE", "nope")
    args = ["Relu", "--backend", "torch"] if level == "op" else ["mlp", "--executor", "torch"]
    result = d5_cli("validate", level, *args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert f"D5_REFERENCE 'nope' is not an installed {what}" in lines[0]
    assert "numpy" in lines[0] and "torch" in lines[0]
