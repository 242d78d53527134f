"""Every metric in ``d5.metrics`` loads, is documented, and never crashes a run."""

from __future__ import annotations

import importlib.metadata as md
import json
from pathlib import Path

import pytest

from d5core.bus import MetricBus
from d5core.levels.metrics import Metric
from d5core.plugins import get_plugin_manager

EXPECTED = {
    "communication_volume",
    "cpu_utilization",
    "determinism",
    "energy",
    "final_perplexity",
    "final_test_accuracy",
    "latency",
    "loss_curve",
    "numerical_error",
    "peak_memory",
    "test_accuracy",
    "throughput",
    "time_to_accuracy",
    "time_to_loss",
    "time_to_perplexity",
    "training_accuracy",
    "validation_perplexity",
    "wallclock_time",
}

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def _core_metric_names() -> list[str]:
    return sorted(
        ep.name for ep in md.entry_points(group="d5.metrics") if ep.value.startswith("d5core.")
    )


def test_the_core_offers_every_builtin_metric():
    assert set(_core_metric_names()) == EXPECTED


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_metric_loads_by_name_as_a_documented_metric_subclass(name):
    cls = get_plugin_manager().load("d5.metrics", name)
    assert isinstance(cls, type) and issubclass(cls, Metric)
    assert cls.name == name
    assert cls.unit
    assert cls.better in ("lower", "higher")
    assert cls.__doc__ and len(cls.__doc__.strip()) > 40


def test_every_installed_metric_entry_loads_as_a_metric_with_a_docstring():
    manager = get_plugin_manager()
    names = manager.names("d5.metrics")
    assert set(names) >= EXPECTED
    for name in names:
        cls = manager.load("d5.metrics", name)
        assert isinstance(cls, type) and issubclass(cls, Metric), name
        assert cls.__doc__, name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_metric_on_an_empty_run_gives_json_with_a_unit_and_a_value_or_a_reason(name):
    metric = get_plugin_manager().load("d5.metrics", name)()
    metric.attach(MetricBus())
    out = metric.result()
    json.dumps(out, allow_nan=False)
    assert out["unit"] == metric.unit
    assert ("value" in out) != ("unavailable" in out)
    if "unavailable" in out:
        assert isinstance(out["unavailable"], str) and out["unavailable"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_metric_has_a_section_in_the_metrics_docs(name):
    assert f"## `{name}`" in DOCS.read_text()


class _Fragile(Metric):
    """A metric whose callback and result both fail, for the robustness tests."""

    name = "fragile"
    unit = "s"

    def attach(self, bus):
        self.listen(bus, "tick", self._on_tick)

    def _on_tick(self, event):
        raise KeyError("duration_ns")

    def result(self):
        raise ZeroDivisionError("no samples")


def test_a_failing_metric_callback_never_reaches_the_publisher():
    bus = MetricBus()
    metric = _Fragile()
    metric.attach(bus)
    bus.publish("tick")
    bus.publish("tick")
    assert metric.problems == ["handling 'tick' raised KeyError: 'duration_ns'"]


def test_safe_result_turns_a_failing_result_into_unavailable():
    metric = _Fragile()
    metric.attach(MetricBus())
    out = metric.safe_result()
    assert out == {
        "unavailable": "computing fragile raised ZeroDivisionError: no samples",
        "unit": "s",
    }


def test_detach_stops_the_metric_receiving_events():
    bus = MetricBus()
    metric = _Fragile()
    metric.attach(bus)
    metric.detach()
    bus.publish("tick")
    assert metric.problems == []
