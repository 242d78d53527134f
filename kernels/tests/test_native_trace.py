"""The kernels' own tracer: what a traced GEMM, Conv or pointwise call records, on which
threads and clock, nothing while it is off, and the profiler the ``d5_trace_profiler``
hook offers for the native backend."""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from importlib import metadata
from typing import Any

import numpy as np
import pytest
from d5_kernels import _native, plugin, runtime
from d5_kernels.operators import NativeBackend
from d5_kernels.trace import NativeTraceProfiler, chrome_events, dropped_event

from d5core.api import TensorDescriptor, TraceProfiler
from d5core.testing.trace import check_trace_events as check_events

NATIVE = NativeBackend()
Region = tuple[str, int, int, int]

#: The forward Conv region of each algorithm that ``details()`` names.
CONV_REGIONS = {
    "packed GEMM on the input planes": "conv2d.planes",
    "im2col + packed GEMM": "conv2d.im2col",
    "direct (AVX-512, padded taps skipped)": "conv2d.direct",
    "direct (AVX2, padded taps skipped)": "conv2d.direct",
}


@pytest.fixture
def two_threads() -> Iterator[None]:
    """Two OpenMP threads for the test; the setting before it afterwards."""
    before = runtime.num_threads()
    runtime.set_num_threads(2)
    yield
    runtime.set_num_threads(before)


@pytest.fixture(autouse=True)
def tracer_off() -> Iterator[None]:
    """Every test starts and ends with the tracer off and its buffers empty."""
    _native.trace_stop()
    yield
    _native.trace_stop()


def traced(call: Any) -> tuple[list[Region], int, int, int]:
    """Run ``call`` with the tracer on: its regions, the drop count, and
    ``time.perf_counter_ns()`` read just before starting and just after stopping."""
    before = time.perf_counter_ns()
    _native.trace_start()
    call()
    regions, dropped = _native.trace_stop()
    after = time.perf_counter_ns()
    return regions, dropped, before, after


def square_product(n: int, dtype: str = "float32") -> Any:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n)).astype(dtype)
    b = rng.standard_normal((n, n)).astype(dtype)
    y = np.empty((n, n), dtype=dtype)
    return lambda: _native.gemm(a, b, y, 1.0, 0.0)


def nest_properly(regions: list[Region]) -> bool:
    """Whether each thread's regions nest (a trace viewer stacks them) or are disjoint."""
    by_thread: dict[int, list[Region]] = defaultdict(list)
    for region in regions:
        by_thread[region[1]].append(region)
    for own in by_thread.values():
        open_ends: list[int] = []
        for _, _, begin, end in sorted(own, key=lambda r: (r[2], -r[3])):
            while open_ends and open_ends[-1] <= begin:
                open_ends.pop()
            if open_ends and end > open_ends[-1]:
                return False
            open_ends.append(end)
    return True


def test_the_tracer_reads_the_clock_of_perf_counter_ns() -> None:
    for _ in range(100):
        before = time.perf_counter_ns()
        native = _native.trace_now_ns()
        after = time.perf_counter_ns()
        assert before <= native <= after


def test_nothing_is_recorded_while_the_tracer_is_off() -> None:
    assert not _native.trace_active()
    square_product(300)()
    _native.relu_forward(np.ones(10), np.empty(10))
    assert _native.trace_stop() == ([], 0)


def test_a_gemm_records_its_call_packing_and_macro_kernels_per_thread(
    isa: str, two_threads: None
) -> None:
    with runtime.using_isa(isa):
        regions, dropped, before, after = traced(square_product(400))
    assert dropped == 0
    names = {name for name, *_ in regions}
    assert names == {"gemm", "gemm.slab", "gemm.pack_a", "gemm.pack_b", "gemm.macro"}
    (call,) = [r for r in regions if r[0] == "gemm"]
    assert call[1] == threading.get_native_id()
    # Each of the two threads runs its own slab, packs its own blocks (OS thread ids).
    slab_threads = {tid for name, tid, *_ in regions if name == "gemm.slab"}
    assert len(slab_threads) == 2
    assert {tid for name, tid, *_ in regions if name == "gemm.pack_a"} == slab_threads
    for _, _, begin, end in regions:
        assert before <= begin <= end <= after
        assert call[2] <= begin and end <= call[3]
    assert nest_properly(regions)


