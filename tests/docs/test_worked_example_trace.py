"""The worked example's events in a traced run (docs/plugins/worked-example.md, "Adding
your events to a trace").

d5-plugin-tinygemm offers its profiler through ``d5_trace_profiler`` for its own
executor and backend; the regions it records (each Gemm call, each graph node) are
Chrome complete events on the trace's time base, which d5 merges into the run's
timeline and ``d5 trace RUN --top`` ranks. Runs in the ``example`` session, which
installs the worked example next to d5's numpy reference.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import d5_tinygemm.plugin as tinygemm_plugin
import numpy as np
import onnx
import pytest
from d5_tinygemm.executor import TinyGemmExecutor
from d5_tinygemm.gemm import TinyGemmBackend
from d5_tinygemm.trace import REGIONS, TinyGemmProfiler
from onnx import TensorProto, helper, numpy_helper

from d5core.api import TensorDescriptor, TraceProfiler
from d5core.trace.document import check_events

NODES = ("dense1", "dense2")


def two_layers() -> onnx.ModelProto:
    """``x -> Gemm(W1, b1) -> h -> Gemm(W2, b2) -> y``, with nodes named :data:`NODES`."""
    rng = np.random.default_rng(5)
    weights = {
        "W1": rng.standard_normal((6, 4)),
        "b1": rng.standard_normal(4),
        "W2": rng.standard_normal((4, 3)),
        "b2": rng.standard_normal(3),
    }
    graph = helper.make_graph(
        [
            helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name=NODES[0]),
            helper.make_node("Gemm", ["h", "W2", "b2"], ["y"], name=NODES[1]),
        ],
        "two_layers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 3])],
        [numpy_helper.from_array(w.astype(np.float32), name) for name, w in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def now_us() -> float:
    """A reading of the trace's clock (``perf_counter_ns() / 1000``)."""
    return time.perf_counter_ns() / 1000


@pytest.fixture(autouse=True)
def _recording_ends() -> Iterator[None]:
    """A test that fails while recording leaves the process's region log off."""
    yield
    if REGIONS.on:
        REGIONS.end()


def _conforming(events: list[dict[str, Any]]) -> list[str]:
    """What :func:`check_events` finds wrong once d5 has given the events a ``pid``."""
    return check_events([{**event, "pid": os.getpid()} for event in events])


@pytest.mark.parametrize("level", ["framework", "full"])
def test_the_hook_offers_the_profiler_for_tinygemm_and_nothing_for_other_executors(
    d5_plugin_manager: Any, level: str
) -> None:
    d5_plugin_manager.register(tinygemm_plugin)
    hook = d5_plugin_manager.hook.d5_trace_profiler
    (offered,) = hook(executor="tinygemm", level=level, subject=None)
    assert isinstance(offered, TraceProfiler) and isinstance(offered, TinyGemmProfiler)
    assert offered.name == "tinygemm"
    for other in ("numpy", "torch", "native", "tinygemm2"):
        assert hook(executor=other, level=level, subject=None) == []


def test_a_traced_executor_records_each_node_around_its_gemm_within_the_run() -> None:
    executor = TinyGemmExecutor(two_layers())
    feeds = {"x": np.ones((5, 6), np.float32)}
    profiler = TinyGemmProfiler()
    calls = 3
    before = now_us()
    profiler.start()  # d5 starts the profiler before it prepares the work
    run = executor.prepare_inference(feeds)
    for _ in range(calls):
        run()
    events = profiler.stop()
    after = now_us()

    assert _conforming(events) == []
    assert all(e["ph"] == "X" and before <= e["ts"] <= e["ts"] + e["dur"] <= after for e in events)
    assert {e["tid"] for e in events} == {threading.get_native_id()}
    nodes = [e for e in events if e["name"] != "Gemm"]
    gemms = [e for e in events if e["name"] == "Gemm"]
    assert sorted(e["name"] for e in nodes) == sorted(f"{n} (Gemm)" for n in NODES * calls)
    assert {e["args"]["node"] for e in nodes} == set(NODES)
    assert len(gemms) == len(NODES) * calls
    # Each Gemm call lies inside its node's region, so that d5's self times (--top)
    # charge the node only what it spends outside the product.
    for gemm in gemms:
        assert any(
            n["ts"] <= gemm["ts"] and gemm["ts"] + gemm["dur"] <= n["ts"] + n["dur"] for n in nodes
        )


