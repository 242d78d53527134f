"""The line every benchmark prints about where it ran."""

from __future__ import annotations

import os
import platform

from d5core import __version__
from d5core.environment import read_cpuinfo

__all__ = ["cpu_model", "load", "machine"]


def cpu_model() -> str:
    return read_cpuinfo().get("model name") or platform.processor() or "unknown CPU"


def load() -> str:
    """The 1-minute load average: above the core count, other work competed for them."""
    try:
        return f"load average {os.getloadavg()[0]:.2f}"
    except OSError:
        return "load average unknown"


def machine() -> str:
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}, d5core {__version__}"
    )
