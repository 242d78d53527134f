"""Accuracy while timed, the engine's part: which timed samples keep what their last
call returned (:class:`OutputSample`).

The measurement engine keeps a reference to those values (nothing is copied or converted
inside the timed region); a job's builder gives the check that compares them with the
untimed outputs after timing (:attr:`d5core.measure.invocations.PreparedJob.check`;
d5's own checks are in :mod:`d5core.lv0.timed_accuracy`, ``docs/audit.md``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["DEFAULT_SAMPLED", "OutputSample"]

#: Timed samples whose output is kept and checked, by default.
DEFAULT_SAMPLED = 3


@dataclass
class OutputSample:
    """Which timed samples keep their last call's return value, and what they kept.

    ``positions`` are sample numbers (from 0) drawn before timing; the engine appends to
    ``outputs`` the value returned by the last call of each of those samples.
    """

    positions: frozenset[int]
    outputs: list[object] = field(default_factory=list)

    @classmethod
    def choose(cls, count: int, within: int, seed: int | None = None) -> OutputSample:
        """``count`` distinct positions among the first ``within`` samples (those every
        measurement takes); ``seed`` ``None`` draws from the system's entropy, so that a
        backend cannot predict which calls are looked at."""
        rng = random.Random(seed) if seed is not None else random.SystemRandom()
        size = max(0, min(count, within))
        return cls(frozenset(rng.sample(range(within), size)))
