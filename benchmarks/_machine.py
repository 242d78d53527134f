"""The line every benchmark prints about where it ran."""

from __future__ import annotations

import os
import platform

from d5core import __version__
from d5core.allocator import apply_allocator_policy
from d5core.environment import read_cpuinfo

__all__ = ["allocator", "cpu_model", "load", "machine"]


def cpu_model() -> str:
    return read_cpuinfo().get("model name") or platform.processor() or "unknown CPU"


def load() -> str:
    """The 1-minute load average: above the core count, other work competed for them."""
    try:
        return f"load average {os.getloadavg()[0]:.2f}"
    except OSError:
        return "load average unknown"


def allocator() -> str:
    """Apply d5's allocator policy in this process, as d5 does before it measures, and
    describe it (``allocator steady (glibc 2.36)``). Benchmarks that time their own
    loops call it first: every side then allocates under the policy d5 runs with."""
    settings = apply_allocator_policy()
    return f"allocator {settings['policy']} ({settings['library']})"


def machine() -> str:
    """The machine, the Python, d5's version and the allocator policy (applied here)."""
    return (
        f"{cpu_model()}, {os.cpu_count()} cores, {platform.machine()}, "
        f"Python {platform.python_version()}, d5core {__version__}, {allocator()}"
    )
