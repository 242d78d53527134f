"""Energy from the RAPL counters of the Linux powercap interface."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from d5core.bus import MEASURE_SAMPLE, TEST_PASS, TRAIN_EPOCH, TRAIN_STEP
from d5core.levels.metrics import Metric, MetricResult
from d5core.metrics._common import RUN_END, RUN_START, finish, one_line

__all__ = ["Energy"]

#: Where Linux exposes power-capping zones.
POWERCAP_ROOT = Path("/sys/class/powercap")


@dataclass
class _Zone:
    """One RAPL zone and what has been accumulated from its counter."""

    directory: str
    label: str
    max_range_uj: int | None
    last_uj: int
    total_uj: int = 0
    wraps: int = 0
    problem: str | None = None

    @property
    def top_level(self) -> bool:
        return self.directory.count(":") == 1


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


def _why_unreadable(path: Path, exc: BaseException) -> str:
    why = f"{path} is not readable ({one_line(exc)})"
    if isinstance(exc, PermissionError):
        why += (
            "; since Linux 5.10 (CVE-2020-8694) energy_uj is readable by root only: run as "
            "root or make the counters readable (chmod a+r .../energy_uj)"
        )
    return why


class Energy(Metric):
    """Energy used by the CPU packages and DRAM during the run, from RAPL counters.

    Reads ``energy_uj`` of every ``intel-rapl:*`` zone under ``root`` when attached (or
    at ``run.start``), again at most every ``poll_s`` seconds on step, epoch, test and
    measurement events, and at ``run.end`` or when the result is asked for. A counter
    that went backwards wrapped: ``max_energy_range_uj`` is added. ``value`` sums the
    ``package-*`` zones and the ``dram`` zones (core/uncore are parts of a package and
    psys overlaps everything, so they are listed but not summed). Where the counters
    cannot be read the result is ``unavailable`` with the reason, never 0.

    :param root: the powercap directory, ``/sys/class/powercap`` by default.
    :param poll_s: the least interval between readings triggered by events; it must be
        shorter than the counter's wrap time (minutes at full power).
    :param clock_ns: the wall clock, :func:`time.perf_counter_ns` by default.
    """

    name: ClassVar[str] = "energy"
    unit: ClassVar[str] = "J"
    better: ClassVar[str] = "lower"

    def __init__(
        self,
        *,
        root: str | Path = POWERCAP_ROOT,
        poll_s: float = 5.0,
        clock_ns: Callable[[], int] | None = None,
    ) -> None:
        self.root = Path(root)
        self.poll_ns = int(poll_s * 1e9)
        self._clock = clock_ns or time.perf_counter_ns
        self._zones: list[_Zone] = []
        self._unavailable: str | None = "never started: attach it or call start()"
        self._started_ns = 0
        self._last_ns = 0
        self._stopped_ns: int | None = None

    def attach(self, bus: Any) -> None:
        self.start()
        self.listen(bus, RUN_START, lambda _ev: self.start())
        self.listen(bus, RUN_END, lambda _ev: self.stop())
        for event in (
            f"{TRAIN_STEP}.end",
            f"{TRAIN_EPOCH}.end",
            f"{TEST_PASS}.end",
            MEASURE_SAMPLE,
        ):
            self.listen(bus, event, lambda _ev: self._maybe_sample())

    def start(self) -> None:
        """Read every zone's counter: the run's energy is counted from here."""
        self._zones, self._stopped_ns = [], None
        self._started_ns = self._last_ns = self._clock()
        try:
            dirs = sorted(p for p in self.root.glob("intel-rapl:*") if p.is_dir())
        except OSError as exc:
            self._unavailable = _why_unreadable(self.root, exc)
            return
        if not dirs:
            self._unavailable = (
                f"no RAPL zones (intel-rapl:*) under {self.root}: the CPU or kernel offers "
                f"no powercap RAPL driver, or this is a virtual machine or container"
            )
            return
        for d in dirs:
            try:
                start = _read_int(d / "energy_uj")
            except (OSError, ValueError) as exc:
                self._zones = []
                self._unavailable = _why_unreadable(d / "energy_uj", exc)
                return
            try:
                label = (d / "name").read_text().strip()
            except OSError:
                label = d.name
            try:
                max_range: int | None = _read_int(d / "max_energy_range_uj")
            except (OSError, ValueError):
                max_range = None
            self._zones.append(_Zone(d.name, label, max_range, start))
        self._unavailable = None

    def sample(self) -> None:
        """Read every counter now and add what each zone used since the last reading."""
        if self._unavailable is not None or self._stopped_ns is not None:
            return
        self._last_ns = self._clock()
        for zone in self._zones:
            if zone.problem:
                continue
            path = self.root / zone.directory / "energy_uj"
            try:
                now = _read_int(path)
            except (OSError, ValueError) as exc:
                zone.problem = _why_unreadable(path, exc)
                continue
            delta = now - zone.last_uj
            if delta < 0:
                if not zone.max_range_uj:
                    zone.problem = (
                        f"{path} went backwards and max_energy_range_uj is unknown, so the "
                        f"wrap cannot be corrected"
                    )
                    continue
                delta += zone.max_range_uj
                zone.wraps += 1
            zone.total_uj += delta
            zone.last_uj = now

    def _maybe_sample(self) -> None:
        if self._clock() - self._last_ns >= self.poll_ns:
            self.sample()

    def stop(self) -> None:
        """Take the last reading; later results keep it."""
        if self._stopped_ns is None:
            self.sample()
            self._stopped_ns = self._last_ns

    def _counted(self) -> list[_Zone]:
        summed = [
            z
            for z in self._zones
            if (z.top_level and z.label.startswith("package")) or z.label == "dram"
        ]
        return summed or [z for z in self._zones if z.top_level]

    def result(self) -> MetricResult:
        if self._unavailable is not None:
            return finish(self, self.unavailable(self._unavailable, root=str(self.root)))
        self.sample()
        counted = self._counted()
        broken = [z.problem for z in counted if z.problem]
        zones = {
            z.directory: {
                "name": z.label,
                "joules": z.total_uj / 1e6,
                "wraps": z.wraps,
                "counted": z in counted,
                **({"problem": z.problem} if z.problem else {}),
            }
            for z in self._zones
        }
        if broken or not counted:
            why = broken[0] if broken else "no zone could be counted"
            return finish(self, self.unavailable(why, root=str(self.root), zones=zones))
        joules = sum(z.total_uj for z in counted) / 1e6
        end_ns = self._last_ns if self._stopped_ns is None else self._stopped_ns
        seconds = (end_ns - self._started_ns) / 1e9
        out: MetricResult = {"value": joules, "unit": self.unit, "seconds": seconds}
        if seconds > 0:
            out["watts"] = joules / seconds
        out["counted"] = [z.label for z in counted]
        out["zones"] = zones
        out["caveat"] = "RAPL counts the whole package, including other processes"
        return finish(self, out)
