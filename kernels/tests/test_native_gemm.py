"""The packed GEMM on every micro-kernel this CPU runs (generic, AVX2, AVX-512): odd
sizes that leave edge tiles in every loop, transposes (strided views), alpha and beta,
broadcast C, one and two threads, and the run-time controls."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from d5_kernels import _native, runtime

from d5core.api import UsageError

DTYPES = pytest.mark.parametrize("dtype", ["float32", "float64"])
TOLERANCE = {"float32": 2e-5, "float64": 1e-12}


def reference(a: np.ndarray, b: np.ndarray, alpha: float, beta: float, c: np.ndarray | None):
    y = alpha * (a.astype(np.float64) @ b.astype(np.float64))
    return y if c is None else y + beta * c.astype(np.float64)


def run_gemm(a, b, alpha=1.0, beta=0.0, c=None):
    y = np.full((a.shape[0], b.shape[1]), np.nan, dtype=a.dtype)
    _native.gemm(a, b, y, alpha, beta, None if c is None else np.broadcast_to(c, y.shape))
    return y


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / max(1.0, np.abs(want).max())) if got.size else 0.0


@DTYPES
@pytest.mark.parametrize("mnk", [(1, 1, 1), (7, 33, 257), (33, 7, 5), (257, 65, 300), (15, 47, 1)])
@pytest.mark.parametrize("trans", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_matches_float64_matmul_on_odd_sizes(isa, dtype, mnk, trans) -> None:
    m, n, k = mnk
    rng = np.random.default_rng(m * 1000 + n * 10 + k)
    a = rng.standard_normal((k, m) if trans[0] else (m, k)).astype(dtype)
    b = rng.standard_normal((n, k) if trans[1] else (k, n)).astype(dtype)
    a, b = (a.T if trans[0] else a), (b.T if trans[1] else b)
    c = rng.standard_normal((m, n)).astype(dtype)
    with runtime.using_isa(isa):
        got = run_gemm(a, b, 0.5, -2.0, c)
    assert relative_error(got, reference(a, b, 0.5, -2.0, c)) < TOLERANCE[dtype]


def test_gemm_crosses_every_cache_block(isa) -> None:
    """Larger than one kc slice, one mc block and (for the generic kernel) one nc block,
    so the accumulation over K slices (beta = 1 after the first) is exercised."""
    blocking = runtime.blocking(isa, "float64")
    m, k = blocking.mc + 3, blocking.kc * 2 + 5
    n = min(blocking.nc + 9, 2100)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((m, k)), rng.standard_normal((k, n))
    with runtime.using_isa(isa):
        got = run_gemm(a, b, 1.5, 0.0)
    assert relative_error(got, reference(a, b, 1.5, 0.0, None)) < 1e-12


@pytest.mark.parametrize("c_shape", [(), (1, 20), (20,), (12, 1)])
def test_gemm_broadcasts_c_and_beta_zero_scales_it_as_numpy_does(isa, c_shape) -> None:
    """beta = 0 adds 0 * C: nothing where C is finite (Y's old contents, NaN here, are
    never read), NaN where C is NaN, as the reference's ``alpha * A B + beta * C`` gives."""
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((12, 9)), rng.standard_normal((9, 20))
    c = rng.standard_normal(c_shape)
    with runtime.using_isa(isa):
        assert relative_error(run_gemm(a, b, 1.0, 0.25, c), reference(a, b, 1.0, 0.25, c)) < 1e-12
        beta_zero = run_gemm(a, b, 1.0, 0.0, c)
        poisoned = run_gemm(a, b, 1.0, 0.0, np.full(c_shape, np.nan))
    assert not np.isnan(beta_zero).any()
    assert relative_error(beta_zero, a @ b) < 1e-12
    assert np.isnan(poisoned).all()


