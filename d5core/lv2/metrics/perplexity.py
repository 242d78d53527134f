"""Perplexity metrics of language models: validation perplexity per test pass, the final
one, and the time until a target perplexity is first reached.

Perplexity is the exponential of the mean per-token cross-entropy (natural log) of a
test pass: the trainer's ``test.pass`` events carry it as ``perplexity`` (and the mean
loss as ``loss``). A pass that carries only ``loss`` counts with ``exp(loss)``, so any
publisher of a mean cross-entropy feeds these metrics. Lower is better; 1 is a perfect
model, and a uniform guess over ``V`` tokens scores ``V``.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from d5core.levels.metrics import MetricResult
from d5core.lv2.metrics.accuracy import TimeToAccuracy, _TestPasses
from d5core.metrics._common import payload_of

__all__ = [
    "PERPLEXITY_KEY",
    "FinalPerplexity",
    "TimeToPerplexity",
    "ValidationPerplexity",
    "perplexity_of_loss",
]

#: The payload key of a test pass's perplexity.
PERPLEXITY_KEY = "perplexity"
# math.exp overflows above this
_EXP_LIMIT = 709.0


def perplexity_of_loss(loss: float) -> float:
    """``exp(loss)`` for a mean cross-entropy in nats; ``inf`` where it overflows, NaN
    for a NaN loss."""
    if math.isnan(loss):
        return math.nan
    return math.exp(loss) if loss < _EXP_LIMIT else math.inf


def _with_perplexity(event: Any) -> Any:
    """``event``, or a stand-in whose payload has ``perplexity`` computed from ``loss``
    when the event carries only the loss."""
    payload = payload_of(event)
    if PERPLEXITY_KEY in payload:
        return event
    loss = payload.get("loss")
    if isinstance(loss, bool) or not isinstance(loss, int | float):
        return event
    return _Derived(event, {**payload, PERPLEXITY_KEY: perplexity_of_loss(float(loss))})


class _Derived:
    """An event with another payload (same name, time and duration)."""

    def __init__(self, event: Any, payload: dict[str, Any]) -> None:
        self._event = event
        self.payload = payload

    def __getattr__(self, name: str) -> Any:
        return getattr(self._event, name)


class _PerplexityPasses(_TestPasses):
    unit: ClassVar[str] = "perplexity"
    better: ClassVar[str] = "lower"

    def __init__(self) -> None:
        super().__init__(key=PERPLEXITY_KEY)

    def _on_test(self, event: Any) -> None:
        super()._on_test(_with_perplexity(event))


class ValidationPerplexity(_PerplexityPasses):
    """Validation perplexity of every test pass; ``value`` is the lowest.

    ``curve`` lists every pass (step, epoch, perplexity); ``final`` is the last one.
    """

    name: ClassVar[str] = "validation_perplexity"

    def result(self) -> MetricResult:
        return self._best_pass_result()


class FinalPerplexity(_PerplexityPasses):
    """Validation perplexity of the last test pass of the run."""

    name: ClassVar[str] = "final_perplexity"

    def result(self) -> MetricResult:
        return self._last_pass_result()


class TimeToPerplexity(TimeToAccuracy):
    """Wall time from the first touch of data until validation perplexity first falls
    to ``target`` or below: :class:`~d5core.lv2.metrics.accuracy.TimeToAccuracy` (MLPerf's
    clock) on the test passes' ``perplexity`` with ``mode="min"``.

    :param target: the perplexity to reach, for example ``4.0``.
    """

    name: ClassVar[str] = "time_to_perplexity"

    def __init__(self, target: float | None = None) -> None:
        super().__init__(target, key=PERPLEXITY_KEY, mode="min")

    def _on_test(self, event: Any) -> None:
        super()._on_test(_with_perplexity(event))
