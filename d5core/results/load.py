"""The machine's load average when a run begins and when it ends.

Other work on the machine competes with a benchmark for its cores: the same command can
take many times longer, with samples that look just as stable. The load average (the
number of threads running or waiting for a core, averaged over 1, 5 and 15 minutes) is
the cheapest sign of such competition. The results store records it with every run, and
``d5 results show`` and ``compare`` flag runs measured on a busy machine, or on machines
whose load differed. Every table and report figure that shows a value of a busy run
marks it with :data:`BUSY_MARK` and explains the mark in a line (:data:`BUSY_LEGEND`);
:func:`was_busy` is the one test they all use.

Judgements use the 1-minute average divided by the number of logical cores:

- above :data:`HIGH_LOAD_PER_CORE` (1.0), more threads wanted a core than there were
  cores, so some waited, and timings may include the wait;
- two runs whose highest loads differ by more than :data:`LOAD_DIFFERENCE_PER_CORE`
  (half of the machine's cores) ran under different competition.

The load at the end of a run includes the run's own threads. Where ``os.getloadavg`` is
missing (Windows) the load is not recorded.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BUSY_LEGEND",
    "BUSY_MARK",
    "HIGH_LOAD_PER_CORE",
    "LOAD_DIFFERENCE_PER_CORE",
    "LoadAverage",
    "busy_note",
    "current_load",
    "load_difference",
    "peak_load_per_core",
    "run_load_warnings",
    "was_busy",
]

#: 1-minute load per logical core above which a run counts as measured on a busy machine.
HIGH_LOAD_PER_CORE = 1.0
#: Difference of the peak 1-minute load per core above which two runs' loads differed.
LOAD_DIFFERENCE_PER_CORE = 0.5
#: The mark a table puts beside a value measured on a busy machine.
BUSY_MARK = "BUSY"
#: The line under a table that shows :data:`BUSY_MARK`, saying what it means.
BUSY_LEGEND = (
    f"{BUSY_MARK}: measured on a busy machine (1-minute load above {HIGH_LOAD_PER_CORE:g} "
    "per core at the start or end of the run); the value may include waiting for a core, "
    "so measure it again on a quiet machine before trusting it"
)

@dataclass(frozen=True)
class LoadAverage:
    """The 1-, 5- and 15-minute load averages and the machine's logical core count."""

    one_min: float
    five_min: float
    fifteen_min: float
    cores: int

    @property
    def per_core(self) -> float:
        """The 1-minute load divided by the core count."""
        return self.one_min / max(self.cores, 1)

    def is_high(self) -> bool:
        """Whether the 1-minute load per core is above :data:`HIGH_LOAD_PER_CORE`."""
        return self.per_core > HIGH_LOAD_PER_CORE

    def describe(self) -> str:
        """``2.13, 1.80, 1.02 on 2 cores (1.07 per core)``."""
        return (
            f"{self.one_min:.2f}, {self.five_min:.2f}, {self.fifteen_min:.2f} on "
            f"{self.cores} cores ({self.per_core:.2f} per core)"
        )

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict (what the store keeps)."""
        return {
            "one_min": self.one_min,
            "five_min": self.five_min,
            "fifteen_min": self.fifteen_min,
            "cores": self.cores,
        }

    @classmethod
    def from_json(cls, data: Any) -> LoadAverage | None:
        """The load stored as :meth:`to_json`, or ``None`` for anything else."""
        if not isinstance(data, Mapping):
            return None
        try:
            one, five, fifteen = (float(data[k]) for k in ("one_min", "five_min", "fifteen_min"))
            cores = int(data["cores"])
        except (KeyError, TypeError, ValueError):
            return None
        if cores < 1 or not all(math.isfinite(v) and v >= 0 for v in (one, five, fifteen)):
            return None
        return cls(one, five, fifteen, cores)


def current_load() -> LoadAverage | None:
    """The load average now, or ``None`` where the system does not report one."""
    try:
        one, five, fifteen = os.getloadavg()
    except (AttributeError, OSError):
        return None
    return LoadAverage(float(one), float(five), float(fifteen), cores=os.cpu_count() or 1)


def peak_load_per_core(start: LoadAverage | None, end: LoadAverage | None) -> float | None:
    """The higher 1-minute load per core of a run's start and end (``None``: unrecorded)."""
    loads = [x.per_core for x in (start, end) if x is not None]
    return max(loads) if loads else None


def was_busy(start: LoadAverage | None, end: LoadAverage | None) -> bool:
    """Whether a run with these loads was measured on a busy machine (at its start or end);
    ``False`` when neither was recorded."""
    return any(x is not None and x.is_high() for x in (start, end))


def busy_note(run_id: str, start: LoadAverage | None, end: LoadAverage | None) -> str | None:
    """``run ID: the machine was busy: ...`` for a busy run (``None`` otherwise): the line
    a report figure carries for each busy run it draws."""
    found = run_load_warnings(start, end)
    return f"{BUSY_MARK} run {run_id}: {found[0]}" if found else None


def run_load_warnings(start: LoadAverage | None, end: LoadAverage | None) -> list[str]:
    """One line when a run was measured on a busy machine (at its start, end or both)."""
    busy = [(when, x) for when, x in (("start", start), ("end", end)) if x and x.is_high()]
    if not busy:
        return []
    loads = " and ".join(f"{x.one_min:.2f} at the {when}" for when, x in busy)
    cores = busy[0][1].cores
    peak = max(x.per_core for _, x in busy)
    return [
        f"the machine was busy: 1-minute load {loads} of the run, on {cores} cores (up to "
        f"{peak:.2f} per core, above {HIGH_LOAD_PER_CORE:g}); timings may include waiting "
        "for a core"
    ]


def load_difference(
    baseline: tuple[LoadAverage | None, LoadAverage | None],
    candidate: tuple[LoadAverage | None, LoadAverage | None],
) -> str | None:
    """A line saying how two runs' loads differed, when their peaks differ by more than
    :data:`LOAD_DIFFERENCE_PER_CORE` per core; ``None`` otherwise or when unrecorded."""
    a, b = peak_load_per_core(*baseline), peak_load_per_core(*candidate)
    if a is None or b is None or abs(a - b) <= LOAD_DIFFERENCE_PER_CORE:
        return None
    return (
        f"the machine's load differed: the baseline ran at up to {a:.2f} per core, the "
        f"candidate at up to {b:.2f} per core; differences may come from other work on "
        "the machine"
    )