@DTYPES
def test_one_and_two_threads_give_the_same_result(dtype) -> None:
    rng = np.random.default_rng(3)
    results = {}
    before = runtime.num_threads()
    try:
        for shape in [(300, 200, 150), (40, 700, 90), (700, 40, 90)]:
            m, n, k = shape
            a = rng.standard_normal((m, k)).astype(dtype)
            b = rng.standard_normal((k, n)).astype(dtype)
            for threads in (1, 2):
                runtime.set_num_threads(threads)
                results[threads] = run_gemm(a, b)
            # Each output element is summed in the same order whatever the split.
            np.testing.assert_array_equal(results[1], results[2])
    finally:
        runtime.set_num_threads(before)


def test_batched_gemm_broadcasts_by_zero_strides() -> None:
    rng = np.random.default_rng(4)
    a = rng.standard_normal((1, 5, 7))
    b = rng.standard_normal((3, 7, 4))
    y = np.empty((3, 5, 4))
    _native.gemm_batched(np.broadcast_to(a, (3, 5, 7)), b, y, 2.0)
    np.testing.assert_allclose(y, 2.0 * np.matmul(a, b), rtol=1e-12)


def _import_isa(**env: str) -> subprocess.CompletedProcess[str]:
    """Import d5_kernels in a fresh interpreter with ``env`` (the ISA variables otherwise
    unset) and print the ISA it chose."""
    code = "import d5_kernels; print(d5_kernels.isa())"
    base = {k: v for k, v in os.environ.items() if k not in runtime.ISA_VARIABLES}
    return subprocess.run(
        [sys.executable, "-c", code], env={**base, **env}, capture_output=True, text=True
    )


def test_d5_native_isa_forces_the_micro_kernels_and_the_older_name_still_works() -> None:
    assert _import_isa(D5_NATIVE_ISA="generic").stdout.strip() == "generic"
    assert _import_isa(D5_KERNELS_ISA="generic").stdout.strip() == "generic"
    agreeing = _import_isa(D5_NATIVE_ISA="generic", D5_KERNELS_ISA="generic")
    assert agreeing.stdout.strip() == "generic", agreeing.stderr


def test_the_best_isa_is_chosen_by_default() -> None:
    done = _import_isa()
    assert done.stdout.strip() == runtime.available_isas()[-1], done.stderr


def _cpu_flags() -> set[str]:
    with open("/proc/cpuinfo", encoding="utf-8") as info:
        for line in info:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


@pytest.mark.skipif(not os.path.exists("/proc/cpuinfo"), reason="needs Linux's /proc/cpuinfo")
def test_the_widest_isa_the_cpu_flags_allow_is_available_and_chosen() -> None:
    """AVX-512 wherever the CPU has avx512f/vl/bw/dq, AVX2 where it has avx2 and fma, and
    never an ISA the flags do not allow."""
    flags = _cpu_flags()
    expected = ["generic"]
    if {"avx2", "fma"} <= flags:
        expected.append("avx2")
        if {"avx512f", "avx512vl", "avx512bw", "avx512dq"} <= flags:
            expected.append("avx512")
    assert runtime.available_isas() == expected
    assert _import_isa().stdout.strip() == expected[-1]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"D5_NATIVE_ISA": "sse9"}, "D5_NATIVE_ISA=sse9: unknown ISA 'sse9'"),
        ({"D5_KERNELS_ISA": "sse9"}, "D5_KERNELS_ISA=sse9: unknown ISA 'sse9'"),
        (
            {"D5_NATIVE_ISA": "generic", "D5_KERNELS_ISA": "avx2"},
            "D5_NATIVE_ISA=generic and D5_KERNELS_ISA=avx2 disagree",
        ),
    ],
)
def test_a_bad_isa_in_the_environment_fails_the_import_in_one_line(
    env: dict[str, str], message: str
) -> None:
    done = _import_isa(**env)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith(f"d5core.errors.UsageError: d5-kernels: {message}"), done.stderr


