"""The numpy glue of C++ custom operators: the pybind11 build and its validation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from d5core.api import UsageError
from d5core.testing.customop import build, validate_custom

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "custom_ops" / "bias_gelu.cpp"
RIGHT = "gb[c] += static_cast<T>(g);"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ops")


@pytest.fixture(scope="module")
def wrong_backward(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """bias_gelu whose gradient of B is twice what it should be."""
    text = EXAMPLE.read_text()
    assert RIGHT in text
    source = tmp_path_factory.mktemp("src") / "bias_gelu_wrong.cpp"
    source.write_text(text.replace(RIGHT, "gb[c] += static_cast<T>(2 * g);"))
    return source


def test_bias_gelu_passes_validation_in_numpy(cache):
    outcome = validate_custom(EXAMPLE, ["numpy"], dtype="float64", cache=cache)
    [result] = outcome.results
    assert result.passed, result.report.failures()
    assert result.against == "central differences only"
    assert {g.label for g in result.report.gradients} == {
        "gradient of input 0 (X)", "gradient of input 1 (B)"}  # fmt: skip


def test_a_wrong_backward_fails_naming_the_input(cache, wrong_backward):
    outcome = validate_custom(wrong_backward, ["numpy"], cache=cache)
    assert not outcome.passed
    [line] = outcome.failures()
    assert line.startswith("numpy: gradient of input 1 (B) [full]: tol_ratio:")
    x_checks = [g for g in outcome.results[0].report.gradients if g.index == 0]
    assert x_checks and all(g.passed for g in x_checks)


def test_inputs_the_operator_rejects_are_usage_errors(cache):
    op = build(EXAMPLE, ["numpy"], cache=cache).builds["numpy"].create({})
    with pytest.raises(UsageError, match="bias_gelu on numpy: bias_gelu: B must be a vector"):
        op.forward([np.ones((2, 3)), np.ones(4)])
    with pytest.raises(UsageError, match=r"takes inputs .* of one dtype, float32 or float64"):
        op.forward([np.ones((2, 3)), np.ones(3, dtype=np.float32)])
    with pytest.raises(UsageError, match=r"takes 2 inputs \(X, B\), not 1"):
        op.forward([np.ones((2, 3))])
