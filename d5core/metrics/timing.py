"""Time metrics: wall-clock durations of an event, latency percentiles, throughput."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np

from d5core.bus import TRAIN_STEP
from d5core.levels.metrics import Metric, MetricResult
from d5core.measure.stats import harmonic_mean, summarize
from d5core.metrics._common import (
    StepBlock,
    StepFeed,
    batch_size_of,
    block_size_of,
    completion_events,
    duration_s,
    finish,
    matches,
    payload_of,
)

__all__ = ["Latency", "Throughput", "WallclockTime"]


def _summary(samples: Sequence[float]) -> dict[str, Any] | str:
    """The measurement summary of ``samples`` as JSON, or why it could not be made."""
    try:
        summary: dict[str, Any] = summarize(list(samples)).to_json()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return summary


def _attach(
    metric: Metric,
    bus: Any,
    event: str,
    on_event: Callable[..., None],
    on_steps: Callable[[StepBlock], None] | None = None,
) -> None:
    """Subscribe ``on_event`` to the completions of ``event``: through the shared step
    feed for ``train.step`` (one subscriber for every per-step metric, ``on_steps``
    reading its blocks when not ``None``), else directly."""
    if event == TRAIN_STEP:
        StepFeed.of(bus).join(metric, on_event, on_steps=on_steps)
        return
    for name in completion_events(event):
        metric.listen(bus, name, on_event)


class _Durations(Metric):
    """Collects per-call durations of one event after skipping ``warmup`` occurrences.

    A ``measure.sample`` times ``block_size`` calls together; its duration is divided.
    """

    def __init__(
        self, event: str = TRAIN_STEP, *, warmup: int = 0, where: Mapping[str, Any] | None = None
    ) -> None:
        self.event, self.warmup = event, max(0, int(warmup))
        self.where = dict(where or {})
        self.samples: list[float] = []
        self.skipped_warmup = 0
        self.without_duration = 0

    def attach(self, bus: Any) -> None:
        # a block has no payload to match ``where`` against: such a metric reads events
        _attach(self, bus, self.event, self._on_event, None if self.where else self._on_steps)

    def _on_steps(self, block: StepBlock) -> None:
        for seconds in block.seconds:
            if self.skipped_warmup < self.warmup:
                self.skipped_warmup += 1
            else:
                self.samples.append(seconds)

    def _on_event(self, event: Any, _step: int = 0, _epoch: int = 0) -> None:
        payload = payload_of(event)
        if not matches(payload, self.where):
            return
        seconds = duration_s(event)
        if seconds is None:
            self.without_duration += 1
        elif self.skipped_warmup < self.warmup:
            self.skipped_warmup += 1
        else:
            self.samples.append(seconds / block_size_of(payload))

    def _none_reason(self) -> str:
        if self.without_duration:
            return f"{self.without_duration} {self.event!r} events carried no duration_ns"
        if self.skipped_warmup:
            return f"only the {self.skipped_warmup} warm-up {self.event!r} events were seen"
        return f"no {self.event!r} event with a duration was published"

    def _counts(self) -> dict[str, Any]:
        return {"event": self.event, "n": len(self.samples), "warmup_excluded": self.skipped_warmup}


class WallclockTime(_Durations):
    """Wall-clock durations of one span (``<event>.end``'s ``duration_ns``), summarised.

    ``value`` is the median in seconds; ``summary`` holds the full measurement summary
    (CI of the median, percentiles, outliers, normality, stability).

    :param event: the span or instant event to time; ``"train.step"`` by default.
    :param warmup: occurrences to exclude (and count) before samples are kept.
    :param where: payload values an event must have to count, e.g. ``{"name": "gemm"}``
        to time one measurement of ``measure.sample``.
    """

    name: ClassVar[str] = "wallclock_time"
    unit: ClassVar[str] = "s"
    better: ClassVar[str] = "lower"

    def result(self) -> MetricResult:
        if not self.samples:
            return finish(self, self.unavailable(self._none_reason(), **self._counts()))
        summary = _summary(self.samples)
        out: MetricResult = {"value": float(np.median(self.samples)), "unit": self.unit}
        out.update(self._counts())
        out["total"] = float(sum(self.samples))
        out["summary" if isinstance(summary, dict) else "summary_unavailable"] = summary
        return finish(self, out)


class Latency(_Durations):
    """Latency percentiles of one event's durations: p50, p90, p95 and p99 by default.

    Percentiles use the nearest-rank definition (numpy's ``inverted_cdf``): each is a
    latency some event actually had, never an interpolation. ``value`` is the
    ``headline`` percentile (p99, the tail latency, by default).

    :param event: the span or instant event whose durations are latencies.
    :param percentiles: the percentiles to report.
    :param headline: the percentile reported as ``value`` (added if not in ``percentiles``).
    :param warmup: occurrences to exclude before samples are kept.
    :param where: payload values an event must have to count.
    """

    name: ClassVar[str] = "latency"
    unit: ClassVar[str] = "s"
    better: ClassVar[str] = "lower"

    def __init__(
        self,
        event: str = TRAIN_STEP,
        *,
        percentiles: Sequence[float] = (50, 90, 95, 99),
        headline: float = 99,
        warmup: int = 0,
        where: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(event, warmup=warmup, where=where)
        self.percentiles = tuple(float(p) for p in percentiles)
        self.headline = float(headline)

    @staticmethod
    def _key(p: float) -> str:
        return f"p{p:g}"

    def result(self) -> MetricResult:
        if not self.samples:
            return finish(self, self.unavailable(self._none_reason(), **self._counts()))
        wanted = sorted(set(self.percentiles) | {self.headline})
        values = np.percentile(np.asarray(self.samples), wanted, method="inverted_cdf")
        table = {self._key(p): float(v) for p, v in zip(wanted, values, strict=True)}
        out: MetricResult = {"value": table[self._key(self.headline)], "unit": self.unit}
        out["headline"] = self._key(self.headline)
        out["percentiles"] = {self._key(p): table[self._key(p)] for p in self.percentiles}
        out.update(self._counts())
        if len(self.samples) < 100 and max(wanted) >= 99:
            out["caveat"] = f"p99 of {len(self.samples)} samples is close to the maximum"
        return finish(self, out)


class Throughput(Metric):
    """Samples per second, per step and aggregated by the harmonic mean.

    Each ``<event>.end`` (or instant ``<event>``) whose payload has a batch size
    (``batch_size``, ``samples`` or ``count``, else the ``batch_size`` given here) and
    ``duration_ns`` gives one rate ``batch · block_size / duration``. Rates are
    aggregated by the harmonic mean weighted by the samples behind each, which equals
    total samples / total time: the arithmetic mean of rates would let a fast step count
    as much as a slow one although it took less of the time, and so overstate throughput.

    :param event: the span or instant event of one step; ``"train.step"`` by default.
    :param batch_key: the payload key of the batch size, when not one of the usual keys.
    :param batch_size: the batch size of events whose payload has none.
    :param warmup: steps to exclude (and count) before rates are kept.
    :param where: payload values an event must have to count.
    """

    name: ClassVar[str] = "throughput"
    unit: ClassVar[str] = "samples/s"
    better: ClassVar[str] = "higher"

    def __init__(
        self,
        event: str = TRAIN_STEP,
        *,
        batch_key: str | None = None,
        batch_size: float | None = None,
        warmup: int = 0,
        where: Mapping[str, Any] | None = None,
    ) -> None:
        self.event, self.batch_key, self.warmup = event, batch_key, max(0, int(warmup))
        self.batch_size = batch_size
        self.where = dict(where or {})
        self.steps: list[tuple[float, float]] = []
        self.skipped_warmup = 0
        self.incomplete = 0

    def attach(self, bus: Any) -> None:
        # A block has each step's batch size but no payload to match ``where`` against
        # or to read another batch key from: such a metric reads events.
        blocks = not self.where and self.batch_key in (None, "batch_size", "count")
        _attach(self, bus, self.event, self._on_event, self._on_steps if blocks else None)

    def _on_steps(self, block: StepBlock) -> None:
        for size, seconds in zip(block.batch_sizes, block.seconds, strict=True):
            if seconds <= 0 or size < 0:
                self.incomplete += 1
            elif self.skipped_warmup < self.warmup:
                self.skipped_warmup += 1
            else:
                self.steps.append((float(size), seconds))

    def _on_event(self, event: Any, _step: int = 0, _epoch: int = 0) -> None:
        payload = payload_of(event)
        if self.where and not matches(payload, self.where):
            return
        ns = payload.get("duration_ns")
        # plain ints, as the trainer publishes them, need no checking (once per step)
        seconds = ns / 1e9 if type(ns) is int else duration_s(event)
        size = payload.get("batch_size") if self.batch_key is None else None
        if type(size) is int and size >= 0:
            batch: float | None = float(size)
        else:
            batch = batch_size_of(payload, self.batch_key)
        if batch is None:
            batch = self.batch_size
        if seconds is None or batch is None or seconds <= 0:
            self.incomplete += 1
        elif self.skipped_warmup < self.warmup:
            self.skipped_warmup += 1
        else:
            block = 1 if "block_size" not in payload else block_size_of(payload)
            self.steps.append((batch * block, seconds))

    def result(self) -> MetricResult:
        counts: dict[str, Any] = {
            "event": self.event,
            "warmup_excluded": self.skipped_warmup,
            "incomplete_events": self.incomplete,
        }
        if not self.steps:
            if self.incomplete:
                why = (
                    f"{self.incomplete} {self.event!r} events lacked a batch size or a "
                    f"positive duration_ns"
                )
            else:
                why = f"no {self.event!r} event with a batch size and a duration was published"
            return finish(self, self.unavailable(why, **counts))
        samples = [b for b, _ in self.steps]
        rates = [b / s for b, s in self.steps]
        seconds = sum(s for _, s in self.steps)
        try:
            value = harmonic_mean(rates, weights=samples) if sum(samples) else 0.0
        except ValueError as exc:
            return finish(self, self.unavailable(f"no harmonic mean: {exc}", **counts))
        out: MetricResult = {"value": value, "unit": self.unit}
        out.update(steps=len(self.steps), samples=sum(samples), seconds=seconds, **counts)
        out["aggregation"] = "harmonic mean of per-step rates weighted by samples"
        summary = _summary(rates)
        out["per_step" if isinstance(summary, dict) else "per_step_unavailable"] = summary
        return finish(self, out)

    @staticmethod
    def combine(results: Sequence[Mapping[str, Any]]) -> MetricResult:
        """Aggregate the results of several runs by the harmonic mean of their rates.

        Runs are weighted by their ``samples`` when every run has them (total samples
        over total time); otherwise the plain harmonic mean of ``value`` is used, which
        is right for runs over equal amounts of work. Results without a value are
        counted in ``left_out``.
        """
        usable = [
            r
            for r in results
            if isinstance(r.get("value"), int | float) and not isinstance(r.get("value"), bool)
        ]
        out: MetricResult = {
            "unit": Throughput.unit,
            "runs": len(usable),
            "left_out": len(results) - len(usable),
        }
        if not usable:
            return {"unavailable": "no run has a throughput value", **out}
        values = [float(r["value"]) for r in usable]
        weighted = all(isinstance(r.get("samples"), int | float) for r in usable)
        weights = [float(r["samples"]) for r in usable] if weighted else None
        try:
            out["value"] = harmonic_mean(values, weights=weights)
        except ValueError as exc:
            return {"unavailable": f"no harmonic mean: {exc}", **out}
        out["aggregation"] = "harmonic mean weighted by samples" if weighted else "harmonic mean"
        return out
