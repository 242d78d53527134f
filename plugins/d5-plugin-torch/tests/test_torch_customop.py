"""The torch glue of C++ custom operators: a TORCH_LIBRARY op with autograd."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from d5core.testing.customop import build, validate_custom

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "custom_ops" / "bias_gelu.cpp"
RIGHT = "gb[c] += static_cast<T>(g);"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ops")


@pytest.fixture(scope="module")
def built(cache):
    return build(EXAMPLE, ["numpy", "torch"], cache=cache)


def test_the_torch_op_agrees_with_the_numpy_build(built):
    rng = np.random.default_rng(2)
    x, b = rng.standard_normal((5, 7)), rng.standard_normal(7)
    for dtype in (np.float32, np.float64):
        inputs = [x.astype(dtype), b.astype(dtype)]
        expected = built.builds["numpy"].create({"scale": 0.3}).forward(inputs)[0]
        got = built.builds["torch"].create({"scale": 0.3}).forward(inputs)[0]
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, expected)


def test_the_torch_op_is_differentiable_with_torch_autograd(built):
    kernels = built.builds["torch"].kernels()
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, b: kernels.op(x, b, 0.7), (x, b))


def test_bias_gelu_passes_validation_in_torch(cache, built):
    outcome = validate_custom(EXAMPLE, ["torch"], cache=cache)
    [result] = outcome.results
    assert result.passed, result.report.failures()
    assert result.against == "numpy build"
    assert [o.passed for o in result.report.outputs] == [True]


def test_a_wrong_backward_fails_in_torch_naming_the_input(cache, tmp_path):
    source = tmp_path / "bias_gelu_wrong.cpp"
    source.write_text(EXAMPLE.read_text().replace(RIGHT, "gb[c] += static_cast<T>(2 * g);"))
    outcome = validate_custom(source, ["numpy", "torch"], cache=cache)
    lines = outcome.failures()
    assert [line.split(":")[0] for line in lines] == ["numpy", "torch"]
    assert lines[1].startswith("torch: gradient of input 1 (B) [full]: tol_ratio:")
    assert all(o.passed for o in outcome.results[1].report.outputs)  # the forward is right
