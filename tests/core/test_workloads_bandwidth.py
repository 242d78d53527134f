"""The memory bandwidth (the roofline's memory roof) and the compulsory bytes of a problem."""

from __future__ import annotations

import math

import pytest

from d5core.errors import UsageError
from d5core.lv0.workloads import bandwidth, roofline
from d5core.lv0.workloads.bandwidth import Bandwidth, compulsory_bytes, output_bytes
from d5core.lv0.workloads.problems import DEFAULT_PROBLEMS, InputSpec, Problem, gemm_problem


def test_the_override_is_read_in_gb_per_second(monkeypatch):
    monkeypatch.setenv("D5_PEAK_BANDWIDTH", " 123.5 ")
    assert bandwidth.bandwidth_override() == Bandwidth(123.5, "D5_PEAK_BANDWIDTH")

    def refuse(*_args, **_kwargs):
        raise AssertionError("the override must not be measured")

    monkeypatch.setattr(bandwidth, "measure_bandwidth", refuse)
    assert bandwidth.memory_bandwidth().gbps == 123.5


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_override_is_no_override(monkeypatch, value):
    monkeypatch.setenv("D5_PEAK_BANDWIDTH", value)
    assert bandwidth.bandwidth_override() is None


@pytest.mark.parametrize("value", ["fast", "0", "-20", "nan", "inf", "1e400"])
def test_a_bad_override_is_a_one_line_usage_error(monkeypatch, value):
    monkeypatch.setenv("D5_PEAK_BANDWIDTH", value)
    with pytest.raises(UsageError) as caught:
        bandwidth.memory_bandwidth()
    message = str(caught.value)
    assert "\n" not in message
    assert "D5_PEAK_BANDWIDTH" in message and repr(value) in message
    assert caught.value.exit_code == 2


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    """No override, an empty cache directory, and no bandwidth remembered in-process."""
    monkeypatch.delenv("D5_PEAK_BANDWIDTH", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    bandwidth._machine_bandwidth.cache_clear()
    yield tmp_path / "cache" / "d5" / "bandwidth.json"
    bandwidth._machine_bandwidth.cache_clear()


def _fake_measure(calls, value=42.0):
    def measure(*_args, **_kwargs):
        calls.append(1)
        return Bandwidth(value, "measured: fake triad")

    return measure


def test_the_bandwidth_is_measured_once_per_machine_and_cached(monkeypatch, fresh_cache):
    calls: list[int] = []
    monkeypatch.setattr(bandwidth, "measure_bandwidth", _fake_measure(calls))
    monkeypatch.setattr(bandwidth.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    first = bandwidth.memory_bandwidth()
    bandwidth._machine_bandwidth.cache_clear()  # a new process
    second = bandwidth.memory_bandwidth()
    assert calls == [1]
    assert first.gbps == second.gbps == 42.0
    assert "cached in" in second.source and str(fresh_cache) in second.source
    assert fresh_cache == bandwidth.bandwidth_cache_path()
    assert list(roofline.read_cache(fresh_cache)) == [roofline.machine_key()]


def test_another_machine_key_measures_again(monkeypatch, fresh_cache):
    calls: list[int] = []
    monkeypatch.setattr(bandwidth, "measure_bandwidth", _fake_measure(calls))
    monkeypatch.setattr(bandwidth.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    bandwidth.memory_bandwidth()
    bandwidth._machine_bandwidth.cache_clear()
    info = {"model name": "Another CPU", "flags": "sse2"}
    monkeypatch.setattr(roofline, "read_cpuinfo", lambda: info)
    bandwidth.memory_bandwidth()
    assert calls == [1, 1]
    assert len(roofline.read_cache(fresh_cache)) == 2


def test_a_measurement_under_load_is_used_but_not_cached(monkeypatch, fresh_cache):
    calls: list[int] = []
    monkeypatch.setattr(bandwidth, "measure_bandwidth", _fake_measure(calls, 7.0))
    monkeypatch.setattr(bandwidth.os, "getloadavg", lambda: (99.0, 99.0, 99.0))
    found = bandwidth.memory_bandwidth()
    assert found.gbps == 7.0 and "not cached" in found.source
    assert not fresh_cache.exists()


def test_a_cached_entry_that_is_not_a_positive_number_is_measured_again(monkeypatch, fresh_cache):
    roofline.write_cache(fresh_cache, roofline.machine_key(), {"gbps": -1})
    calls: list[int] = []
    monkeypatch.setattr(bandwidth, "measure_bandwidth", _fake_measure(calls))
    monkeypatch.setattr(bandwidth.os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    assert bandwidth.memory_bandwidth().gbps == 42.0
    assert calls == [1]


def test_a_real_short_measurement_gives_a_positive_finite_bandwidth():
    found = bandwidth.measure_bandwidth(threads=1, array_bytes=8 * 2**20)
    assert math.isfinite(found.gbps) and found.gbps > 0
    # a compiler is installed here, so the compiled triad ran
    assert roofline.c_compiler() is not None
    assert "C triad" in found.source and "1 core" in found.source


def test_without_a_compiler_numpy_measures_and_says_so(monkeypatch):
    monkeypatch.setattr(roofline, "c_compiler", lambda: None)
    found = bandwidth.measure_bandwidth(threads=2, array_bytes=8 * 2**20)
    assert math.isfinite(found.gbps) and found.gbps > 0
    assert "numpy" in found.source and "no C compiler" in found.source


def test_a_measurement_needs_a_thread_and_a_page():
    with pytest.raises(UsageError, match="at least 1 thread"):
        bandwidth.measure_bandwidth(threads=1, array_bytes=100)


def test_the_last_level_cache_is_read_from_sys():
    size = bandwidth.last_level_cache_bytes()
    assert size >= 0
    assert bandwidth._array_bytes() >= 4 * 2**20


# -- compulsory bytes -----------------------------------------------------------------------


def test_a_gemm_reads_its_inputs_and_writes_its_output_once():
    m, n, k = 64, 32, 16
    problem = gemm_problem(m, n, k)
    assert compulsory_bytes(problem, "float32") == (m * k + k * n + m * n) * 4
    assert compulsory_bytes(problem, "float64") == (m * k + k * n + m * n) * 8
    # backward: inputs and the output gradient read, the input gradients written
    assert compulsory_bytes(problem, "float32", "backward") == (2 * (m * k + k * n) + m * n) * 4


def test_outputs_come_from_onnx_shape_inference():
    conv = DEFAULT_PROBLEMS["Conv"]  # X 2x3x7x7, W 4x3x3x3, B 4, pads 1, strides (2, 1)
    assert output_bytes(conv) == 2 * 4 * 4 * 7 * 4
    reduce_sum = DEFAULT_PROBLEMS["ReduceSum"]  # 2x3x4 over axes 0 and 2, keepdims 0
    assert output_bytes(reduce_sum) == 3 * 4
    equal = DEFAULT_PROBLEMS["Equal"]  # booleans: one byte each
    assert output_bytes(equal) == 3 * 4
    split = DEFAULT_PROBLEMS["Split"]  # three outputs together as large as the input
    assert output_bytes(split) == 3 * 6 * 4


def test_labels_are_int64_and_constants_are_not_counted():
    loss = DEFAULT_PROBLEMS["SoftmaxCrossEntropyLoss"]  # scores 4x5, labels 4
    assert compulsory_bytes(loss) == 4 * 5 * 4 + 4 * 8 + output_bytes(loss)
    reshape = DEFAULT_PROBLEMS["Reshape"]  # data 2x3x4, shape a constant
    assert compulsory_bytes(reshape) == 2 * 24 * 4


def test_an_operator_onnx_does_not_know_writes_as_much_as_its_largest_input():
    problem = Problem("MyCustomOp", (InputSpec((10, 20)), InputSpec((20,))))
    assert output_bytes(problem) == 200 * 4
    assert compulsory_bytes(problem) == (200 + 20 + 200) * 4


def test_an_unknown_direction_is_refused():
    with pytest.raises(UsageError, match="forward or backward"):
        compulsory_bytes(gemm_problem(2, 2, 2), "float32", "sideways")
