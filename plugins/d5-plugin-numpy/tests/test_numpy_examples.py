"""The custom operator of docs/operators.md, validated as the docs show."""

from __future__ import annotations

import numpy as np
import pytest
from d5_plugin_numpy.examples import IntegerPower

from d5core.api import UsageError, gradcheck, validate_operator


class FastIntegerPower(IntegerPower):
    """A faster IntegerPower for large exponents, as a custom kernel would be."""

    def forward(self, inputs):
        (x,) = inputs
        result, base, n = np.ones_like(x), x, self.exponent
        while n:
            if n & 1:
                result = result * base
            base, n = base * base, n >> 1
        return [result]


@pytest.mark.parametrize("exponent", [0, 1, 2, 3, 7])
def test_integer_power_forward_and_gradient(exponent) -> None:
    x = np.random.default_rng(exponent).uniform(-1.5, 1.5, (3, 4))
    op = IntegerPower({"exponent": exponent})
    np.testing.assert_allclose(op.forward([x])[0], x**exponent)
    assert all(c.passed for c in gradcheck(op, [x]))


def test_a_custom_kernel_validates_against_the_clear_one() -> None:
    x = np.random.default_rng(0).uniform(-1.5, 1.5, (20, 20)).astype(np.float32)
    report = validate_operator(
        FastIntegerPower({"exponent": 5}), IntegerPower({"exponent": 5}), [x]
    )
    assert report.passed, report.failures()
    assert {g.method for g in report.gradients} == {"reference", "directional"}


def test_a_custom_kernel_with_a_bug_fails_validation() -> None:
    class OffByOne(FastIntegerPower):
        def forward(self, inputs):
            return [super().forward(inputs)[0] * inputs[0]]

    x = np.random.default_rng(0).uniform(-1.5, 1.5, (4, 4))
    report = validate_operator(OffByOne({"exponent": 3}), IntegerPower({"exponent": 3}), [x])
    failures = report.failures()
    assert failures[0].startswith("output 0: tol_ratio")
    assert any(line.startswith("gradient of input 0 [full]") for line in failures)


def test_exponent_must_be_an_integer() -> None:
    with pytest.raises(UsageError, match="must be an integer"):
        IntegerPower({"exponent": 2.5})
