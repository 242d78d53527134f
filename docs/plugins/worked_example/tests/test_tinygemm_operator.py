"""The tinygemm operator, validated against d5's numpy reference with d5's own API.

Run next to ``d5-plugin-numpy`` (the reference backend), as the ``example`` nox session
installs them.
"""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from d5_tinygemm.gemm import TinyGemmBackend

from d5core.api import TensorDescriptor, UsageError, get_plugin_manager, validate_operator

#: Attributes and input shapes (A, B, and C when given): every attribute, and each way
#: C broadcasts.
CASES = [
    ({}, [(4, 5), (5, 3)]),
    ({"alpha": 0.5, "beta": 2.0}, [(4, 5), (5, 3), (3,)]),
    ({"transA": 1}, [(5, 4), (5, 3), (4, 1)]),
    ({"transB": 1, "beta": -1.0}, [(4, 5), (3, 5), (4, 3)]),
    ({"transA": 1, "transB": 1, "alpha": 3.0}, [(5, 4), (3, 5), (1, 3)]),
    ({}, [(2, 2), (2, 6), ()]),
]


def _inputs(shapes, dtype):
    rng = np.random.default_rng(7)
    return [rng.standard_normal(shape).astype(dtype) for shape in shapes]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("attributes", "shapes"), CASES)
def test_gemm_matches_the_numpy_reference(attributes, shapes, dtype):
    inputs = _inputs(shapes, dtype)
    described = [TensorDescriptor.of(x) for x in inputs]
    reference_backend = get_plugin_manager().load("d5.operators", "numpy")()
    report = validate_operator(
        TinyGemmBackend().create("Gemm", attributes, described),
        reference_backend.create("Gemm", attributes, described),
        inputs,
    )
    assert report.passed, report.failures()
    assert len(report.outputs) == 1 and len(report.gradients) >= 2 * len(inputs)


def test_validation_catches_an_ignored_attribute(monkeypatch):
    inputs = _inputs([(4, 5), (5, 3)], "float64")
    described = [TensorDescriptor.of(x) for x in inputs]
    candidate = TinyGemmBackend().create("Gemm", {"alpha": 2.0}, described)
    candidate.alpha = 1.0  # the mistake: the attribute is read but not applied
    reference = (
        get_plugin_manager()
        .load("d5.operators", "numpy")()
        .create("Gemm", {"alpha": 2.0}, described)
    )
    failures = validate_operator(candidate, reference, inputs, gradcheck=False).failures()
    assert any(line.startswith("output 0") for line in failures), failures


def test_d5_validate_op_passes_on_the_installed_backend(tmp_path: Path):
    """What a user runs: the backend found through its entry point, d5's default Gemm
    problem, the reference backend."""
    d5 = Path(sys.executable).with_name("d5")
    result = subprocess.run(
        [
            str(d5),
            "validate",
            "op",
            "Gemm",
            "--backend",
            "tinygemm",
            "--db",
            str(tmp_path / "r.db"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "against numpy" in result.stdout


REFUSED = [
    ("MatMul", {}, [(2, 2), (2, 2)], "the tinygemm backend has only Gemm, not 'MatMul'"),
    ("Gemm", {"gamma": 1}, [(2, 2), (2, 2)],
     "Gemm has no attribute 'gamma'; it takes: alpha, beta, transA, transB"),
    ("Gemm", {}, [(2, 2)], "Gemm takes inputs A, B and optionally C, not 1 inputs"),
    ("Gemm", {}, [(2, 3), (2, 3)],
     r"Gemm cannot multiply A of shape \(2, 3\) by B of shape \(2, 3\) "
     r"\(transA=0, transB=0\): 3 != 2"),
    ("Gemm", {}, [(2, 3), (3, 4), (3, 4)],
     r"Gemm's C has shape \(3, 4\), which does not broadcast to \(2, 4\)"),
    ("Gemm", {}, [(2, 3, 1), (3, 4)],
     r"Gemm multiplies matrices; A and B have shapes \(2, 3, 1\) and \(3, 4\)"),
]  # fmt: skip


@pytest.mark.parametrize(("op_type", "attributes", "inputs", "message"), REFUSED)
def test_the_backend_refuses_what_it_cannot_build(op_type, attributes, inputs, message):
    described = [TensorDescriptor(shape) for shape in inputs]
    with pytest.raises(UsageError, match=f"^{message}$"):
        TinyGemmBackend().create(op_type, attributes, described)


def test_the_backend_refuses_mixed_or_integer_dtypes():
    mixed = [TensorDescriptor((2, 2), "float32"), TensorDescriptor((2, 2), "float64")]
    with pytest.raises(UsageError, match="one dtype, not float32, float64"):
        TinyGemmBackend().create("Gemm", {}, mixed)
    with pytest.raises(UsageError, match="not int64, int64"):
        TinyGemmBackend().create("Gemm", {}, [TensorDescriptor((2, 2), "int64")] * 2)
