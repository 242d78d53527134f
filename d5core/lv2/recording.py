"""Store a training run while it goes: its samples stream into its ``running`` run.

``d5 run`` begins its run in the results store before training and hands a
:class:`RunRecorder` to the trainer (``on_progress``). The recorder appends the new
samples of each curve (loss, step time, throughput, test accuracy) at every test pass and
at least every ``interval_s`` seconds, so a run killed at any moment keeps what it had
measured up to its last flush; the store reads it back as ``incomplete``. At the end,
:meth:`RunRecorder.finish` writes the rest, the scalar metrics and the final status.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

__all__ = ["METRIC_UNITS", "SERIES", "TTA_PART", "RunRecorder"]

#: Each stored curve: (measurement name, attribute of the curves, unit, finite only).
SERIES: tuple[tuple[str, str, str, bool], ...] = (
    ("loss", "losses", "loss", True),
    ("step_time", "step_times_s", "s", False),
    ("throughput", "throughput_samples_s", "samples/s", True),
    ("test_accuracy", "test_curve", "fraction", False),
    ("validation_perplexity", "test_curve", "perplexity", False),
)
#: The key each test-curve series reads from a test pass; a series whose key a pass
#: lacks stores nothing for it (perplexity: language models only).
_CURVE_KEYS = {"test_accuracy": "accuracy", "validation_perplexity": "perplexity"}
#: The metric holding each part of a time to accuracy (label ``part``; see
#: :data:`d5core.lv2.trainer.TTA_PARTS`).
TTA_PART = "time_to_accuracy_part"
#: Units of the scalar metrics :meth:`RunRecorder.finish` stores (others have none).
METRIC_UNITS: dict[str, str] = {
    "time_to_accuracy": "s",
    "time_to_perplexity": "s",
    "final_perplexity": "perplexity",
    "best_perplexity": "perplexity",
    "time_to_loss": "s",
    "time_to_target_training": "s",
    "eval_time": "s",
    "final_test_loss": "loss",
    "best_test_loss": "loss",
    "throughput": "samples/s",
    "wall_time": "s",
}


def _value(item: Any, key: str = "accuracy") -> float:
    """A curve entry as a number: a test pass gives its ``key`` (accuracy by default)."""
    return float(item[key]) if isinstance(item, Mapping) else float(item)


def _summary(values: Sequence[float]) -> Any:
    from d5core.measure.stats import summarize

    try:
        return summarize(list(values))
    except ValueError:
        return None


def _interrupted() -> str:
    """The status of a run stopped by the user: ``interrupted`` where the store has it."""
    from d5core.results.store import FINAL_STATUSES

    return "interrupted" if "interrupted" in FINAL_STATUSES else "incomplete"


class RunRecorder:
    """Streams a run's curves into the store as they grow.

    :param store: an open :class:`d5core.results.store.ResultsStore`.
    :param run_id: the ``running`` run to fill.
    :param interval_s: the longest time between two flushes while steps go on; every
        test pass is flushed at once.
    :param clock: the monotonic clock (seconds), for tests.
    """

    def __init__(
        self,
        store: Any,
        run_id: str,
        *,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.store, self.run_id, self.interval_s = store, run_id, interval_s
        self._clock = clock
        self._last = clock()
        self._tests = 0
        self._ids: dict[str, int] = {}
        self._taken = {name: 0 for name, *_ in SERIES}
        self._kept: dict[str, list[float]] = {name: [] for name, *_ in SERIES}

    def __call__(self, curves: Any) -> None:
        """The trainer's ``on_progress``: flush when a test pass came or it is time."""
        tests = len(curves.test_curve)
        if tests > self._tests or self._clock() - self._last >= self.interval_s:
            self.flush(curves)

    def _new(self, name: str, attr: str, finite: bool, curves: Any) -> list[float]:
        items = getattr(curves, attr)
        key = _CURVE_KEYS.get(name, "accuracy")
        fresh = [
            _value(v, key)
            for v in items[self._taken[name] :]
            if not isinstance(v, Mapping) or key in v
        ]
        self._taken[name] = len(items)
        return [v for v in fresh if math.isfinite(v)] if finite else fresh

    def flush(self, curves: Any) -> None:
        """Store every sample of ``curves`` not stored yet (one transaction for those
        appended to measurements that exist)."""
        appended: dict[int, list[float]] = {}
        for name, attr, unit, finite in SERIES:
            values = self._new(name, attr, finite, curves)
            if not values:
                continue
            self._kept[name] += values
            if name in self._ids:
                appended[self._ids[name]] = values
            else:
                self._ids[name] = self.store.add_measurement(self.run_id, name, values, unit=unit)
        if appended:
            summaries = {mid: _summary(self._kept[n]) for n, mid in self._ids.items()}
            self.store.append_samples(
                self.run_id, appended, summaries={m: summaries[m] for m in appended}
            )
        self._last = self._clock()
        self._tests = len(curves.test_curve)

    def finish(
        self,
        result: Any,
        values: Mapping[str, float | None],
        *,
        config: Mapping[str, Any] | None = None,
    ) -> None:
        """Store the rest of ``result``'s curves, its scalar ``values`` and ``config``
        keys known only now, then finish the run with the result's status."""
        self.flush(result)
        if config:
            self.store.update_config(self.run_id, config)
        for name, value in values.items():
            if value is not None and math.isfinite(value):
                self.store.add_metric(self.run_id, name, value, unit=METRIC_UNITS.get(name, ""))
        for part, seconds in getattr(result, "time_to_accuracy_parts", {}).items():
            self.store.add_metric(self.run_id, TTA_PART, seconds, labels={"part": part},
                                  unit="s", better="lower")  # fmt: skip
        error = None
        if result.status == "diverged" and result.diverged_at is not None:
            error = f"loss became {result.losses[-1]} at step {result.diverged_at['step']}"
        self.store.finish_run(self.run_id, result.status, error)

    def abort(self, curves: Any, exc: BaseException) -> None:
        """Store what ``curves`` hold and finish the run ``incomplete`` (Ctrl-C) or
        ``failed`` (an error), naming why (``interrupted`` instead of ``incomplete``
        where the store knows that status). A storage error here is swallowed: the
        exception that stopped the run is the one to report."""
        text = " ".join(str(exc).split())
        if isinstance(exc, KeyboardInterrupt):
            status, error = _interrupted(), "interrupted (Ctrl-C) before the run ended"
        else:
            status, error = (
                "failed",
                f"{type(exc).__name__}: {text}" if text else type(exc).__name__,
            )
        try:
            self.flush(curves)
            self.store.finish_run(self.run_id, status, error)
        except Exception:  # the store failing too: the run reads incomplete later
            pass
