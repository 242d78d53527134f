"""The metric bus: delivery, isolation of failing subscribers, spans, installation."""

from __future__ import annotations

import time
from typing import Any

import pytest

from d5core.bus import (
    COMM_CALL,
    OP_FORWARD,
    TRAIN_STEP,
    Event,
    MetricBus,
    attach_plugins,
    get_bus,
    use_bus,
)
from d5core.hookspecs import hookimpl
from d5core.plugins import PluginManager, PluginWarning


def collect(bus: MetricBus, name: str) -> list[Event]:
    seen: list[Event] = []
    bus.subscribe(name, seen.append)
    return seen


def test_publish_without_subscribers_delivers_nothing_and_wants_nothing() -> None:
    bus = MetricBus()
    bus.publish(OP_FORWARD, x=1)
    assert not bus.wants(OP_FORWARD)
    assert bus.errors == []


def test_subscriber_receives_name_level_payload_and_a_clock_reading() -> None:
    bus = MetricBus()
    seen = collect(bus, COMM_CALL)
    before = time.perf_counter_ns()
    bus.publish(COMM_CALL, level=3, bytes_sent=10, bytes_received=20)
    after = time.perf_counter_ns()
    assert bus.wants(COMM_CALL)
    [event] = seen
    assert (event.name, event.level) == (COMM_CALL, 3)
    assert event.payload == {"bytes_sent": 10, "bytes_received": 20}
    assert before <= event.t_ns <= after


def test_payload_may_use_the_key_name() -> None:
    bus = MetricBus()
    seen = collect(bus, OP_FORWARD)
    bus.publish(OP_FORWARD, name="Conv")
    assert seen[0].payload == {"name": "Conv"}


def test_events_have_slots_not_dicts() -> None:
    assert not hasattr(Event("x", 0, 0, {}), "__dict__")


def test_only_subscribers_of_a_name_receive_its_events() -> None:
    bus = MetricBus()
    steps, forwards = collect(bus, TRAIN_STEP), collect(bus, OP_FORWARD)
    bus.publish(TRAIN_STEP)
    assert len(steps) == 1 and forwards == []


def test_unsubscribe_stops_delivery_and_is_idempotent() -> None:
    bus = MetricBus()
    seen: list[Event] = []
    unsubscribe = bus.subscribe(OP_FORWARD, seen.append)
    other = collect(bus, OP_FORWARD)
    bus.publish(OP_FORWARD)
    unsubscribe()
    unsubscribe()
    bus.publish(OP_FORWARD)
    assert len(seen) == 1 and len(other) == 2


def test_the_same_callback_subscribed_twice_is_called_twice_and_unsubscribed_once() -> None:
    bus = MetricBus()
    seen: list[Event] = []
    first = bus.subscribe(OP_FORWARD, seen.append)
    bus.subscribe(OP_FORWARD, seen.append)
    first()
    bus.publish(OP_FORWARD)
    assert len(seen) == 1


def test_subscribe_all_receives_every_event_until_unsubscribed() -> None:
    bus = MetricBus()
    everything: list[str] = []
    unsubscribe = bus.subscribe_all(lambda e: everything.append(e.name))
    assert bus.wants("anything.at.all")
    bus.publish(OP_FORWARD)
    bus.publish("custom")
    with bus.span(TRAIN_STEP):
        pass
    unsubscribe()
    bus.publish(OP_FORWARD)
    assert everything == [OP_FORWARD, "custom", "train.step.begin", "train.step.end"]
    assert not bus.wants(OP_FORWARD)


def test_failing_subscriber_breaks_neither_publisher_nor_others_and_is_reported_once() -> None:
    bus = MetricBus()

    def broken(event: Event) -> None:
        raise KeyError("no such metric")

    bus.subscribe(OP_FORWARD, broken)
    seen = collect(bus, OP_FORWARD)
    with pytest.warns(RuntimeWarning, match="no such metric") as warned:
        for _ in range(5):
            bus.publish(OP_FORWARD)
    assert len(warned) == 1
    assert len(seen) == 5
    [error] = bus.errors
    assert error.count == 5 and error.event == OP_FORWARD
    assert "broken" in error.callback and "KeyError" in error.error