def test_a_skinny_gemm_records_its_path_without_packing_a(two_threads: None) -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal((600, 300)).astype("float32")
    b = rng.standard_normal((300, 16)).astype("float32")
    y = np.empty((600, 16), dtype="float32")
    reason = runtime.why_unavailable("avx512")  # the only ISA with a skinny path
    if reason is not None:
        pytest.skip(reason)
    with runtime.using_isa("avx512"):
        regions, _, _, _ = traced(lambda: _native.gemm(a, b, y, 1.0, 0.0))
    names = {name for name, *_ in regions}
    assert names == {"gemm", "gemm.slab", "gemm.pack_b", "gemm.macro"}
    assert len({tid for name, tid, *_ in regions if name == "gemm.slab"}) == 2


def test_a_conv_records_the_algorithm_it_chose(isa: str) -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 16, 12, 12)).astype("float32")
    w = rng.standard_normal((32, 16, 3, 3)).astype("float32")
    with runtime.using_isa(isa):
        op = NATIVE.create(
            "Conv", {"pads": [1, 1, 1, 1]}, [TensorDescriptor.of(x), TensorDescriptor.of(w)]
        )
        regions, _, before, after = traced(lambda: op.forward([x, w]))
        algorithm = op.details()["algorithm"]
    names = [name for name, *_ in regions]
    whole = CONV_REGIONS[algorithm]
    assert names.count(whole) == 1
    assert not ({"conv2d.planes", "conv2d.im2col", "conv2d.direct"} - {whole}) & set(names)
    if whole == "conv2d.direct":
        assert "conv2d.direct.job" in names
    else:
        assert {"conv2d.im2col.columns", "gemm"} <= set(names)
    assert all(before <= begin <= end <= after for _, _, begin, end in regions)


def test_pointwise_pool_and_transformer_ops_record_their_whole_call() -> None:
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8))
    y = np.empty_like(x)
    pool_out = np.empty((2, 3, 4, 4))

    def calls() -> None:
        _native.relu_forward(x, y)
        _native.avg_pool_forward(x, pool_out, (2, 2, 2, 2, 1, 1, 0, 0, 0, 0), False)
        _native.gelu_forward(x, y, False)

    regions, _, _, _ = traced(calls)
    assert [name for name, *_ in regions] == ["relu.forward", "avg_pool.forward", "gelu.forward"]
    assert {tid for _, tid, _, _ in regions} == {threading.get_native_id()}
    # In call order, one after the other.
    assert all(regions[i][3] <= regions[i + 1][2] for i in range(len(regions) - 1))


def test_a_new_trace_forgets_the_regions_of_one_never_stopped() -> None:
    _native.trace_start()
    square_product(64)()
    regions, _, _, _ = traced(lambda: None)
    assert regions == []


def test_the_profiler_returns_chrome_complete_events_d5_accepts(two_threads: None) -> None:
    profiler = NativeTraceProfiler()
    before = time.perf_counter_ns()
    profiler.start()
    square_product(300)()
    events = profiler.stop()
    after = time.perf_counter_ns()
    assert events and profiler.dropped == 0
    assert check_events([{**event, "pid": 1} for event in events]) == []
    for event in events:
        assert event["ph"] == "X"
        assert event["cat"] == "d5_kernels"
        assert isinstance(event["tid"], int)
        assert before / 1000 <= event["ts"] <= event["ts"] + event["dur"] <= after / 1000
    assert len({event["tid"] for event in events}) == 2


def test_events_convert_nanoseconds_to_microseconds() -> None:
    (event,) = chrome_events([("gemm", 7, 2_000_500, 2_003_750)])
    assert event == {
        "name": "gemm",
        "cat": "d5_kernels",
        "ph": "X",
        "ts": 2000.5,
        "dur": 3.25,
        "tid": 7,
    }


def test_regions_past_the_capacity_are_counted_as_dropped() -> None:
    capacity = _native.trace_capacity()
    x, y = np.ones(1), np.empty(1)
    _native.trace_start()
    for _ in range(capacity + 3):
        _native.relu_forward(x, y)
    regions, dropped = _native.trace_stop()
    assert (len(regions), dropped) == (capacity, 3)
    note = dropped_event(dropped)
    assert note["args"] == {"dropped": 3}
    assert check_events([{**note, "pid": 1}]) == []


def test_the_backend_names_are_the_entry_points_of_the_operator_group() -> None:
    group = metadata.entry_points(group="d5.operators")
    names = {ep.name for ep in group if ep.value.startswith("d5_kernels.")}
    assert names == plugin.BACKEND_NAMES


def test_the_hook_offers_the_profiler_for_the_native_backend_only() -> None:
    for name in plugin.BACKEND_NAMES:
        profiler = plugin.d5_trace_profiler(executor=name, level="framework", subject=NATIVE)
        assert isinstance(profiler, TraceProfiler)
        assert profiler.name == "d5_kernels"
    assert plugin.d5_trace_profiler(executor="torch", level="framework", subject=None) is None
