"""Numerical error against a reference, and determinism across reruns with one seed."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from d5core.bus import MetricBus
from d5core.lv2.metrics import LossCurve
from d5core.metrics import Determinism, NumericalError


def test_numerical_error_computes_the_four_norms_of_one_output():
    metric = NumericalError()
    metric.add(np.array([1.0, 2.0, 4.0]), np.array([1.0, 2.5, 3.0]), name="y")
    out = metric.result()
    assert out["l1"] == pytest.approx(1.5)
    assert out["l2"] == pytest.approx(math.sqrt(0.25 + 1.0))
    assert out["max_abs"] == pytest.approx(1.0)
    assert out["max_rel"] == pytest.approx(1.0 / 3.0)
    assert out["value"] == out["max_rel"]
    assert out["unit"] == "1"
    assert list(out["per_output"]) == ["y"]


def test_numerical_error_combines_outputs_and_records_a_shape_mismatch():
    metric = NumericalError()
    metric.add([0.0, 0.0], [3.0, 0.0], name="a")
    metric.add([4.0], [0.0], name="b")
    metric.add(np.zeros((2, 2)), np.zeros(3), name="bad")
    out = metric.result()
    assert out["l1"] == pytest.approx(7.0)
    assert out["l2"] == pytest.approx(5.0)
    assert out["max_abs"] == pytest.approx(4.0)
    assert out["failed"] == {"bad": "ValueError: shapes differ: actual (2, 2), expected (3,)"}
    json.dumps(out, allow_nan=False)


def test_numerical_error_counts_disagreeing_nonfinite_values():
    metric = NumericalError()
    metric.add([np.nan, 1.0, np.inf], [np.nan, 1.0, 2.0])
    assert metric.result()["nonfinite"] == 1


def test_numerical_error_listens_to_an_event_with_arrays():
    bus = MetricBus()
    metric = NumericalError(event="validate.output")
    metric.attach(bus)
    bus.publish("validate.output", label="z", actual=np.ones(3), expected=np.full(3, 2.0))
    out = metric.result()
    assert out["max_abs"] == pytest.approx(1.0)
    assert list(out["per_output"]) == ["z"]


def test_numerical_error_with_nothing_compared_is_unavailable():
    metric = NumericalError()
    assert metric.result()["unavailable"] == "no arrays were compared (call add(actual, expected))"


def test_determinism_of_identical_curves_is_bitwise_identical():
    metric = Determinism()
    for _ in range(3):
        metric.add(np.array([2.0, 1.5, 1.25], dtype=np.float32))
    out = metric.result()
    assert (out["value"], out["bitwise_identical"], out["runs"]) == (0.0, True, 3)


def test_determinism_of_differing_curves_reports_the_largest_spread():
    metric = Determinism()
    metric.add([2.0, 1.5, 1.25])
    metric.add([2.0, 1.5, 1.0])
    metric.add([2.0, 1.75, 1.25])
    out = metric.result()
    assert out["value"] == pytest.approx(0.25)
    assert out["bitwise_identical"] is False


def test_determinism_sees_a_last_bit_difference_and_a_dtype_difference():
    a = np.array([0.1, 0.2])
    b = a.copy()
    b[1] = np.nextafter(b[1], 1.0)
    tiny = Determinism()
    tiny.add(a)
    tiny.add(b)
    assert tiny.result()["bitwise_identical"] is False
    assert 0 < tiny.result()["value"] < 1e-15
    dtypes = Determinism()
    dtypes.add(np.array([1.0, 2.0], dtype=np.float32))
    dtypes.add(np.array([1.0, 2.0], dtype=np.float64))
    assert (dtypes.result()["value"], dtypes.result()["bitwise_identical"]) == (0.0, False)


def test_determinism_treats_nan_as_equal_to_nan_but_not_to_a_number():
    same = Determinism()
    same.add([1.0, np.nan])
    same.add([1.0, np.nan])
    assert (same.result()["value"], same.result()["bitwise_identical"]) == (0.0, True)
    diverged = Determinism()
    diverged.add([1.0, np.nan])
    diverged.add([1.0, 0.5])
    assert diverged.result()["value"] == "inf"
    json.dumps(diverged.result(), allow_nan=False)


def test_determinism_compares_named_outputs_and_loss_curve_results():
    metric = Determinism()
    metric.add({"logits": np.arange(4.0), "probs": np.ones(4)})
    metric.add({"logits": np.arange(4.0) + 0.5, "probs": np.ones(4)})
    out = metric.result()
    assert out["per_output"]["logits"]["max_abs_diff"] == pytest.approx(0.5)
    assert out["per_output"]["probs"]["bitwise_identical"] is True

    curves = Determinism()
    for losses in ([1.0, 0.5], [1.0, 0.5, 0.25]):
        bus = MetricBus()
        curve = LossCurve()
        curve.attach(bus)
        for loss in losses:
            bus.publish("train.step.end", loss=loss)
        curves.add(curve.result())
    result = curves.result()
    assert result["value"] == 0.0
    assert result["per_output"]["loss"]["length_mismatch"] == [2, 3]
    assert result["bitwise_identical"] is False


def test_determinism_needs_two_runs():
    metric = Determinism()
    metric.add([1.0])
    assert (
        metric.result()["unavailable"] == "needs at least 2 runs to compare, got 1 (call add(run))"
    )
