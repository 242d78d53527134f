"""The ``--trace LEVEL`` option, shared by every command that traces."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

__all__ = ["trace_option"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _trace_level(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    from d5core.errors import UsageError
    from d5core.tracing import TRACE_LEVELS

    if value is not None and value not in TRACE_LEVELS:
        raise UsageError(
            f"unknown trace level {value!r} for --trace: use one of {', '.join(TRACE_LEVELS)}"
        )
    return value


def trace_option(fn: _F) -> _F:
    """``--trace LEVEL``: trace the work (``step``, ``framework`` or ``full``), passed to
    the command as ``trace``; ``None`` when not given (tracing is off by default)."""
    option = click.option(
        "--trace",
        "trace",
        type=str,
        default=None,
        metavar="LEVEL",
        callback=_trace_level,
        help="Keep a trace with the run: step (d5's spans), framework (plus the "
        "frameworks' profilers) or full (plus process counters). Timed results never "
        "include it; the run is marked traced. Export it with d5 trace RUN.",
    )
    return option(fn)
