"""Training and distributed metrics fed synthetic events through a real metric bus."""

from __future__ import annotations

import json

import pytest

from d5core.bus import COMM_CALL, TEST_PASS, TRAIN_EPOCH, TRAIN_STEP, MetricBus
from d5core.lv2.metrics import (
    FinalTestAccuracy,
    LossCurve,
    TestAccuracy,
    TimeToAccuracy,
    TrainingAccuracy,
)
from d5core.lv3.communication_metric import CommunicationVolume

S = 1_000_000_000


class _Clock:
    """A settable stand-in for the bus's clock, so that events carry crafted timestamps."""

    def __init__(self) -> None:
        self.ns = 0

    def __call__(self) -> int:
        return self.ns


@pytest.fixture
def clock(monkeypatch) -> _Clock:
    fake = _Clock()
    monkeypatch.setattr("d5core.bus._clock", fake)
    return fake


def _at(bus: MetricBus, clock: _Clock, seconds: float, name: str, **payload) -> None:
    clock.ns = int(seconds * S)
    bus.publish(name, **payload)


# -- time to accuracy --------------------------------------------------------


def test_time_to_accuracy_runs_from_the_first_step_to_the_first_pass_at_target(clock):
    bus = MetricBus()
    metric = TimeToAccuracy(target=0.75)
    metric.attach(bus)
    _at(bus, clock, 100.0, f"{TRAIN_STEP}.begin")  # the first touch of data
    _at(bus, clock, 101.0, f"{TRAIN_STEP}.end", duration_ns=S)
    _at(bus, clock, 110.0, f"{TEST_PASS}.end", correct=70, count=100, epoch=0)
    _at(bus, clock, 111.0, f"{TRAIN_STEP}.begin")
    _at(bus, clock, 125.5, f"{TEST_PASS}.end", correct=76, count=100, epoch=1)
    _at(bus, clock, 140.0, f"{TEST_PASS}.end", correct=80, count=100, epoch=2)
    out = metric.result()
    assert out["value"] == pytest.approx(25.5)
    assert (out["reached"], out["epoch"], out["passes"]) == (True, 1, 2)
    assert out["accuracy"] == pytest.approx(0.76)
    json.dumps(out, allow_nan=False)


def test_time_to_accuracy_starts_at_an_earlier_run_start_and_never_pauses(clock):
    bus = MetricBus()
    metric = TimeToAccuracy(target=0.5)
    metric.attach(bus)
    _at(bus, clock, 10.0, "run.start")
    _at(bus, clock, 30.0, f"{TRAIN_STEP}.begin")
    _at(bus, clock, 40.0, f"{TEST_PASS}.begin")  # evaluation time counts
    _at(bus, clock, 70.0, f"{TEST_PASS}.end", accuracy=0.5)
    assert metric.result()["value"] == pytest.approx(60.0)


def test_time_to_accuracy_starts_with_a_real_train_step_span(clock):
    bus = MetricBus()
    metric = TimeToAccuracy(target=0.9)
    metric.attach(bus)
    clock.ns = 5 * S
    with bus.span(TRAIN_STEP, batch_size=8) as step:
        clock.ns = 6 * S
        step.set(loss=0.1)
    _at(bus, clock, 9.0, TEST_PASS, correct=9, count=10)
    assert metric.result()["value"] == pytest.approx(4.0)


def test_time_to_accuracy_with_only_instant_test_passes_starts_at_the_first_pass(clock):
    bus = MetricBus()
    metric = TimeToAccuracy(target=0.5)
    metric.attach(bus)
    _at(bus, clock, 10.0, TEST_PASS, accuracy=0.1, duration_ns=2 * S)
    _at(bus, clock, 20.0, TEST_PASS, accuracy=0.7, duration_ns=2 * S)
    assert metric.result()["value"] == pytest.approx(12.0)


def test_time_to_accuracy_not_reached_is_none_with_the_best_seen(clock):
    bus = MetricBus()
    metric = TimeToAccuracy(target=0.9)
    metric.attach(bus)
    _at(bus, clock, 0.0, f"{TRAIN_STEP}.begin")
    _at(bus, clock, 5.0, TEST_PASS, accuracy=0.6)
    _at(bus, clock, 9.0, TEST_PASS, accuracy=0.8)
    out = metric.result()
    assert out["value"] is None
    assert out["reached"] is False
    assert out["not_reached"] == "best accuracy 0.8 in 2 test passes did not reach the target 0.9"


