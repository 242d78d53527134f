"""The MXNet glue of C++ custom operators: an external operator library (``lib_api.h``)
loaded with ``mx.library.load``, differentiated by ``mx.autograd``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from d5core.api import UsageError
from d5core.testing.customop import build, validate_custom
from d5core.testing.operators import synchronizer_of

pytest.importorskip("mxnet")

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "custom_ops" / "bias_gelu.cpp"
RIGHT = "gb[c] += static_cast<T>(g);"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ops")


@pytest.fixture(scope="module")
def built(cache):
    return build(EXAMPLE, ["numpy", "mxnet"], cache=cache)


def _mx():
    from d5_plugin_mxnet._mx import mxnet

    return mxnet()


def _broken(tmp_path: Path) -> Path:
    source = tmp_path / "broken_op.cpp"
    source.write_text(EXAMPLE.read_text().replace("const double z =", "const double z = ;", 1))
    return source


def test_the_mxnet_op_agrees_with_the_numpy_build(built):
    rng = np.random.default_rng(4)
    x, b = rng.standard_normal((5, 7)), rng.standard_normal(7)
    for dtype in (np.float32, np.float64):
        inputs = [x.astype(dtype), b.astype(dtype)]
        # 0.1 has no exact float32: the attribute must reach the C++ as the same double
        numpy_op = built.builds["numpy"].create({"scale": 0.1})
        mxnet_op = built.builds["mxnet"].create({"scale": 0.1})
        got = mxnet_op.forward(inputs)[0]
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, numpy_op.forward(inputs)[0])
        grad_y = rng.standard_normal((5, 7)).astype(dtype)
        for mine, theirs in zip(mxnet_op.backward([grad_y], inputs, []),
                                numpy_op.backward([grad_y], inputs, []), strict=True):  # fmt: skip
            np.testing.assert_array_equal(mine, theirs)


def test_the_op_differentiates_with_autograd_in_a_hybridized_block(built):
    mx = _mx()
    kernels = built.builds["mxnet"].kernels()
    name = kernels.op.__name__

    class Net(mx.gluon.HybridBlock):
        def hybrid_forward(self, F, x, b):
            return getattr(F, name)(x, b, attr0="0.5")

    net = Net()
    net.hybridize()
    x = mx.nd.array(np.linspace(-2, 2, 12).reshape(3, 4), dtype="float64")
    b = mx.nd.array([0.1, -0.2, 0.3, 0.0], dtype="float64")
    x.attach_grad()
    b.attach_grad()
    with mx.autograd.record():
        y = net(x, b)
        loss = (y * y).sum()
    loss.backward()
    numpy_op = built.builds["numpy"].create({"scale": 0.5})
    expected_y = numpy_op.forward([x.asnumpy(), b.asnumpy()])[0]
    expected_gx, expected_gb = numpy_op.backward([2 * expected_y], [x.asnumpy(), b.asnumpy()], [])
    np.testing.assert_allclose(y.asnumpy(), expected_y, rtol=1e-15)
    np.testing.assert_allclose(x.grad.asnumpy(), expected_gx, rtol=1e-15)
    np.testing.assert_allclose(b.grad.asnumpy(), expected_gb, rtol=1e-14)


def test_the_operator_is_asynchronous_so_the_engine_waits_for_mxnet(built):
    op = built.builds["mxnet"].create({})
    assert op.asynchronous, "d5 would read its clock before MXNet's engine ran the op"
    assert synchronizer_of(op) is not None


def test_prepared_calls_queue_work_and_leave_the_waiting_to_the_engine(built):
    mx = _mx()
    inputs = [np.ones((4, 3)), np.zeros(3)]
    op = built.builds["mxnet"].create({"scale": 2.0})
    forward = [op.prepare_forward(inputs)()]  # one output: MXNet returns it bare
    assert all(isinstance(t, mx.nd.NDArray) for t in forward)
    backward = op.prepare_backward([np.ones((4, 3))], inputs)()
    assert all(isinstance(t, mx.nd.NDArray) for t in backward)
    mx.nd.waitall()
    np.testing.assert_allclose(forward[0].asnumpy(), op.forward(inputs)[0])
    np.testing.assert_allclose(backward[1].asnumpy(), op.backward([np.ones((4, 3))], inputs, [])[1])


def test_an_error_thrown_by_the_cpp_is_one_line_naming_it(built):
    op = built.builds["mxnet"].create({})
    bad = [np.ones((3, 4)), np.ones(5)]
    expected = "bias_gelu on mxnet: bias_gelu: B must be a vector as long as X's last axis"
    with pytest.raises(UsageError) as forward:
        op.forward(bad)
    with pytest.raises(UsageError) as backward:
        op.backward([np.ones((3, 4))], bad, [])
    assert str(forward.value) == str(backward.value) == expected
    np.testing.assert_array_equal(op.forward([np.zeros((2, 4)), np.zeros(4)])[0], 0)


def test_bias_gelu_passes_validation_in_mxnet(cache, built):
    for dtype in ("float32", "float64"):
        outcome = validate_custom(EXAMPLE, ["mxnet"], cache=cache, dtype=dtype)
        [result] = outcome.results
        assert result.passed, result.report.failures()
        assert result.against == "numpy build"
        assert [o.passed for o in result.report.outputs] == [True]


def test_a_wrong_backward_fails_in_mxnet_naming_the_input(cache, tmp_path):
    source = tmp_path / "bias_gelu_wrong.cpp"
    source.write_text(EXAMPLE.read_text().replace(RIGHT, "gb[c] += static_cast<T>(2 * g);"))
    outcome = validate_custom(source, ["numpy", "mxnet"], cache=cache)
    lines = outcome.failures()
    assert [line.split(":")[0] for line in lines] == ["numpy", "mxnet"]
    assert lines[1].startswith("mxnet: gradient of input 1 (B) [full]: tol_ratio:")
    assert all(o.passed for o in outcome.results[1].report.outputs)  # the forward is right


def test_a_syntax_error_exits_2_with_the_compilers_message(tmp_path, d5_cli):
    cache = tmp_path / "cache"
    source = _broken(tmp_path)
    result = d5_cli("op", "build", str(source), "--frameworks", "mxnet", "--cache", str(cache))
    err = result.stderr
    assert result.exit_code == 2
    assert f"{source}:" in err and ": error: expected primary-expression" in err
    assert "Traceback" not in err
    assert not any(p.is_file() for p in cache.rglob("*")), "a failed build left files"


def test_a_second_build_comes_from_the_cache(built, cache):
    started = time.perf_counter()
    again = build(EXAMPLE, ["mxnet"], cache=cache)
    seconds = time.perf_counter() - started
    assert again.builds["mxnet"].cached and not built.builds["mxnet"].cached
    assert again.builds["mxnet"].artifact == built.builds["mxnet"].artifact
    print(f"cached mxnet rebuild: {seconds:.3f} s")


def test_d5_bench_op_times_the_custom_op_in_numpy_and_mxnet(built, cache, tmp_path):
    env = {**os.environ, "D5_DB": str(tmp_path / "results.sqlite"), "D5_OP_CACHE": str(cache)}
    quick = ["--processes", "1", "--time-budget", "0.05", "--min-samples", "6", "--warmup", "1"]
    command = [sys.executable, "-m", "d5core", "bench", "op", "--custom", str(EXAMPLE),
               "--backends", "numpy,mxnet", "--direction", "both", *quick, "--json"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)["data"]
    found = {(r["backend"], r["direction"]): r["median"] for r in rows}
    assert sorted(found) == [("mxnet", "backward"), ("mxnet", "forward"),
                             ("numpy", "backward"), ("numpy", "forward")]  # fmt: skip
    assert all(0 < median < 1 for median in found.values())