def test_a_traced_operator_records_forward_and_backward_with_their_sizes_on_its_thread() -> None:
    a, b = np.ones((4, 5)), np.ones((5, 3))
    gemm = TinyGemmBackend().create("Gemm", {}, [TensorDescriptor.of(a), TensorDescriptor.of(b)])
    profiler = TinyGemmProfiler()
    threads: list[int] = []

    def work() -> None:
        threads.append(threading.get_native_id())
        (y,) = gemm.forward([a, b])
        gemm.backward([np.ones_like(y)], [a, b], [y])

    before = now_us()
    profiler.start()
    worker = threading.Thread(target=work)
    worker.start()
    worker.join()
    events = profiler.stop()
    after = now_us()

    assert _conforming(events) == []
    assert [e["name"] for e in events] == ["Gemm", "Gemm backward"]
    assert all(before <= e["ts"] and e["ts"] + e["dur"] <= after for e in events)
    assert {e["tid"] for e in events} == set(threads) != {threading.get_native_id()}
    assert all(e["args"] == {"m": 4, "k": 5, "n": 3, "dtype": "float64"} for e in events)


def test_nothing_is_recorded_outside_start_and_stop() -> None:
    executor = TinyGemmExecutor(two_layers())
    feeds = {"x": np.ones((2, 6), np.float32)}
    executor.inference(feeds)  # untraced
    profiler = TinyGemmProfiler()
    profiler.start()
    assert profiler.stop() == []  # nothing ran inside
    executor.inference(feeds)  # after stop
    profiler.start()
    executor.inference(feeds)
    assert len(profiler.stop()) == 2 * len(NODES)  # a node and its Gemm per node, once


def test_one_recording_at_a_time_and_no_stop_without_a_start() -> None:
    first, second = TinyGemmProfiler(), TinyGemmProfiler()
    first.start()
    with pytest.raises(RuntimeError, match="already recording"):
        second.start()
    assert first.stop() == []
    with pytest.raises(RuntimeError, match="not started"):
        first.stop()


def test_d5_bench_net_traces_tinygemm_and_d5_trace_top_lists_its_regions(tmp_path: Path) -> None:
    """What a user runs: the plugin found through its entry points, a traced ``d5 bench
    net``, then the operators of the traced steps."""
    model = tmp_path / "two_layers.onnx"
    onnx.save(two_layers(), model)
    d5 = str(Path(sys.executable).with_name("d5"))
    db = str(tmp_path / "r.db")
    env = {**os.environ, "D5_NOISE_FLOOR": "0.03"}  # no calibration first

    def run(*args: str) -> str:
        result = subprocess.run(
            [d5, *args, "--db", db], capture_output=True, text=True, env=env, timeout=300
        )
        assert result.returncode == 0, result.stdout + result.stderr
        return result.stdout

    bench = run(
        "bench", "net", str(model), "--executors", "tinygemm", "--trace", "framework",
        "--processes", "1", "--max-samples", "10", "--time-budget", "0.1",
    )  # fmt: skip
    found = re.search(r"traced \(framework\): run (\w+) keeps its trace", bench)
    assert found, bench
    run_id = found[1]

    (top,) = json.loads(run("trace", run_id, "--top", "5", "--json"))["data"]["top"]
    rows = {(row["name"], row["source"]): row for row in top["rows"]}
    steps = top["steps"]
    assert rows[("Gemm", "tinygemm")]["calls"] == len(NODES) * steps
    for node in NODES:
        assert rows[(f"{node} (Gemm)", "tinygemm")]["calls"] == steps
    table = run("trace", run_id, "--top", "5")
    assert re.search(r"Gemm\s.*\btinygemm\b", table), table
