"""Every native operator, forward and backward, in float32 and float64, against d5's numpy
reference: the shared kit (:class:`d5core.testing.operator_agreement.OperatorAgreementTests`)
draws shapes, attributes and data away from kinks with hypothesis and
:func:`validate_operator` compares outputs and gradients with the reference's and checks
the backward by central differences in float64. The native kernels are 2-D only, and the
sizes drawn are larger, to reach their blocked code paths. Every test of the kit runs on
each micro-kernel ISA this CPU has (generic, avx2, avx512; the others are skipped with the
reason), the validation through ``d5 validate op``'s path included. ``D5_PROPERTY_EXAMPLES`` raises
the number of examples."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from d5_kernels import runtime
from d5_kernels.operators import NativeBackend

from d5core.api import TensorDescriptor
from d5core.testing.operator_agreement import (
    Extents,
    OperatorAgreementTests,
    assert_agrees_with_reference,
    distinct,
    property_examples,
    reference_backend,
)

NATIVE = NativeBackend()
DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])


class TestNativeAgreesWithTheReference(OperatorAgreementTests):
    """The whole kit once per ISA (the ``isa`` fixture): the micro-kernels chosen in this
    process, and ``D5_NATIVE_ISA`` for the workers ``d5 validate op`` starts."""

    backend = NATIVE

    @pytest.fixture(autouse=True)
    def _on_each_isa(self, isa: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        monkeypatch.delenv("D5_KERNELS_ISA", raising=False)
        monkeypatch.setenv("D5_NATIVE_ISA", isa)
        with runtime.using_isa(isa):
            yield

    operators = (
        "Gemm",
        "MatMul",
        "Conv",
        "Relu",
        "Softmax",
        "MaxPool",
        "AveragePool",
        "BatchNormalization",
        "Gather",
        "Erf",
        "Gelu",
        "LayerNormalization",
    )
    examples = property_examples(8)
    spatial_ranks = (2,)
    extents = Extents(
        gemm=9, matmul_inner=5, matmul_outer=4, activation=5, conv_batch=3, pool_channels=3
    )


def test_the_cli_validates_conv_in_float64() -> None:
    d5 = Path(sys.executable).with_name("d5")
    done = subprocess.run(
        [str(d5), "validate", "op", "Conv", "--backend", "native", "--dtype", "float64", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert '"passed": true' in done.stdout


@pytest.mark.parametrize(
    ("op_type", "attributes", "shapes"),
    [
        ("Conv", {"group": 2, "pads": [1, 0, 0, 2]}, [(2, 4, 5, 5), (6, 2, 3, 2), (6,)]),
        ("Conv", {"strides": [2, 3], "dilations": [2, 1]}, [(1, 3, 9, 10), (5, 3, 3, 3)]),
        ("Conv", {}, [(3, 8, 4, 4), (5, 8, 1, 1), (5,)]),
        (
            "AveragePool",
            {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
            [(2, 2, 5, 5)],
        ),
        ("MaxPool", {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1}, [(1, 2, 6, 5)]),
        ("MatMul", {}, [(2, 1, 3, 4), (3, 4, 5)]),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else "",
)
def test_fixed_cases_match_the_reference(
    op_type: str, attributes: dict[str, Any], shapes: list[Any]
) -> None:
    """Grouped and asymmetric-padded, strided and dilated, and pointwise (1x1, the path
    that skips im2col) convolutions; pools with count_include_pad and ceil_mode; a
    MatMul broadcasting both operands."""
    rng = np.random.default_rng(0)
    inputs = [distinct(rng, s) if op_type == "MaxPool" else rng.standard_normal(s) for s in shapes]
    assert_agrees_with_reference(NATIVE, op_type, attributes, inputs, "float64")


@DTYPES
def test_conv_split_into_column_blocks_matches_the_reference(dtype: str) -> None:
    """Enough taps (64 channels x 3 x 3) and outputs (40 x 25) that im2col runs in
    blocks of 512 output columns, which end mid-row (the output rows are 25 wide)."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 64, 40, 49)).astype(dtype)
    w = rng.standard_normal((6, 64, 3, 3)).astype(dtype)
    b = rng.standard_normal(6).astype(dtype)
    attributes = {"pads": [1, 1, 1, 1], "strides": [1, 2]}
    descriptors = [TensorDescriptor.of(a) for a in (x, w, b)]
    got = NATIVE.create("Conv", attributes, descriptors).forward([x, w, b])[0]
    want = reference_backend().create("Conv", attributes, descriptors).forward([x, w, b])[0]
    assert got.shape == want.shape == (2, 6, 40, 25)
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == "float32" else 1e-12, atol=1e-4)
