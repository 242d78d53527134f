"""Validation cannot be made to pass by a bad tolerance or a missing gradient.

A negative, NaN or infinite tolerance lets any value through, so it is refused (exit 2 on
the command line). A gradient the operator does not give is a failure unless the
operator declares it has none, and the report says so. The operators are written here,
so that d5core is tested without any plugin installed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.levels.operators import Operator
from d5core.validate import (
    DECLARED_NO_GRADIENT,
    Tolerance,
    check_arrays,
    gradcheck,
    tolerance_for,
    validate_operator,
)

BAD_TOLERANCES = [-1.0, -1e-12, math.nan, math.inf]


# -- tolerances ------------------------------------------------------------------------


@pytest.mark.parametrize("value", BAD_TOLERANCES)
@pytest.mark.parametrize("name", ["rtol", "atol"])
def test_a_negative_nan_or_infinite_tolerance_is_refused(name: str, value: float) -> None:
    good = {"rtol": 1e-4, "atol": 1e-5}
    with pytest.raises(UsageError, match=f"^{name} .* is not a tolerance: give a finite"):
        Tolerance(**{**good, name: value})


def test_zero_tolerances_ask_for_exact_equality() -> None:
    exact = Tolerance(rtol=0.0, atol=0.0)
    assert check_arrays(np.ones(3), np.ones(3), exact)[1] is None
    assert check_arrays(np.ones(3) + 1e-12, np.ones(3), exact)[1] == "tol_ratio"


def test_tolerances_read_from_a_mapping_are_checked_too() -> None:
    with pytest.raises(UsageError, match="float32 atol 'nan' is not a tolerance"):
        tolerance_for("float32", {"float32": {"atol": "nan"}})
    assert tolerance_for("float32", {"float32": {"rtol": "0.5"}}).rtol == 0.5


def test_a_nan_tolerance_that_slipped_through_fails_every_check() -> None:
    bound = Tolerance.__new__(Tolerance)  # built without __init__: no check ran
    object.__setattr__(bound, "rtol", math.nan)
    object.__setattr__(bound, "atol", math.nan)
    _, failed, _ = check_arrays(np.array([1.0, 5.0]), np.array([1.0, 2.0]), bound)
    assert failed == "tol_ratio"


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        (["validate", "op", "Conv", "--backend", "torch"], ["--rtol", "-1", "--atol", "-1"]),
        (["validate", "op", "Conv", "--backend", "torch"], ["--atol", "nan"]),
        (["validate", "net", "mlp", "--executor", "torch"], ["--rtol", "inf"]),
    ],
)
def test_the_command_line_refuses_bad_tolerances_before_any_work(
    command: list[str], flags: list[str], d5_cli, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))
    result = d5_cli(*command, *flags)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith(f"d5: error: {flags[0]} ")
    assert "is not a tolerance: give a finite number >= 0" in result.stderr
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "results.sqlite").exists(), "a run was stored"


# -- missing gradients -----------------------------------------------------------------


class Double(Operator):
    """``2 x``, with no backward and no declaration: a gradient is missing."""

    op_type = "Double"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [inputs[0] * 2]


class Argmax(Operator):
    """Indices of the largest value per row: no gradient by design, and it says so."""

    op_type = "Argmax"
    no_gradient = True

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [np.argmax(inputs[0], axis=-1)]


class Scale(Operator):
    """``x * s``; backward gives no gradient for the floating ``s``."""

    op_type = "Scale"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        return [inputs[0] * inputs[1]]

    def backward(self, grad_outputs, inputs, outputs):
        return [grad_outputs[0] * inputs[1], None]


class ScaleByHyperparameter(Scale):
    """The same, declaring that ``s`` is a hyperparameter without gradient."""

    no_gradient_inputs = frozenset({1})


def test_an_operator_without_backward_fails_validation_naming_each_input() -> None:
    x = np.random.default_rng(0).standard_normal((3, 4))
    report = validate_operator(Double(), Double(), [x], input_names=["X"])
    assert not report.passed
    assert not report.no_gradient
    [check] = report.gradients
    assert (check.failed_metric, check.method, check.skipped) == ("missing", "backward", "")
    assert report.failures() == [
        "gradient of input 0 (X) [backward]: missing: the candidate has no backward; "
        "implement backward(), or set no_gradient = True on the operator if it has no "
        "gradient by design"
    ]


def test_an_operator_declaring_no_gradient_passes_and_the_report_says_so() -> None:
    x = np.random.default_rng(1).standard_normal((3, 4))
    report = validate_operator(Argmax(), Argmax(), [x])
    assert report.passed
    assert report.no_gradient
    assert [g.skipped for g in report.gradients] == [DECLARED_NO_GRADIENT]
    data = report.to_json()
    assert data["no_gradient"] is True and data["passed"] is True


def test_gradcheck_fails_a_floating_input_backward_leaves_without_gradient() -> None:
    inputs = [np.random.default_rng(2).standard_normal((2, 3)), np.array(1.5)]
    checks = gradcheck(Scale(), inputs, names=["X", "s"])
    assert checks[0].passed
    assert not checks[1].passed and checks[1].failed_metric == "missing"
    assert "no_gradient_inputs" in checks[1].detail


def test_gradcheck_skips_an_input_declared_without_gradient() -> None:
    inputs = [np.random.default_rng(2).standard_normal((2, 3)), np.array(1.5)]
    checks = gradcheck(ScaleByHyperparameter(), inputs)
    assert [c.passed for c in checks] == [True, True]
    assert checks[1].skipped == DECLARED_NO_GRADIENT
    assert validate_operator(ScaleByHyperparameter(), None, inputs).passed
    assert not validate_operator(Scale(), None, inputs).passed


def test_gradcheck_of_an_operator_without_backward_reports_instead_of_raising() -> None:
    x = np.random.default_rng(3).standard_normal((2, 2))
    assert [c.failed_metric for c in gradcheck(Double(), [x])] == ["missing"]
    assert [c.skipped for c in gradcheck(Argmax(), [x])] == [DECLARED_NO_GRADIENT]


def test_integer_inputs_of_an_operator_without_backward_are_not_missing_gradients() -> None:
    class Take(Operator):
        op_type = "Take"

        def forward(self, inputs):
            return [inputs[0][inputs[1]]]

    report = validate_operator(Take(), Take(), [np.arange(4.0), np.array([1, 3])])
    assert [g.passed for g in report.gradients] == [False, True]
    assert report.gradients[1].skipped == "int64 input: not differentiable"
