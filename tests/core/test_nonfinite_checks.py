"""NaN and infinity never pass a check (issue 28, section 4): d5core.validate's comparisons
and LoadGen's accuracy check fail a candidate whose outputs or gradients hold a non-finite
value, even where the reference holds the same one, and say where; a problem that declares
non-finite results expected (``allow_nonfinite``) passes only where they coincide, and says
so. The operators are written here, so that d5core is tested without any plugin."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from d5core.levels.operators import Operator
from d5core.loadgen.accuracy import LoggedSample, compare_logged
from d5core.validate import (
    Tolerance,
    check_arrays,
    compare_outputs,
    error_metrics,
    gradcheck,
    nonfinite_summary,
    validate_operator,
)


class Square(Operator):
    """``y = x * x``, with ``poison`` written into the output at ``where`` (none by
    default) and ``grad_poison`` into the gradient likewise."""

    op_type = "Square"

    def __init__(
        self, poison: float | None = None, where: int = 0, grad_poison: float | None = None
    ) -> None:
        super().__init__({})
        self.poison, self.where, self.grad_poison = poison, where, grad_poison

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        y = inputs[0] * inputs[0]
        if self.poison is not None:
            y.reshape(-1)[self.where] = self.poison
        return [y]

    def backward(self, grad_outputs, inputs, outputs):
        dx = 2 * inputs[0] * grad_outputs[0]
        if self.grad_poison is not None:
            dx.reshape(-1)[self.where] = self.grad_poison
        return [dx]


def x() -> list[np.ndarray]:
    return [np.linspace(0.5, 2.0, 12).reshape(3, 4)]


@pytest.mark.parametrize(
    ("poison", "kind"), [(math.nan, "1 NaN"), (math.inf, "1 +inf"), (-math.inf, "1 -inf")]
)
@pytest.mark.parametrize("where", [0, 6, 11])
def test_a_nan_output_fails_even_when_the_reference_gives_the_same_nan(poison, kind, where):
    report = validate_operator(Square(poison, where), Square(poison, where), x())
    assert not report.passed
    (output,) = report.outputs
    index = tuple(int(i) for i in np.unravel_index(where, (3, 4)))
    assert output.failed_metric == "nonfinite"
    assert output.detail.startswith(
        f"1 non-finite value ({kind}), the first at index {index} (the expected value there"
    )
    assert "proves nothing" in output.detail
    assert any(line.startswith("output 0: nonfinite: 1 non-finite") for line in report.failures())


def test_the_metrics_of_a_nan_output_are_not_a_number_never_zero():
    (output,) = compare_outputs([np.array([1.0, math.nan])], [np.array([1.0, math.nan])])
    assert not output.passed
    assert math.isnan(output.metrics["max_abs"]) and math.isnan(output.metrics["max_rel"])
    assert f"{output.metrics['max_abs']:.2e}" == "nan"
    assert output.to_json()["metrics"]["max_abs"] is None


def test_disagreeing_nonfinite_values_have_no_error_norm_and_say_where():
    m = error_metrics(np.array([1.0, math.nan]), np.array([1.0, 2.0]))
    assert m["nonfinite"] == 1 and math.isnan(m["max_abs"]) and math.isnan(m["l2"])
    _, failed, why = check_arrays(
        np.array([1.0, 2.0, 3.0]), np.array([1.0, math.inf, 3.0]), Tolerance(1e-7, 1e-9)
    )
    assert failed == "nonfinite"
    assert (
        why
        == "1 non-finite value(s) differ from the expected: 2.0 where inf was expected at index (1,)"
    )


def test_a_nan_output_without_a_reference_fails_on_its_own():
    report = validate_operator(Square(math.nan, 5), None, x())
    (output,) = report.outputs
    assert not report.passed and output.failed_metric == "nonfinite"
    assert output.detail == "1 non-finite value (1 NaN), the first at index (1, 1)"
    assert validate_operator(Square(), None, x()).outputs == []  # finite: nothing to show


def test_a_candidate_compared_with_itself_is_checked_as_without_a_reference():
    op = Square(math.inf, 2)
    report = validate_operator(op, op, x())
    assert report.outputs[0].detail == "1 non-finite value (1 +inf), the first at index (0, 2)"
    assert "reference" not in {g.method for g in report.gradients}


@pytest.mark.parametrize("poison", [math.nan, math.inf])
def test_a_nonfinite_gradient_fails_against_the_reference_and_central_differences(poison):
    report = validate_operator(Square(grad_poison=poison, where=3), Square(), x())
    assert report.outputs[0].passed
    failed = {g.method: g for g in report.gradients if not g.passed}
    assert set(failed) == {"reference", "full"}
    assert all(g.failed_metric == "nonfinite" for g in failed.values())
    assert "the first at index (0, 3)" in failed["reference"].detail


def test_gradcheck_fails_a_nan_backward_of_a_nan_forward():
    (check,) = gradcheck(Square(math.nan, 0, grad_poison=math.nan), x())
    assert not check.passed and check.failed_metric == "nonfinite"


def test_declared_nonfinite_results_pass_where_they_equal_the_reference_and_say_so():
    report = validate_operator(
        Square(math.nan, 4), Square(math.nan, 4), x(), gradcheck=False, allow_nonfinite=True
    )
    assert report.passed and report.nonfinite_allowed and report.to_json()["nonfinite_allowed"]
    assert report.outputs[0].detail.startswith("1 non-finite value (1 NaN), the first at")
    assert "allowed as expected" in report.outputs[0].detail
    assert report.outputs[0].metrics["max_abs"] == 0.0  # over the finite part, which agrees
    elsewhere = validate_operator(
        Square(math.nan, 4), Square(math.nan, 5), x(), gradcheck=False, allow_nonfinite=True
    )
    assert not elsewhere.passed and elsewhere.outputs[0].failed_metric == "nonfinite"
    signs = validate_operator(
        Square(math.inf, 4), Square(-math.inf, 4), x(), gradcheck=False, allow_nonfinite=True
    )
    assert not signs.passed


def test_nonfinite_summary_counts_each_kind():
    values = np.array([[1.0, -math.inf], [math.nan, math.inf], [math.nan, 0.0]])
    count, first, words = nonfinite_summary(values)
    assert (count, first) == (4, (0, 1))
    assert words == "4 non-finite values (2 NaN, 1 +inf, 1 -inf), the first at index (0, 1)"
    assert nonfinite_summary(np.arange(3)) == (0, None, "")


def _logged(value: float) -> LoggedSample:
    return LoggedSample(0, 0, np.array([1.0, value], np.float32).tobytes())


def test_loadgen_accuracy_fails_a_nan_sample_the_reference_also_gives():
    expected = {0: [np.array([1.0, math.nan], np.float32)]}
    verdict = compare_logged([_logged(math.nan)], expected, ["Y"])
    assert verdict["passed"] is False and verdict["failed"] == 1
    worst = verdict["worst"]
    assert worst["metric"] == "nonfinite" and worst["max_abs"] is None
    assert "the first at index (1,)" in worst["detail"]
    allowed = compare_logged([_logged(math.nan)], expected, ["Y"], allow_nonfinite=True)
    assert allowed["passed"] is True


def test_the_numerical_error_metric_does_not_hide_a_nan_output_behind_a_finite_one():
    from d5core.metrics.numerical import NumericalError

    metric = NumericalError()
    metric.add(np.array([1.0, 2.0]), np.array([1.0, 3.0]), name="finite")
    metric.add(np.array([math.nan, 1.0]), np.array([0.5, 1.0]), name="nan")
    result = metric.result()
    assert result["max_abs"] == "nan" and result["value"] == "nan"
    assert result["per_output"]["finite"]["max_abs"] == 1.0
