"""d5core.validate: error metrics, tolerances, reports and the gradient check.

The operators here are written in the test itself, so that d5core is tested without any
plugin installed.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

import numpy as np
import pytest

from d5core.levels.operators import Operator
from d5core.validate import (
    DEFAULT_TOLERANCES,
    Tolerance,
    compare_outputs,
    error_metrics,
    gradcheck,
    tolerance_for,
    validate_operator,
)


class Affine(Operator):
    """``y = tanh(x @ w + b)``, vectorized; ``scale`` spoils the backward on purpose."""

    op_type = "Affine"

    def __init__(self, scale: float = 1.0, dtype: str | None = None) -> None:
        super().__init__({})
        self.scale = scale
        self.dtype = dtype

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x, w, b = inputs
        y = np.tanh(x @ w + b)
        return [y.astype(self.dtype) if self.dtype else y]

    def backward(self, grad_outputs, inputs, outputs):
        x, w, _ = inputs
        dz = grad_outputs[0] * (1 - outputs[0] ** 2)
        return [dz @ w.T, self.scale * (x.T @ dz), dz.sum(axis=0)]


class LoopAffine(Operator):
    """The same operator, element by element: an independent reference."""

    op_type = "Affine"

    def forward(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        x, w, b = inputs
        y = np.empty((x.shape[0], w.shape[1]), dtype=x.dtype)
        for i in range(x.shape[0]):
            for j in range(w.shape[1]):
                y[i, j] = math.tanh(sum(x[i, k] * w[k, j] for k in range(x.shape[1])) + b[j])
        return [y]

    def backward(self, grad_outputs, inputs, outputs):
        x, w, _ = inputs
        dz = grad_outputs[0] * (1 - outputs[0] ** 2)
        dx = np.zeros_like(x)
        dw = np.zeros_like(w)
        for i in range(x.shape[0]):
            for j in range(w.shape[1]):
                for k in range(x.shape[1]):
                    dx[i, k] += dz[i, j] * w[k, j]
                    dw[k, j] += dz[i, j] * x[i, k]
        return [dx, dw, dz.sum(axis=0)]


class TakeRows(Operator):
    """``data[indices]``: an integer input, which has no gradient."""

    op_type = "TakeRows"

    def forward(self, inputs):
        return [inputs[0][inputs[1]]]

    def backward(self, grad_outputs, inputs, outputs):
        dx = np.zeros_like(inputs[0])
        np.add.at(dx, inputs[1], grad_outputs[0])
        return [dx, None]


class ForwardOnly(Operator):
    op_type = "ForwardOnly"

    def forward(self, inputs):
        return [inputs[0] * 2]


def affine_inputs(seed: int = 0, n: int = 3, k: int = 4, m: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((n, k)), rng.standard_normal((k, m)), rng.standard_normal(m)]


# -- error metrics and tolerances ---------------------------------------------------


def test_error_metrics_on_crafted_arrays() -> None:
    m = error_metrics(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0]))
    assert m["l1"] == pytest.approx(1.0)
    assert m["l2"] == pytest.approx(1.0)
    assert m["max_abs"] == pytest.approx(1.0)
    assert m["rel_l1"] == pytest.approx(1 / 7)
    assert m["rel_l2"] == pytest.approx(1 / math.sqrt(21))
    assert m["max_rel"] == pytest.approx(1 / 4)
    assert m["nonfinite"] == 0


def test_max_rel_has_a_safe_denominator_near_zero() -> None:
    m = error_metrics(np.array([1e-3, 5.0], np.float32), np.array([0.0, 5.0], np.float32))
    floor = math.sqrt(np.finfo(np.float32).eps) * 5.0
    assert m["max_rel"] == pytest.approx(1e-3 / floor, rel=1e-5)
    assert math.isfinite(m["max_rel"])


def test_error_metrics_count_disagreeing_nonfinite_values() -> None:
    actual = np.array([np.nan, np.inf, 1.0, np.nan])
    expected = np.array([np.nan, np.inf, np.inf, 2.0])
    m = error_metrics(actual, expected)
    assert m["nonfinite"] == 2
    assert math.isnan(m["max_abs"])  # not a number, never an exact-looking 0


def test_error_metrics_refuse_different_shapes() -> None:
    with pytest.raises(ValueError, match="shapes differ"):
        error_metrics(np.zeros(3), np.zeros((3, 1)))


def test_identical_arrays_have_zero_error() -> None:
    x = np.random.default_rng(0).standard_normal((4, 5))
    assert all(v == 0 for v in error_metrics(x, x.copy()).values())


def test_default_tolerances_are_looser_for_float32() -> None:
    t32, t64 = DEFAULT_TOLERANCES["float32"], DEFAULT_TOLERANCES["float64"]
    assert t32.rtol > t64.rtol and t32.atol > t64.atol
    assert tolerance_for(np.int64) == Tolerance(0.0, 0.0)
    assert tolerance_for("float32", {"float32": {"rtol": 0.5}}) == Tolerance(0.5, t32.atol)
    assert tolerance_for("float64", Tolerance(1, 2)) == Tolerance(1, 2)


def test_absolute_tolerance_scales_with_the_largest_expected_value() -> None:
    expected = np.array([0.0, 1e4], np.float32)
    (ok,) = compare_outputs([np.array([0.05, 1e4], np.float32)], [expected])
    assert ok.passed, ok.detail
    (bad,) = compare_outputs([np.array([0.2, 1e4], np.float32)], [expected])
    assert not bad.passed and bad.failed_metric == "tol_ratio"
    assert "at index (0,)" in bad.detail


def test_compare_outputs_fails_on_dtype_missing_output_and_nonfinite() -> None:
    expected = [np.ones(3, np.float32), np.zeros(2), np.ones(2)]
    actual = [np.ones(3, np.float64), np.array([0.0, np.nan])]
    dtype, nonfinite, missing = compare_outputs(actual, expected, names=["Y", "Z", "W"])
    assert (dtype.failed_metric, nonfinite.failed_metric, missing.failed_metric) == (
        "dtype",
        "nonfinite",
        "missing",
    )
    assert dtype.label == "output 0 (Y)"


def test_integer_outputs_must_match_exactly() -> None:
    (check,) = compare_outputs([np.array([1, 2, 4])], [np.array([1, 2, 3])])
    assert not check.passed and check.failed_metric == "tol_ratio"


# -- validate_operator ---------------------------------------------------------------


def test_correct_candidate_passes_against_an_independent_reference() -> None:
    report = validate_operator(Affine(), LoopAffine(), affine_inputs(), input_names=["x", "w", "b"])
    assert report.passed, report.failures()
    assert report.failures() == []
    methods = {g.method for g in report.gradients}
    assert methods == {"reference", "full"}
    assert len(report.outputs) == 1 and report.outputs[0].metrics["max_abs"] < 1e-12


def test_backward_off_by_one_percent_fails_and_names_the_input() -> None:
    report = validate_operator(
        Affine(scale=1.01), LoopAffine(), affine_inputs(), input_names=["x", "w", "b"]
    )
    assert not report.passed
    failures = report.failures()
    assert len(failures) == 2, failures
    assert all(line.startswith("gradient of input 1 (w)") for line in failures)
    assert any("[reference]" in line for line in failures)
    assert any("[full]" in line and "central differences" in line for line in failures)
    assert all("tol_ratio" in line for line in failures)


def test_wrong_forward_fails_naming_the_output() -> None:
    class Shifted(Affine):
        def forward(self, inputs):
            return [super().forward(inputs)[0] + 1e-3]

    report = validate_operator(Shifted(), LoopAffine(), affine_inputs(), output_names=["y"])
    assert report.failures()[0].startswith("output 0 (y): tol_ratio")


def test_float32_candidate_is_compared_with_float32_tolerances() -> None:
    inputs32 = [x.astype(np.float32) for x in affine_inputs()]
    report = validate_operator(
        Affine(dtype="float32"), LoopAffine(), inputs32, float64_candidate=Affine()
    )
    assert report.passed, report.failures()


def test_gradcheck_of_a_candidate_fixed_to_float32_fails_on_dtype() -> None:
    checks = gradcheck(Affine(dtype="float32"), affine_inputs())
    assert {c.failed_metric for c in checks} == {"dtype"}
    assert "create it for float64" in checks[0].detail


def test_report_to_json_is_strict_json() -> None:
    report = validate_operator(Affine(scale=1.01), LoopAffine(), affine_inputs())
    data = json.loads(json.dumps(report.to_json(), allow_nan=False))
    assert data["passed"] is False
    assert data["op_type"] == "Affine"
    assert data["failures"] == report.failures()
    assert data["outputs"][0]["metrics"]["max_abs"] < 1e-12


def test_candidate_that_raises_is_reported_not_propagated() -> None:
    class Broken(Affine):
        def forward(self, inputs):
            raise RuntimeError("kernel\nlaunch failed")

    report = validate_operator(Broken(), LoopAffine(), affine_inputs())
    assert report.failures() == [
        "the candidate's forward raised RuntimeError: kernel launch failed"
    ]


def test_without_a_reference_only_the_gradient_check_runs() -> None:
    report = validate_operator(Affine(), None, affine_inputs())
    assert report.outputs == [] and {g.method for g in report.gradients} == {"full"}
    assert report.passed
    assert not validate_operator(Affine(scale=1.01), None, affine_inputs()).passed


def test_forward_only_candidate_fails_on_its_missing_gradient() -> None:
    x = [np.ones(3)]
    report = validate_operator(ForwardOnly(), ForwardOnly(), x)
    assert not report.passed
    assert report.gradients[0].failed_metric == "missing"


# -- gradcheck -------------------------------------------------------------------------


def test_gradcheck_passes_a_correct_backward() -> None:
    checks = gradcheck(Affine(), affine_inputs(), names=["x", "w", "b"])
    assert [c.passed for c in checks] == [True, True, True]
    assert [c.method for c in checks] == ["full"] * 3


def test_gradcheck_fails_a_scaled_backward_and_names_the_input() -> None:
    checks = gradcheck(Affine(scale=1.01), affine_inputs(), names=["x", "w", "b"])
    assert [c.passed for c in checks] == [True, False, True]
    failed = checks[1]
    assert failed.label == "gradient of input 1 (w)"
    assert failed.failed_metric == "tol_ratio"
    assert failed.metrics["max_rel"] == pytest.approx(0.01, rel=1e-3)


def test_large_inputs_are_checked_along_random_directions() -> None:
    inputs = affine_inputs(n=40, k=30, m=12)
    good = gradcheck(Affine(), inputs, full_jacobian_max=100, directions=3)
    assert [c.method for c in good] == ["directional", "directional", "full"]
    assert all(c.passed for c in good), [c.detail for c in good]
    bad = gradcheck(Affine(scale=1.01), inputs, full_jacobian_max=100, directions=3)
    assert [c.passed for c in bad] == [True, False, True]
    assert "along v" in bad[1].detail


def test_directions_depend_on_the_seed_only() -> None:
    inputs = affine_inputs(n=40, k=30, m=12)
    runs = [gradcheck(Affine(), inputs, full_jacobian_max=10, seed=s)[0].metrics for s in (1, 1, 2)]
    assert runs[0] == runs[1] != runs[2]


def test_integer_inputs_and_missing_gradients_are_skipped() -> None:
    data = np.random.default_rng(0).standard_normal((5, 3))
    checks = gradcheck(TakeRows(), [data, np.array([4, 0, 4])])
    assert checks[0].passed and not checks[0].skipped
    assert checks[1].skipped == "int64 input: not differentiable"


def test_wrong_gradient_shape_fails_on_shape() -> None:
    class BadShape(Affine):
        def backward(self, grad_outputs, inputs, outputs):
            grads = super().backward(grad_outputs, inputs, outputs)
            return [grads[0], grads[1], grads[2][None]]

    checks = gradcheck(BadShape(), affine_inputs())
    assert checks[2].failed_metric == "shape"


def test_wrt_restricts_the_inputs_checked() -> None:
    checks = gradcheck(Affine(scale=1.01), affine_inputs(), wrt=[0, 2])
    assert [c.index for c in checks] == [0, 2]
    assert all(c.passed for c in checks)
