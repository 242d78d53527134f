"""CPU utilisation of the process over the run."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, ClassVar

from d5core.levels.metrics import Metric, MetricResult
from d5core.metrics._common import RUN_END, RUN_START, finish, one_line

__all__ = ["CPUUtilization", "available_cores", "process_cpu_seconds"]


def process_cpu_seconds() -> float:
    """User plus system CPU seconds of this process (all threads) and its reaped children."""
    import psutil

    t = psutil.Process().cpu_times()
    return float(
        t.user + t.system + getattr(t, "children_user", 0.0) + getattr(t, "children_system", 0.0)
    )


def available_cores() -> int:
    """Logical cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        import psutil

        return int(psutil.cpu_count(logical=True) or 1)


class CPUUtilization(Metric):
    """Process CPU time over wall time, from attach (or ``run.start``) to ``run.end``.

    ``value`` is the percentage of the available cores kept busy:
    ``100 · cpu_seconds / (wall_seconds · cores)``; ``busy_cores`` is
    ``cpu_seconds / wall_seconds`` (1.0 = one core fully busy).

    :param cpu_seconds: the CPU-time source, :func:`process_cpu_seconds` by default.
    :param clock_ns: the wall clock, :func:`time.perf_counter_ns` by default.
    :param cores: the number of cores, :func:`available_cores` by default.
    """

    name: ClassVar[str] = "cpu_utilization"
    unit: ClassVar[str] = "%"
    better: ClassVar[str] = "higher"

    def __init__(
        self,
        *,
        cpu_seconds: Callable[[], float] | None = None,
        clock_ns: Callable[[], int] | None = None,
        cores: int | None = None,
    ) -> None:
        self._cpu = cpu_seconds or process_cpu_seconds
        self._clock = clock_ns or time.perf_counter_ns
        self._cores = cores
        self._start: tuple[float, int] | None = None
        self._stop: tuple[float, int] | None = None
        self._error: str | None = None

    def attach(self, bus: Any) -> None:
        self.start()
        self.listen(bus, RUN_START, lambda _ev: self.start())
        self.listen(bus, RUN_END, lambda _ev: self.stop())

    def _read(self) -> tuple[float, int] | None:
        try:
            return float(self._cpu()), int(self._clock())
        except Exception as exc:
            self._error = f"reading the process CPU time raised {one_line(exc)}"
            return None

    def start(self) -> None:
        """Start (or restart) the measured interval now."""
        self._start, self._stop = self._read(), None

    def stop(self) -> None:
        """End the measured interval now; later results keep this end."""
        if self._start is not None and self._stop is None:
            self._stop = self._read()

    def result(self) -> MetricResult:
        if self._start is None:
            return finish(self, self.unavailable(self._error or "never started: attach it"))
        end = self._stop or self._read()
        if end is None:
            return finish(self, self.unavailable(self._error or "no CPU time"))
        cpu = end[0] - self._start[0]
        wall = (end[1] - self._start[1]) / 1e9
        if wall <= 0:
            return finish(self, self.unavailable("no wall time elapsed between start and end"))
        try:
            cores = self._cores or available_cores()
        except Exception as exc:
            return finish(self, self.unavailable(f"counting cores raised {one_line(exc)}"))
        busy = cpu / wall
        out: MetricResult = {"value": 100.0 * busy / cores, "unit": self.unit}
        out.update(busy_cores=busy, cores=cores, cpu_seconds=cpu, wall_seconds=wall)
        out["stopped_by"] = "run.end" if self._stop is not None else "result"
        return finish(self, out)
