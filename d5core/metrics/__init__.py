"""d5's built-in metrics, each a :class:`~d5core.levels.metrics.Metric` in ``d5.metrics``.

One module per family: :mod:`.timing` (wall-clock time, latency, throughput),
:mod:`.memory`, :mod:`.cpu`, :mod:`.energy`, :mod:`.numerical` and
:mod:`.determinism`; the levels bring their own (:mod:`d5core.lv2.metrics`: accuracy,
loss and perplexity; :mod:`d5core.lv3.communication_metric`). Recipes and
``d5 run --metric`` select them, and any plugin's, by entry-point name, which is each
class's ``name`` (snake_case)
(:mod:`.selection`); ``docs/metrics.md`` documents them.

Classes are imported from their module on first access, so that selecting one metric
does not import the others.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from d5core.metrics.cpu import CPUUtilization
    from d5core.metrics.determinism import Determinism
    from d5core.metrics.energy import Energy
    from d5core.metrics.memory import PeakMemory
    from d5core.metrics.numerical import NumericalError
    from d5core.metrics.timing import Latency, Throughput, WallclockTime

__all__ = [
    "CPUUtilization",
    "Determinism",
    "Energy",
    "Latency",
    "NumericalError",
    "PeakMemory",
    "Throughput",
    "WallclockTime",
]

_MODULES = {
    "CPUUtilization": "cpu",
    "Determinism": "determinism",
    "Energy": "energy",
    "Latency": "timing",
    "NumericalError": "numerical",
    "PeakMemory": "memory",
    "Throughput": "timing",
    "WallclockTime": "timing",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
