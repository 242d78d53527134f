"""Selecting installed metrics by name: a recipe's METRICS and ``d5 run --metric``.

Every entry of the ``d5.metrics`` group, d5's own and every plugin's, can be selected by
its entry-point name. A selected metric is a class built with its options as keyword
arguments (``cls(**options)``) and attached to the run's bus; the ``value`` of its
:meth:`~d5core.levels.metrics.Metric.result` is what a threshold checks and what the run
stores. Mistakes are refused here with a one-line :class:`~d5core.errors.UsageError`
naming the metric and the option, before any training starts.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from typing import Any

from d5core.errors import UsageError
from d5core.levels.metrics import Metric

__all__ = [
    "METRICS_GROUP",
    "check_options",
    "installed_metrics",
    "make_metric",
    "metric_class",
    "value_of",
]

#: The entry-point group metrics are selected from.
METRICS_GROUP = "d5.metrics"


def installed_metrics() -> list[str]:
    """The names of the usable metrics installed in ``d5.metrics``, sorted."""
    from d5core.plugins import get_plugin_manager

    return get_plugin_manager().names(METRICS_GROUP)


def metric_class(name: str, where: str) -> type[Metric]:
    """Load the metric class ``name`` from ``d5.metrics``.

    :param where: how the messages name the selection (``"recipe r: metric x"``).
    :raises UsageError: when the entry fails to load, is not a
        :class:`~d5core.levels.metrics.Metric` subclass, or declares a ``name`` other than
        the one it is registered under (results are stored under that name).
    """
    from d5core.errors import PluginError
    from d5core.plugins import get_plugin_manager

    try:
        cls = get_plugin_manager().load(METRICS_GROUP, name)
    except PluginError as exc:
        raise UsageError(f"{where}: {exc}") from None
    if not (isinstance(cls, type) and issubclass(cls, Metric)):
        raise UsageError(
            f"{where}: the d5.metrics entry {name!r} is {cls!r}, not a Metric subclass; "
            "fix the plugin's entry point"
        )
    if cls.name != name:
        raise UsageError(
            f"{where}: the metric class {cls.__qualname__} declares name {cls.name!r} but is "
            f"registered as {name!r}; its plugin must give both the same name"
        )
    return cls


def _signature(cls: type[Metric]) -> inspect.Signature | None:
    try:
        return inspect.signature(cls)
    except (TypeError, ValueError):  # a constructor inspect cannot read: accept any option
        return None


def check_options(cls: type[Metric], options: Mapping[str, Any], where: str) -> None:
    """Refuse options ``cls``'s constructor does not take, and required ones left out.

    :raises UsageError: naming the option and the options the metric takes.
    """
    signature = _signature(cls)
    if signature is None:
        return
    params = signature.parameters.values()
    named = [
        p
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    takes = ", ".join(p.name for p in named) or "none"
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        for option in options:
            if option not in {p.name for p in named}:
                raise UsageError(f"{where} has no option {option!r}; its options: {takes}")
    for p in named:
        if p.default is inspect.Parameter.empty and p.name not in options:
            raise UsageError(
                f"{where} needs the option {p.name!r} (its options: {takes}); give it in "
                f"the recipe's METRICS: {cls.name} = {{ options = {{ {p.name} = ... }} }}"
            )


def make_metric(name: str, options: Mapping[str, Any], where: str) -> Metric:
    """Build the installed metric ``name`` with ``options`` as keyword arguments.

    :param where: how the messages name the selection (``"recipe r: metric x"``).
    :raises UsageError: for a metric that does not load, an option it does not take, a
        required option left out, or a value its constructor refuses.
    """
    cls = metric_class(name, where)
    check_options(cls, options, where)
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        given = ", ".join(f"{k}={v!r}" for k, v in options.items()) or "no options"
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise UsageError(f"{where} refuses its options ({given}): {text}") from None


def value_of(result: Mapping[str, Any] | None) -> float | None:
    """The ``value`` of a metric's result as a float; ``None`` when it has none (an
    ``unavailable`` result), or it is not a finite number."""
    value = (result or {}).get("value")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