def test_time_to_accuracy_for_a_lower_is_better_metric(clock):
    bus = MetricBus()
    metric = TimeToAccuracy(target=20.0, key="perplexity", mode="min")
    metric.attach(bus)
    _at(bus, clock, 1.0, f"{TRAIN_STEP}.begin")
    _at(bus, clock, 3.0, TEST_PASS, perplexity=35.0)
    _at(bus, clock, 7.0, TEST_PASS, perplexity=19.5)
    assert metric.result()["value"] == pytest.approx(6.0)


def test_time_to_accuracy_without_a_target_or_a_test_pass_is_unavailable():
    assert TimeToAccuracy().result()["unavailable"] == "no target was given (target=...)"
    metric = TimeToAccuracy(target=0.5)
    metric.attach(MetricBus())
    assert metric.result()["unavailable"] == "no test.pass event was published"


def test_time_to_accuracy_of_several_runs_is_the_olympic_mean():
    runs = [{"value": v} for v in (10.0, 100.0, 20.0, 30.0, 1.0)]
    out = TimeToAccuracy.combine(runs)
    assert out["value"] == pytest.approx(20.0)  # mean of 10, 20, 30
    assert (out["runs"], out["min"], out["max"]) == (5, 1.0, 100.0)
    one_failed = TimeToAccuracy.combine([{"value": 1.0}, {"value": 2.0}, {"value": None}])
    assert one_failed["value"] == pytest.approx(2.0)
    assert one_failed["not_reached"] == 1
    two_failed = TimeToAccuracy.combine([{"value": 1.0}, {"value": None}, {"value": None}])
    assert two_failed["value"] is None


# -- accuracies --------------------------------------------------------------


def test_training_accuracy_pools_steps_per_epoch_and_reports_the_last_epoch():
    bus = MetricBus()
    metric = TrainingAccuracy()
    metric.attach(bus)
    bus.publish(f"{TRAIN_STEP}.end", correct=10, count=20)
    bus.publish(f"{TRAIN_STEP}.end", correct=20, count=20)
    bus.publish(f"{TRAIN_EPOCH}.end")
    bus.publish(f"{TRAIN_STEP}.end", correct=9, count=10)
    bus.publish(f"{TRAIN_STEP}.end", accuracy=0.6, count=30)
    bus.publish(f"{TRAIN_STEP}.end", loss=1.0)  # no accuracy: counted, not used
    out = metric.result()
    assert out["value"] == pytest.approx(27 / 40)
    assert [e["accuracy"] for e in out["per_epoch"]] == pytest.approx([0.75, 0.675])
    assert [e["epoch"] for e in out["per_epoch"]] == [0, 1]
    assert out["steps_without_accuracy"] == 1


def test_test_accuracy_is_the_best_pass_and_final_is_the_last():
    bus = MetricBus()
    best, final = TestAccuracy(), FinalTestAccuracy()
    best.attach(bus)
    final.attach(bus)
    bus.publish(f"{TRAIN_STEP}.end", step=0, epoch=0)
    bus.publish(f"{TEST_PASS}.end", correct=50, count=100)
    bus.publish(f"{TRAIN_STEP}.end", step=1, epoch=1)
    bus.publish(TEST_PASS, correct=90, count=100)
    bus.publish(f"{TRAIN_STEP}.end", step=2, epoch=2)
    bus.publish(f"{TEST_PASS}.end", correct=85, count=100)
    top = best.result()
    assert top["value"] == pytest.approx(0.90)
    assert (top["best_pass"], top["final"], top["passes"]) == (1, pytest.approx(0.85), 3)
    assert [(p["step"], p["epoch"]) for p in top["curve"]] == [(0, 0), (1, 1), (2, 2)]
    last = final.result()
    assert last["value"] == pytest.approx(0.85)
    assert (last["step"], last["epoch"]) == (2, 2)