def test_span_publishes_begin_and_end_with_the_duration() -> None:
    bus = MetricBus()
    begins, ends = collect(bus, TRAIN_STEP + ".begin"), collect(bus, TRAIN_STEP + ".end")
    start = time.perf_counter_ns()
    with bus.span(TRAIN_STEP, level=2, batch_size=32) as span:
        time.sleep(0.01)
        span.set(loss=0.5)
    elapsed = time.perf_counter_ns() - start
    [begin], [end] = begins, ends
    assert begin.payload == {"batch_size": 32} and begin.level == 2
    assert end.payload["batch_size"] == 32 and end.payload["loss"] == 0.5
    assert 10_000_000 <= end.payload["duration_ns"] <= elapsed
    assert end.t_ns - begin.t_ns >= end.payload["duration_ns"]


def test_span_end_reports_the_error_and_the_exception_propagates() -> None:
    bus = MetricBus()
    ends = collect(bus, TRAIN_STEP + ".end")
    with pytest.raises(ZeroDivisionError), bus.span(TRAIN_STEP):
        1 / 0  # noqa: B018
    assert ends[0].payload["error"] == "ZeroDivisionError"


def test_span_with_only_an_end_subscriber_still_measures() -> None:
    bus = MetricBus()
    ends = collect(bus, OP_FORWARD + ".end")
    with bus.span(OP_FORWARD):
        pass
    assert len(ends) == 1 and ends[0].payload["duration_ns"] >= 0


def test_span_without_listeners_is_one_shared_do_nothing_object() -> None:
    bus = MetricBus()
    collect(bus, OP_FORWARD)  # an instant subscriber does not make the span live
    first, second = bus.span(TRAIN_STEP), bus.span(OP_FORWARD)
    assert first is second
    with first as span:
        span.set(ignored=True)


def test_use_bus_installs_a_fresh_bus_and_restores_the_previous_one() -> None:
    outer = get_bus()
    with use_bus() as bus:
        assert get_bus() is bus and bus is not outer
        mine = MetricBus()
        with use_bus(mine) as inner:
            assert inner is mine and get_bus() is mine
        assert get_bus() is bus
    assert get_bus() is outer


class _Subscriber:
    def __init__(self) -> None:
        self.events: list[Any] = []

    @hookimpl
    def d5_bus_subscribe(self, bus: MetricBus) -> None:
        bus.subscribe(OP_FORWARD, self.events.append)


class _Broken:
    @hookimpl
    def d5_bus_subscribe(self, bus: MetricBus) -> None:
        raise RuntimeError("cannot subscribe")


def test_attach_plugins_isolates_a_plugin_that_fails_to_subscribe() -> None:
    manager = PluginManager(discover_installed=False)
    good = _Subscriber()
    manager.register(good, "good")
    manager.register(_Broken(), "broken")
    bus = MetricBus()
    with pytest.warns(PluginWarning, match="'broken' failed in d5_bus_subscribe"):
        outcomes = attach_plugins(bus, manager)
    assert {o.plugin: o.error is None for o in outcomes} == {"good": True, "broken": False}
    bus.publish(OP_FORWARD)
    assert len(good.events) == 1


def test_attach_plugins_subscribes_each_plugin_once_per_bus() -> None:
    manager = PluginManager(discover_installed=False)
    good = _Subscriber()
    manager.register(good, "good")
    bus, other = MetricBus(), MetricBus()
    first = attach_plugins(bus, manager)
    assert attach_plugins(bus, manager) is first  # a run that starts again on its bus
    attach_plugins(other, manager)
    bus.publish(OP_FORWARD)
    other.publish(OP_FORWARD)
    assert len(good.events) == 2
