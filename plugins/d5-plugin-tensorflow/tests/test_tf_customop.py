"""The TensorFlow glue of C++ custom operators: an op library with its gradient."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from d5core.testing.customop import build, validate_custom

pytest.importorskip("tensorflow")

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "custom_ops" / "bias_gelu.cpp"
RIGHT = "gb[c] += static_cast<T>(g);"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ops")


@pytest.fixture(scope="module")
def built(cache):
    return build(EXAMPLE, ["numpy", "tensorflow"], cache=cache)


def test_the_tensorflow_op_agrees_with_the_numpy_build(built):
    rng = np.random.default_rng(3)
    x, b = rng.standard_normal((5, 7)), rng.standard_normal(7)
    for dtype in (np.float32, np.float64):
        inputs = [x.astype(dtype), b.astype(dtype)]
        # 0.1 is not exact in 32 bits: the attribute must reach the C++ as the same double
        expected = built.builds["numpy"].create({"scale": 0.1}).forward(inputs)[0]
        got = built.builds["tensorflow"].create({"scale": 0.1}).forward(inputs)[0]
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, expected)


def test_the_op_runs_and_differentiates_inside_tf_function(built):
    from d5_plugin_tensorflow._tf import tensorflow

    tf = tensorflow()
    kernels = built.builds["tensorflow"].kernels()
    x = tf.constant(np.linspace(-2, 2, 12).reshape(3, 4))
    b = tf.constant(np.array([0.1, -0.2, 0.3, 0.0]))

    @tf.function(autograph=False)
    def loss_and_grads(x, b):
        with tf.GradientTape() as tape:
            tape.watch([x, b])
            y = kernels.op(in0=x, in1=b, attr0="1.0")
            loss = tf.reduce_sum(y * y)
        return y, tape.gradient(loss, [x, b])

    y, (gx, gb) = loss_and_grads(x, b)
    numpy_op = built.builds["numpy"].create({})
    expected_y = numpy_op.forward([x.numpy(), b.numpy()])[0]
    expected_gx, expected_gb = numpy_op.backward([2 * expected_y], [x.numpy(), b.numpy()], [])
    np.testing.assert_allclose(y.numpy(), expected_y, rtol=1e-15)
    np.testing.assert_allclose(gx.numpy(), expected_gx, rtol=1e-15)
    np.testing.assert_allclose(gb.numpy(), expected_gb, rtol=1e-14)


def test_bias_gelu_passes_validation_in_tensorflow(cache, built):
    outcome = validate_custom(EXAMPLE, ["tensorflow"], cache=cache)
    [result] = outcome.results
    assert result.passed, result.report.failures()
    assert result.against == "numpy build"


def test_a_wrong_backward_fails_in_tensorflow_naming_the_input(cache, tmp_path):
    source = tmp_path / "bias_gelu_wrong.cpp"
    source.write_text(EXAMPLE.read_text().replace(RIGHT, "gb[c] += static_cast<T>(2 * g);"))
    outcome = validate_custom(source, ["tensorflow"], cache=cache)
    [line] = outcome.failures()
    assert line.startswith("tensorflow: gradient of input 1 (B) [full]: tol_ratio:")
