"""Issue 11: operator problems count their FLOPs, refuse what cannot run, and the peak is
measured (items 6 and 18). Core lane: no plugin is needed."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from d5core.cli._parse import parse_list
from d5core.errors import UsageError
from d5core.lv0.runner import problem_for
from d5core.lv0.workloads import memory, roofline
from d5core.lv0.workloads.problems import DEFAULT_PROBLEMS, parse_shapes, suite
from d5core.lv0.workloads.roofline import Peak

# -- item 6: GFLOP/s for problems given by shape, Gemm's C optional ------------------


def test_a_gemm_given_by_shape_counts_its_flops_without_c():
    problem = problem_for("Gemm", shapes=[(64, 32), (32, 16)])
    assert [spec.name for spec in problem.inputs] == ["A", "B"]
    assert problem.flops == 2 * 64 * 16 * 32


def test_a_gemm_given_by_shape_may_still_pass_c():
    problem = problem_for("Gemm", shapes=[(64, 32), (32, 16), (16,)])
    assert [spec.shape for spec in problem.inputs] == [(64, 32), (32, 16), (16,)]
    assert problem.flops == 2 * 64 * 16 * 32


def test_conv_and_matmul_given_by_shape_count_their_flops():
    conv = problem_for("Conv", shapes=[(2, 3, 7, 7), (4, 3, 3, 3)])
    # pads 1, strides [2, 1] from the default problem: output 4x7
    assert conv.flops == 2 * 2 * 4 * 3 * 3 * 3 * 4 * 7
    matmul = problem_for("MatMul", shapes=[(5, 8, 4), (4, 6)])
    assert matmul.flops == 2 * 5 * 8 * 6 * 4


def test_too_few_shapes_for_an_operator_with_an_optional_input_name_both_forms():
    with pytest.raises(UsageError, match=r"takes 2 to 3 tensor shapes \(C optional\)"):
        DEFAULT_PROBLEMS["Gemm"].with_shapes([(4, 4)])


# -- item 6: the peak ----------------------------------------------------------------


@pytest.mark.parametrize("value", ["abc", "-5", "0", "nan", "inf"])
def test_a_peak_override_that_is_not_a_positive_number_is_a_usage_error(monkeypatch, value):
    monkeypatch.setenv("D5_PEAK_GFLOPS", value)
    with pytest.raises(UsageError, match=f"D5_PEAK_GFLOPS must be a positive number.*{value!r}"):
        roofline.cpu_peak()


@pytest.fixture
def fresh_peak(monkeypatch, tmp_path):
    """No override, a private cache directory and no peak remembered by this process."""
    monkeypatch.delenv("D5_PEAK_GFLOPS", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    roofline._machine_peak.cache_clear()
    yield tmp_path / "cache" / "d5" / "peak.json"
    roofline._machine_peak.cache_clear()


def test_the_peak_is_measured_once_per_machine_and_cached(monkeypatch, fresh_peak):
    calls: list[int] = []

    def fake_measure(threads=None):
        calls.append(1)
        return Peak({"float32": 500.0, "float64": 250.0}, "measured: fake loop")

    monkeypatch.setattr(roofline, "measure_peak", fake_measure)
    monkeypatch.setattr(roofline.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    first = roofline.cpu_peak()
    roofline._machine_peak.cache_clear()  # a new process
    second = roofline.cpu_peak()
    assert len(calls) == 1
    assert first.gflops["float32"] == second.gflops["float32"] == 500.0
    assert "cached in" in second.source and fresh_peak.is_file()


def test_a_peak_measured_under_load_is_not_cached_nor_below_the_estimate(monkeypatch, fresh_peak):
    monkeypatch.setattr(
        roofline, "measure_peak", lambda threads=None: Peak({"float32": 1.0}, "measured: fake")
    )
    monkeypatch.setattr(roofline.os, "getloadavg", lambda: (99.0, 99.0, 99.0))
    peak = roofline.cpu_peak()
    assert peak.gflops["float32"] == roofline.estimate_peak().gflops["float32"]
    assert "under load" in peak.source
    assert not fresh_peak.exists()


def _best_matmul_gflops(n: int = 768, tries: int = 5) -> float:
    a = np.ones((n, n), np.float32)
    best = float("inf")
    for _ in range(tries):
        t0 = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best / 1e9


@pytest.mark.skipif(
    not any(shutil.which(c) for c in ("cc", "gcc", "clang")), reason="needs a C compiler"
)
def test_the_peak_is_not_below_what_the_cores_reach_when_cpuinfo_shows_a_low_clock(
    monkeypatch, fresh_peak
):
    # A virtual machine shows its base clock, not the boost its cores run at; here an
    # absurdly low one, so that a peak computed from it is far below a plain matmul.
    info = {"model name": "Virtual CPU @ 0.10GHz", "flags": "avx avx2 fma avx512f"}
    monkeypatch.setattr(roofline, "read_cpuinfo", lambda: info)
    peak = roofline.cpu_peak().gflops["float32"]
    assert peak >= 0.75 * _best_matmul_gflops()


# -- item 18: bad input is refused before anything is allocated ----------------------


def test_an_unknown_dtype_is_a_usage_error():
    with pytest.raises(UsageError, match="unknown dtype 'float128x'; choose one of"):
        DEFAULT_PROBLEMS["Relu"].make_inputs("float128x")


def test_a_problem_larger_than_memory_is_refused_with_the_figure(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 8 * 2**30)
    problem = problem_for("Gemm", shapes=parse_shapes("1000000x1000000,1000000x1000000"))
    with pytest.raises(UsageError) as caught:
        problem.make_inputs("float32")
    message = str(caught.value)
    # two 10^12-element float32 inputs, the output, and the float64 draw of one input
    assert f"{(4e12 + 4e12 + 4e12 + 8e12) / 2**30:.1f} GiB" in message
    assert "8.0 GiB of memory available" in message and "--shape" in message


def test_an_empty_shape_is_refused():
    with pytest.raises(UsageError, match="--shape is empty"):
        parse_shapes("  ")


def test_a_name_listed_twice_is_refused():
    with pytest.raises(UsageError, match="backends lists 'numpy' twice"):
        parse_list("numpy, torch,numpy", "backends")


def test_the_suite_hint_never_points_at_the_suite_itself():
    with pytest.raises(UsageError) as caught:
        suite("cpu-small", "Relu")
    assert "try --suite cpu-small" not in str(caught.value)
    assert "leave out --suite" in str(caught.value)
    with pytest.raises(UsageError, match=r"suites that have: .*cpu-small-conv"):
        suite("cpu-small-gemm", "Conv")


def test_bench_help_no_longer_says_networks_come_later(d5_cli):
    result = d5_cli("bench", "--help")
    assert result.exit_code == 0
    assert "later" not in result.stdout
    assert "networks" in result.stdout


def test_validate_help_no_longer_says_networks_come_later(d5_cli):
    result = d5_cli("validate", "--help")
    assert result.exit_code == 0
    assert "later" not in result.stdout
    assert "networks" in result.stdout
