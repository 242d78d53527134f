"""Interfaces of metrics: things measured during a run and summarised after it."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

__all__ = ["Metric"]


class Metric(ABC):
    """A quantity measured while a benchmark runs; registered in ``d5.metrics``.

    A metric subscribes to the events it needs on the metric bus in :meth:`attach` and
    gives its summary in :meth:`result`.
    """

    #: The name recipes and the results store use for it.
    name: ClassVar[str] = ""
    #: The unit of its values, for example ``"s"`` or ``"samples/s"``.
    unit: ClassVar[str] = ""
    #: ``"lower"`` or ``"higher"``: which direction is better.
    better: ClassVar[str] = "lower"

    def attach(self, bus: Any) -> None:  # noqa: B027 - optional for metrics fed directly
        """Subscribe to the events this metric needs on ``bus``."""

    @abstractmethod
    def result(self) -> Any:
        """The metric's value or summary once the run ended."""