def test_test_accuracy_without_passes_is_unavailable():
    bus = MetricBus()
    metric = FinalTestAccuracy()
    metric.attach(bus)
    bus.publish(f"{TEST_PASS}.end", loss=0.3)
    assert metric.result()["unavailable"] == "1 test.pass events carried no accuracy"


# -- loss curve --------------------------------------------------------------


def test_loss_curve_keeps_every_point_and_the_test_curve():
    bus = MetricBus()
    metric = LossCurve()
    metric.attach(bus)
    for loss in (2.0, 1.5):
        bus.publish(f"{TRAIN_STEP}.end", loss=loss)
    bus.publish(f"{TRAIN_EPOCH}.end")
    bus.publish(f"{TEST_PASS}.end", loss=1.4, correct=3, count=4)
    bus.publish(f"{TRAIN_STEP}.end", loss=1.0)
    out = metric.result()
    assert out["curve"] == [[0, 0, 2.0], [1, 0, 1.5], [2, 1, 1.0]]
    assert out["test_curve"] == [[1, 0, 1.4, 0.75]]
    assert (out["value"], out["status"], out["diverged"]) == (1.0, "ok", False)
    json.dumps(out, allow_nan=False)


def test_loss_curve_flags_divergence_as_a_result():
    bus = MetricBus()
    metric = LossCurve()
    metric.attach(bus)
    bus.publish(f"{TRAIN_STEP}.end", loss=0.9, step=10, epoch=3)
    bus.publish(f"{TRAIN_STEP}.end", loss=float("inf"), step=11, epoch=3)
    bus.publish(f"{TRAIN_STEP}.end", loss=float("nan"), step=12, epoch=3)
    out = metric.result()
    assert out["status"] == "diverged"
    assert out["diverged_at"] == {"in": "train", "step": 11, "epoch": 3, "loss": "inf"}
    assert out["value"] is None
    assert out["curve"][-1] == [12, 3, "nan"]
    json.dumps(out, allow_nan=False)


# -- communication volume ------------------------------------------------------


def test_communication_volume_sums_bytes_per_rank_and_per_op():
    bus = MetricBus()
    metric = CommunicationVolume(rank=1)
    metric.attach(bus)
    bus.publish(COMM_CALL, op="allreduce", bytes_sent=100, bytes_received=100)
    bus.publish(COMM_CALL, op="allreduce", bytes_sent=100, bytes_received=100)
    bus.publish(f"{COMM_CALL}.end", op="broadcast", bytes_sent=0, bytes_received=40)
    bus.publish(f"{COMM_CALL}.begin", op="broadcast", bytes_sent=0, bytes_received=40)
    bus.publish(COMM_CALL, op="send", rank=3, bytes_sent=7, bytes_received=0)
    out = metric.result()
    assert out["value"] == 447
    assert (out["bytes_sent"], out["bytes_received"], out["calls"]) == (207, 240, 4)
    assert out["per_rank"] == {
        "1": {"calls": 3, "bytes_sent": 200, "bytes_received": 240},
        "3": {"calls": 1, "bytes_sent": 7, "bytes_received": 0},
    }
    assert out["per_op"]["allreduce"] == {"calls": 2, "bytes_sent": 200, "bytes_received": 200}
    assert out["per_op"]["broadcast"] == {"calls": 1, "bytes_sent": 0, "bytes_received": 40}


def test_communication_volume_of_the_ranks_of_one_run_merges():
    ranks = []
    for rank in range(2):
        bus = MetricBus()
        metric = CommunicationVolume(rank=rank)
        metric.attach(bus)
        bus.publish(COMM_CALL, op="allreduce", bytes_sent=10, bytes_received=10)
        ranks.append(metric.result())
    merged = CommunicationVolume.combine(ranks)
    assert merged["value"] == 40
    assert sorted(merged["per_rank"]) == ["0", "1"]
    assert merged["per_op"]["allreduce"]["calls"] == 2


def test_communication_volume_counts_malformed_events_and_reports_none_seen():
    bus = MetricBus()
    metric = CommunicationVolume()
    metric.attach(bus)
    bus.publish(COMM_CALL, bytes_sent="lots")
    assert metric.result()["unavailable"] == "1 comm.call events had malformed byte counts"
