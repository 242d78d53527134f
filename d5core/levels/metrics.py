"""Interfaces of metrics: things measured during a run and summarised after it.

A metric never stops a run. Exceptions raised in its bus callbacks are caught and kept in
:attr:`Metric.problems`; :meth:`Metric.safe_result` turns a failing :meth:`Metric.result`
into ``{"unavailable": reason, "unit": ...}``. The built-in metrics live in
:mod:`d5core.metrics`; ``docs/metrics.md`` documents each one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar

from d5core.errors import one_line

__all__ = ["Metric", "MetricResult"]

#: What :meth:`Metric.result` returns: a JSON-serialisable mapping with ``"unit"`` and
#: either ``"value"`` or ``"unavailable"`` (the reason it could not be measured).
MetricResult = dict[str, Any]


class Metric(ABC):
    """A quantity measured while a benchmark runs; registered in ``d5.metrics``.

    A metric subscribes to the events it needs on the metric bus in :meth:`attach` and
    gives its summary in :meth:`result`. Subclasses subscribe through :meth:`listen` so
    that their callbacks cannot raise into measured code and :meth:`detach` can undo them.
    """

    #: The name recipes and the results store use for it.
    name: ClassVar[str] = ""
    #: The unit of its values, for example ``"s"`` or ``"samples/s"``.
    unit: ClassVar[str] = ""
    #: ``"lower"`` or ``"higher"``: which direction is better. ``d5 results compare``
    #: calls a change better or worse by it.
    better: ClassVar[str] = "lower"

    _unsubscribers: list[Callable[[], Any]]
    _problems: list[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.better not in ("lower", "higher"):
            raise TypeError(
                f"metric class {cls.__name__} declares better = {cls.better!r}; "
                "it must be 'lower' or 'higher'"
            )

    def attach(self, bus: Any) -> None:  # noqa: B027 - optional for metrics fed directly
        """Subscribe to the events this metric needs on ``bus``."""

    def detach(self) -> None:
        """Undo every subscription made through :meth:`listen`."""
        for unsubscribe in self.__dict__.pop("_unsubscribers", []):
            try:
                unsubscribe()
            except Exception as exc:
                self.problems.append(f"unsubscribing raised {one_line(exc)}")

    def listen(self, bus: Any, event: str, callback: Callable[[Any], None]) -> Callable[[], None]:
        """Subscribe ``callback`` to ``event`` on ``bus``, isolating its failures.

        An exception raised by ``callback`` is recorded in :attr:`problems` (once per
        distinct message) and never reaches the code that published the event.

        :return: a function that undoes this one subscription early (:meth:`detach`
            undoes it too; undoing twice is harmless).
        """

        def guarded(ev: Any) -> None:
            try:
                callback(ev)
            except Exception as exc:
                message = f"handling {event!r} raised {one_line(exc)}"
                if message not in self.problems:
                    self.problems.append(message)

        unsubscribe: Callable[[], None] = bus.subscribe(event, guarded)
        self.on_detach(unsubscribe)
        return unsubscribe

    def on_detach(self, undo: Callable[[], Any]) -> None:
        """Have :meth:`detach` call ``undo`` (for a subscription not made by :meth:`listen`)."""
        self.__dict__.setdefault("_unsubscribers", []).append(undo)

    @property
    def problems(self) -> list[str]:
        """One-line problems met while measuring (failed callbacks, bad payloads)."""
        problems: list[str] = self.__dict__.setdefault("_problems", [])
        return problems

    def unavailable(self, reason: str, **extra: Any) -> MetricResult:
        """The result of a metric that could not be measured, saying why."""
        return {"unavailable": reason, "unit": self.unit, **extra}

    @abstractmethod
    def result(self) -> Any:
        """The metric's value or summary once the run ended.

        Built-in metrics return a :data:`MetricResult`.
        """

    def safe_result(self) -> MetricResult:
        """:meth:`result`, never raising: failures become ``"unavailable"`` results.

        A non-mapping result is wrapped as ``{"value": ..., "unit": ...}``; recorded
        :attr:`problems` are added under ``"problems"``.
        """
        try:
            raw = self.result()
        except Exception as exc:
            out = self.unavailable(
                f"computing {self.name or type(self).__name__} raised {one_line(exc)}"
            )
        else:
            out = dict(raw) if isinstance(raw, dict) else {"value": raw, "unit": self.unit}
            out.setdefault("unit", self.unit)
        if self.problems:
            out["problems"] = list(self.problems)
        return out
