"""A metric, registered as ``template_slowest_step`` in ``d5.metrics``.

A metric subscribes to events of d5's metric bus in ``attach`` (through ``listen``, which
keeps a failing callback from reaching the measured code) and summarises them in
``result``. The events and their payloads are listed in ``d5core.bus``.
"""

from __future__ import annotations

from typing import Any

from d5core.api import END, TRAIN_STEP, Event, Metric, MetricResult

__all__ = ["SlowestStep"]


class SlowestStep(Metric):
    """The longest training step of a run, in seconds: a stall shows here while the
    mean hides it."""

    name = "template_slowest_step"
    unit = "s"
    better = "lower"

    def __init__(self) -> None:
        self.durations_ns: list[int] = []

    def attach(self, bus: Any) -> None:
        self.listen(bus, TRAIN_STEP + END, self._on_step_end)

    def _on_step_end(self, event: Event) -> None:
        self.durations_ns.append(int(event.payload["duration_ns"]))

    def result(self) -> MetricResult:
        if not self.durations_ns:
            return self.unavailable("no training step finished")
        return {
            "value": max(self.durations_ns) / 1e9,
            "unit": self.unit,
            "steps": len(self.durations_ns),
        }
