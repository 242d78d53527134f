"""Every JAX operator, forward and backward, in float32 and float64, against d5's numpy
reference, with the shared kit (:class:`d5core.testing.operator_agreement.OperatorAgreementTests`):
hypothesis draws shapes, attributes and data away from kinks for each operator, and
``d5 validate op``'s path runs each default problem. Each new shape compiles, so few
examples are drawn by default (``D5_PROPERTY_EXAMPLES`` raises them)."""

from __future__ import annotations

import numpy as np
import pytest
from d5_plugin_jax.operators import JaxBackend

from d5core.testing.operator_agreement import (
    CORE_OPERATORS,
    OperatorAgreementTests,
    assert_agrees_with_reference,
    property_examples,
)

JAX = JaxBackend()


class TestJaxAgreesWithTheReference(OperatorAgreementTests):
    backend = JAX
    examples = property_examples(1)
    # the default problems once (float32, with float64 for the gradient check); every
    # property above runs in both dtypes
    default_problem_dtypes = ("float32",)


def test_the_backend_offers_every_operator_of_the_reference() -> None:
    from d5core.testing.operator_agreement import reference_backend

    assert set(reference_backend().supported()) <= set(JAX.supported())
    assert set(JAX.supported()) >= CORE_OPERATORS


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_max_pool_with_ceil_mode_and_column_major_indices(dtype: str) -> None:
    x = np.random.default_rng(3).permutation(2 * 3 * 5 * 4).reshape(2, 3, 5, 4) / 7.0
    attributes = {"kernel_shape": [2, 3], "strides": [2, 2], "pads": [1, 0, 0, 1],
                  "ceil_mode": 1, "storage_order": 1}  # fmt: skip
    assert_agrees_with_reference(JAX, "MaxPool", attributes, [x], dtype)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_grouped_strided_conv_transpose_with_cropping_pads(dtype: str) -> None:
    rng = np.random.default_rng(5)
    x, w, b = rng.normal(size=(2, 4, 3, 3)), rng.normal(size=(4, 3, 2, 3)), rng.normal(size=6)
    attributes = {"group": 2, "strides": [2, 1], "pads": [1, 0, 0, 2], "dilations": [1, 2],
                  "output_padding": [1, 0]}  # fmt: skip
    assert_agrees_with_reference(JAX, "ConvTranspose", attributes, [x, w, b], dtype)
