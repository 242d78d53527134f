"""The measurement engine: single vs blocked timing, stopping rules, what it records.

Most tests drive the engine with a simulated clock that a callable advances by chosen
amounts, so that the decisions are deterministic; a few use the real clock with
generous bounds.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

from d5core.bus import MEASURE_SAMPLE, Event, MetricBus
from d5core.hookspecs import hookimpl
from d5core.measure import (
    Clock,
    Measurement,
    MeasureOptions,
    measure,
    synchronizer_for,
    synchronizer_of,
)
from d5core.plugins import PluginManager


class SimulatedClock:
    """A clock that only moves when the measured callable says how long it took."""

    def __init__(self, durations_ns: Iterator[float]) -> None:
        self.now = 0
        self.durations = durations_ns
        self.calls = 0
        self.log: list[str] = []

    def read(self) -> int:
        self.log.append("read")
        return self.now

    def fn(self) -> None:
        self.calls += 1
        self.log.append("fn")
        self.now += round(next(self.durations))

    def clock(self) -> Clock:
        return Clock(self.read, resolution_ns=1.0, overhead_ns=1.0, declared_resolution_ns=1.0)


def constant(ns: float) -> Iterator[float]:
    while True:
        yield ns


def lognormal(median_ns: float, sigma: float, seed: int = 0) -> Iterator[float]:
    rng = np.random.default_rng(seed)
    while True:
        yield from median_ns * rng.lognormal(0.0, sigma, 1000)


def run(durations: Iterator[float], **options: object) -> tuple[Measurement, SimulatedClock]:
    sim = SimulatedClock(durations)
    opts = MeasureOptions(**options)  # type: ignore[arg-type]
    return measure(sim.fn, opts, clock=sim.clock(), bus=MetricBus()), sim


def spin(ns: int) -> Callable[[], None]:
    """A callable that busy-waits ``ns`` of wall time: stable under load."""

    def wait() -> None:
        end = time.perf_counter_ns() + ns
        while time.perf_counter_ns() < end:
            pass

    return wait


# -- single events and blocks ------------------------------------------------------


def test_short_calls_are_timed_in_blocks_long_enough_to_hide_the_clock() -> None:
    # Clock cost 2 ns: a 100 ns call is under 1000 × 2 ns, and blocks must reach
    # 2 ns / 1e-4 = 20 µs, i.e. at least 200 calls.
    m, _ = run(constant(100))
    assert m.blocked and m.block_size >= 200
    assert m.block_size * 100 <= 10 * 20_000  # not grossly oversized


def test_long_calls_are_timed_one_by_one() -> None:
    m, _ = run(constant(5_000))  # 2500 × the clock's cost
    assert not m.blocked and m.block_size == 1


def test_samples_are_seconds_per_call_whatever_the_block() -> None:
    m, _ = run(constant(100))
    assert set(m.samples) == {100e-9}


def test_real_100ns_callable_is_blocked_and_real_1ms_callable_is_single() -> None:
    quick = measure(lambda: None, MeasureOptions(time_budget_s=0.5, max_samples=50))
    slow = measure(spin(1_000_000), MeasureOptions(time_budget_s=0.5, max_samples=20))
    assert quick.blocked and quick.block_size > 100
    assert quick.summary.median < 5e-6  # generous: a no-op call is far below this
    assert not slow.blocked and slow.block_size == 1
    assert 1e-3 <= slow.summary.median < 5e-3


def test_cold_cache_times_every_call_alone() -> None:
    m, _ = run(constant(100), cold_cache=True, min_samples=6, max_samples=6)
    assert m.block_size == 1 and m.options.cold_cache


# -- how many samples ---------------------------------------------------------------


def test_min_samples_below_six_is_refused() -> None:
    with pytest.raises(ValueError, match="min_samples must be at least 6"):
        MeasureOptions(min_samples=5)


def test_max_samples_below_min_samples_is_refused() -> None:
    with pytest.raises(ValueError, match="max_samples"):
        MeasureOptions(min_samples=10, max_samples=8)


def test_min_samples_are_taken_even_when_the_budget_is_spent() -> None:
    m, _ = run(lognormal(1e6, 0.3), time_budget_s=0.0, min_samples=7)
    assert len(m.samples) == 7
    assert m.stopped_by == "time_budget"


def test_stops_on_the_ci_as_soon_as_it_is_narrow_enough() -> None:
    m, _ = run(constant(1e6), min_samples=8)
    assert m.stopped_by == "ci" and len(m.samples) == 8
    assert m.summary.ci_rel_halfwidth <= m.options.rel_ci


def test_stops_on_the_ci_for_moderate_noise_after_more_samples() -> None:
    m, _ = run(lognormal(1e6, 0.02), rel_ci=0.01, max_samples=10_000, time_budget_s=1e9)
    assert m.stopped_by == "ci"
    assert 10 < len(m.samples) < 10_000
    assert m.summary.ci_rel_halfwidth <= 0.01


def test_stops_at_max_samples_when_the_ci_stays_wide() -> None:
    m, _ = run(lognormal(1e6, 1.0), max_samples=40, time_budget_s=1e9)
    assert m.stopped_by == "max_samples" and len(m.samples) == 40


def test_time_budget_is_honoured_within_one_sample() -> None:
    # 1 ms calls, 0.1 s budget: about 100 samples, not the 10 000 allowed.
    m, sim = run(lognormal(1e6, 1.0), time_budget_s=0.1, max_samples=10_000)
    assert m.stopped_by == "time_budget"
    assert sim.now - max(m.samples) * 1e9 < 0.1e9 <= sim.now
    assert 20 < len(m.samples) < 400


def test_real_time_budget_is_honoured() -> None:
    # Calls of 100–300 µs drawn at random: the CI cannot shrink to the required zero.
    rng = np.random.default_rng(0)
    waits = [spin(int(ns)) for ns in rng.uniform(100_000, 300_000, 64)]
    calls = iter(waits * 10_000)
    opts = MeasureOptions(time_budget_s=0.2, rel_ci=0.0, max_samples=100_000)
    start = time.perf_counter()
    m = measure(lambda: next(calls)(), opts)
    elapsed = time.perf_counter() - start
    assert m.stopped_by == "time_budget"
    assert 0.2 <= m.elapsed_s <= elapsed < 2.0  # generous: a loaded machine is slow


# -- what is recorded ---------------------------------------------------------------


def test_every_call_is_accounted_for_as_warmup_calibration_or_sample() -> None:
    m, sim = run(lognormal(300, 0.1), warmup=5, max_samples=30)
    assert m.warmup_runs == 5
    assert m.calibration_runs > 0
    assert sim.calls == m.warmup_runs + m.calibration_runs + m.block_size * len(m.samples)


def test_warmup_time_keeps_warming_until_it_has_passed() -> None:
    m, _ = run(constant(1e6), warmup=1, warmup_time_s=0.05)
    assert m.warmup_runs >= 50


def test_every_sample_is_published_on_the_bus() -> None:
    sim = SimulatedClock(lognormal(1e5, 0.5))
    bus = MetricBus()
    events: list[Event] = []
    bus.subscribe(MEASURE_SAMPLE, events.append)
    m = measure(sim.fn, MeasureOptions(max_samples=25), name="op", clock=sim.clock(), bus=bus)
    assert len(events) == len(m.samples)
    assert [e.payload["index"] for e in events] == list(range(len(m.samples)))
    assert all(e.payload["name"] == "op" for e in events)
    per_call = [e.payload["duration_ns"] / e.payload["block_size"] / 1e9 for e in events]
    assert per_call == pytest.approx(m.samples)


def test_synchronize_comes_between_the_work_and_every_clock_read() -> None:
    sim = SimulatedClock(constant(1e6))
    sim_log = sim.log

    def synchronize() -> None:
        sim_log.append("sync")

    m = measure(sim.fn, MeasureOptions(), clock=sim.clock(), synchronize=synchronize)
    assert m.synchronized
    pairs = list(itertools.pairwise(sim_log))
    assert ("fn", "read") not in pairs
    assert pairs.count(("sync", "read")) >= 2 * len(m.samples)


def test_measurement_serialises_to_json_with_its_options_and_method() -> None:
    m, _ = run(lognormal(1e5, 0.1), max_samples=12)
    d = json.loads(json.dumps(m.to_json()))
    assert d["samples"] == m.samples
    assert d["summary"]["n"] == len(m.samples)
    assert d["options"]["min_samples"] == 10
    assert {"blocked", "block_size", "stopped_by", "timer_resolution_ns"} <= d.keys()


def test_the_collector_is_back_on_after_measuring() -> None:
    import gc

    measure(spin(100_000), MeasureOptions(max_samples=6, min_samples=6))
    assert gc.isenabled()


# -- synchronisation through plugins --------------------------------------------------


class _Accelerator:
    def __init__(self) -> None:
        self.devices: list[str] = []

    @hookimpl
    def d5_synchronize(self, device: str) -> None:
        self.devices.append(device)


def test_no_synchronizer_for_the_cpu() -> None:
    assert synchronizer_for("cpu") is None


def test_synchronizer_calls_the_plugins_hook_with_the_device() -> None:
    manager = PluginManager(discover_installed=False)
    plugin = _Accelerator()
    manager.register(plugin, "accelerator")
    sync = synchronizer_for("fake:0", manager)
    assert sync is not None
    sync()
    assert plugin.devices == ["fake:0"]


def test_an_asynchronous_cpu_operator_is_synchronized_before_every_clock_read() -> None:
    manager = PluginManager(discover_installed=False)
    plugin = _Accelerator()
    manager.register(plugin, "accelerator")

    class Queued:
        device = "cpu"
        asynchronous = True

    class Plain:
        device = "cpu"

    assert synchronizer_of(Plain(), manager) is None
    sync = synchronizer_of(Queued(), manager)
    assert sync is not None
    calls = {"n": 0}

    def work() -> None:
        calls["n"] += 1

    m = measure(work, MeasureOptions(warmup=1, min_samples=6, max_samples=6), synchronize=sync)
    assert plugin.devices and set(plugin.devices) == {"cpu"}
    # one read before and one after each timed call at least
    assert len(plugin.devices) >= 2 * len(m.samples)


def test_synchronizer_warns_when_no_plugin_can_synchronize() -> None:
    with pytest.warns(RuntimeWarning, match="no plugin implements d5_synchronize"):
        sync = synchronizer_for("fake:0", PluginManager(discover_installed=False))
    assert sync is not None


def test_an_unbounded_time_budget_leaves_the_other_rules_in_charge() -> None:
    m, _ = run(lognormal(1e6, 1.0), time_budget_s=float("inf"), max_samples=15)
    assert m.stopped_by == "max_samples" and len(m.samples) == 15