def test_each_isa_is_accepted_where_the_cpu_runs_it_and_refused_where_it_does_not() -> None:
    for name in runtime.ISA_REQUIREMENTS:
        done = _import_isa(D5_NATIVE_ISA=name)
        if name in runtime.available_isas():
            assert done.stdout.strip() == name, done.stderr
        else:
            assert done.returncode != 0
            assert "is not supported by this CPU; unset it or choose one of generic" in done.stderr


def test_an_isa_the_cpu_lacks_is_skipped_with_the_features_it_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The reason the ``isa`` fixture gives on an AVX2-only CPU, faked here by what
    ``available_isas`` reports (this machine may have every ISA)."""
    monkeypatch.setattr(runtime, "available_isas", lambda: ["generic", "avx2"])
    assert runtime.why_unavailable("avx2") is None
    assert runtime.why_unavailable("avx512") == (
        "this CPU lacks avx512f, avx512vl, avx512bw and avx512dq: the avx512 micro-kernels "
        "cannot run here (it runs generic, avx2)"
    )
    assert "has no ISA 'sse9'" in str(runtime.why_unavailable("sse9"))


def test_the_environment_hook_records_the_isa_and_what_forced_it() -> None:
    code = "import json, d5_kernels.plugin as p; print(json.dumps(p.d5_environment_info()))"
    base = {k: v for k, v in os.environ.items() if k not in runtime.ISA_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, "D5_NATIVE_ISA": "generic"},
        capture_output=True,
        text=True,
    )
    info = json.loads(done.stdout)
    assert info["isa"] == "generic"
    assert info["isa_forced_by"] == "D5_NATIVE_ISA=generic"
    assert info["available_isas"] == runtime.available_isas()


def test_an_unknown_isa_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown ISA 'sse9'"):
        runtime.set_isa("sse9")
    with pytest.raises(UsageError, match="thread count must be positive"):
        runtime.set_num_threads(0)


def test_mismatched_operands_are_refused_by_the_module() -> None:
    y = np.empty((3, 4))
    with pytest.raises(ValueError, match="does not give Y"):
        _native.gemm(np.ones((3, 5)), np.ones((6, 4)), y, 1.0, 0.0)
    with pytest.raises(ValueError, match="dtype"):
        _native.gemm(np.ones((3, 5), np.float32), np.ones((5, 4)), y, 1.0, 0.0)


def test_the_fma_roof_is_positive_and_the_blocking_fits_the_tile() -> None:
    for isa in runtime.available_isas():
        assert runtime.peak_gflops(isa, "float32", 0.01) > 0
        for dtype in ("float32", "float64"):
            b = runtime.blocking(isa, dtype)
            assert b.mc % b.mr == 0 and b.nc % b.nr == 0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_conv_forward_and_backward_agree_across_isas(isa, dtype) -> None:
    """The operators built on the GEMM give the same answer whichever micro-kernel runs
    (within the dtype's rounding)."""
    from d5_kernels.operators import NativeBackend

    from d5core.api import TensorDescriptor

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 9, 11)).astype(dtype)
    w = rng.standard_normal((4, 3, 3, 2)).astype(dtype)
    attributes = {"group": 2, "pads": [1, 0, 1, 1], "strides": [2, 1], "dilations": [1, 2]}
    op = NativeBackend().create(
        "Conv", attributes, [TensorDescriptor.of(x), TensorDescriptor.of(w)]
    )
    with runtime.using_isa("generic"):
        y0 = op.forward([x, w])[0]
        g0 = op.backward([np.ones_like(y0)], [x, w])
    with runtime.using_isa(isa):
        y1 = op.forward([x, w])[0]
        g1 = op.backward([np.ones_like(y1)], [x, w])
    tol = TOLERANCE[dtype] * 10
    assert relative_error(y1, y0) < tol
    for a, b in zip(g1, g0, strict=True):
        assert a is not None and b is not None
        assert relative_error(a, b) < tol
