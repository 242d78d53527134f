"""Time metrics fed synthetic events through a real metric bus: wall-clock, latency, throughput."""

from __future__ import annotations

import json

import pytest

from d5core.bus import MEASURE_SAMPLE, TRAIN_STEP, MetricBus
from d5core.metrics import Latency, Throughput, WallclockTime

MS = 1_000_000


def _steps(bus: MetricBus, durations_ms, **payload) -> None:
    for ms in durations_ms:
        bus.publish(f"{TRAIN_STEP}.end", duration_ns=ms * MS, **payload)


def test_wallclock_time_is_the_median_of_span_durations_in_seconds():
    bus = MetricBus()
    metric = WallclockTime()
    metric.attach(bus)
    _steps(bus, [30, 10, 20, 40, 50, 60, 1000])
    out = metric.result()
    assert out["value"] == pytest.approx(0.040)
    assert out["unit"] == "s"
    assert out["n"] == 7
    assert out["total"] == pytest.approx(1.210)
    assert out["summary"]["n"] == 7
    assert out["summary"]["median"] == pytest.approx(0.040)
    json.dumps(out, allow_nan=False)


def test_wallclock_time_times_a_real_span_and_ignores_other_events():
    bus = MetricBus()
    metric = WallclockTime("op.forward")
    metric.attach(bus)
    with bus.span("op.forward"):
        pass
    bus.publish(f"{TRAIN_STEP}.end", duration_ns=5 * MS)
    out = metric.result()
    assert out["n"] == 1
    assert 0 <= out["value"] < 5e-3


def test_wallclock_time_excludes_and_counts_warmup():
    bus = MetricBus()
    metric = WallclockTime(warmup=2)
    metric.attach(bus)
    _steps(bus, [500, 400, 10, 20, 30])
    out = metric.result()
    assert (out["n"], out["warmup_excluded"]) == (3, 2)
    assert out["value"] == pytest.approx(0.020)


def test_wallclock_time_divides_measure_samples_by_their_block_and_filters_by_name():
    bus = MetricBus()
    metric = WallclockTime(MEASURE_SAMPLE, where={"name": "gemm"})
    metric.attach(bus)
    for i, ms in enumerate((30, 10, 20)):
        bus.publish(MEASURE_SAMPLE, name="gemm", index=i, duration_ns=ms * MS, block_size=10)
    bus.publish(MEASURE_SAMPLE, name="conv", index=0, duration_ns=999 * MS, block_size=1)
    out = metric.result()
    assert out["n"] == 3
    assert out["value"] == pytest.approx(0.002)


def test_wallclock_time_without_events_is_unavailable_with_a_reason():
    bus = MetricBus()
    metric = WallclockTime()
    metric.attach(bus)
    bus.publish(f"{TRAIN_STEP}.end", note="no duration")
    out = metric.result()
    assert "value" not in out
    assert out["unavailable"] == "1 'train.step' events carried no duration_ns"
    assert out["unit"] == "s"


def test_latency_percentiles_are_nearest_rank_values():
    bus = MetricBus()
    metric = Latency()
    metric.attach(bus)
    _steps(bus, range(100, 0, -1))  # 1 ms .. 100 ms, in reverse order
    out = metric.result()
    assert out["percentiles"] == pytest.approx(
        {"p50": 0.050, "p90": 0.090, "p95": 0.095, "p99": 0.099}
    )
    assert out["value"] == pytest.approx(0.099)
    assert out["headline"] == "p99"
    assert "caveat" not in out


def test_latency_headline_can_be_the_median_and_small_samples_carry_a_caveat():
    bus = MetricBus()
    metric = Latency(headline=50)
    metric.attach(bus)
    _steps(bus, [4, 1, 3, 2])
    out = metric.result()
    assert out["value"] == pytest.approx(0.002)
    assert out["percentiles"]["p99"] == pytest.approx(0.004)
    assert out["caveat"] == "p99 of 4 samples is close to the maximum"


def test_throughput_is_the_harmonic_mean_of_step_rates_not_the_arithmetic_mean():
    bus = MetricBus()
    metric = Throughput()
    metric.attach(bus)
    # 32 samples in 0.1 s (320/s) and 32 samples in 0.4 s (80/s): 64 samples in 0.5 s.
    _steps(bus, [100, 400], batch_size=32)
    out = metric.result()
    assert out["value"] == pytest.approx(128.0)  # the arithmetic mean would say 200
    assert out["unit"] == "samples/s"
    assert (out["steps"], out["samples"], out["seconds"]) == (2, 64, pytest.approx(0.5))
    assert out["per_step"]["n"] == 2


def test_throughput_weights_unequal_batches_by_size():
    bus = MetricBus()
    metric = Throughput(warmup=1)
    metric.attach(bus)
    bus.publish(f"{TRAIN_STEP}.end", duration_ns=10_000 * MS, batch_size=1)  # warm-up
    bus.publish(f"{TRAIN_STEP}.end", duration_ns=100 * MS, batch_size=10)
    bus.publish(f"{TRAIN_STEP}.end", duration_ns=100 * MS, samples=30)
    bus.publish(f"{TRAIN_STEP}.end", duration_ns=100 * MS)  # no batch size: not a rate
    out = metric.result()
    assert out["value"] == pytest.approx(40 / 0.2)
    assert (out["warmup_excluded"], out["incomplete_events"]) == (1, 1)


def test_throughput_of_measure_samples_counts_every_call_of_a_block():
    bus = MetricBus()
    metric = Throughput(MEASURE_SAMPLE, batch_size=64)
    metric.attach(bus)
    bus.publish(MEASURE_SAMPLE, name="resnet", index=0, duration_ns=400 * MS, block_size=4)
    bus.publish(MEASURE_SAMPLE, name="resnet", index=1, duration_ns=600 * MS, block_size=4)
    out = metric.result()
    assert out["value"] == pytest.approx(512 / 1.0)
    assert out["samples"] == 512


def test_throughput_of_several_runs_combines_by_harmonic_mean():
    weighted = Throughput.combine(
        [
            {"value": 100.0, "samples": 100, "seconds": 1.0},
            {"value": 50.0, "samples": 100, "seconds": 2.0},
        ]
    )
    assert weighted["value"] == pytest.approx(200 / 3)
    plain = Throughput.combine([{"value": 100.0}, {"value": 50.0}, {"unavailable": "x"}])
    assert plain["value"] == pytest.approx(2 / (1 / 100 + 1 / 50))
    assert (plain["runs"], plain["left_out"]) == (2, 1)


def test_throughput_without_batch_sizes_is_unavailable():
    bus = MetricBus()
    metric = Throughput()
    metric.attach(bus)
    _steps(bus, [10, 10])
    out = metric.result()
    assert out["unavailable"] == (
        "2 'train.step' events lacked a batch size or a positive duration_ns"
    )
