"""Peak memory: the process's peak resident set and each framework allocator's peak."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from d5core.levels.metrics import Metric, MetricResult
from d5core.metrics._common import RUN_START, finish, one_line

if TYPE_CHECKING:
    from d5core.plugins import PluginManager

__all__ = ["PeakMemory", "process_peak_rss"]


def process_peak_rss(proc_self: Path = Path("/proc/self")) -> tuple[int, str]:
    """The process's peak resident set in bytes and where it was read from.

    Linux's ``VmHWM`` in ``<proc_self>/status`` comes first (it honours resets);
    then ``getrusage``'s ``ru_maxrss`` (the peak since the process started), then
    psutil's ``peak_wset`` (Windows).

    :raises OSError: when no source is available.
    """
    try:
        for line in (proc_self / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                value, unit = line.split()[1:3]
                if unit.lower() == "kb":
                    return int(value) * 1024, "VmHWM"
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        # ru_maxrss is in kilobytes on Linux and the BSDs, in bytes on macOS.
        return int(maxrss) * (1 if sys.platform == "darwin" else 1024), "ru_maxrss"
    except (ImportError, OSError):
        pass
    import psutil

    info = psutil.Process().memory_info()
    peak = getattr(info, "peak_wset", None)
    if peak is None:
        raise OSError("no source of the peak resident set on this platform")
    return int(peak), "psutil.peak_wset"


class PeakMemory(Metric):
    """Peak memory of the run: process resident set and framework allocators, side by side.

    ``value`` is the process's peak resident set (``VmHWM`` on Linux). On attach and at
    ``run.start`` the peak is reset by writing ``5`` to ``/proc/self/clear_refs`` where
    the kernel permits it, so the value covers the run only; ``reset`` says whether that
    worked. Each plugin's allocator peak comes from the ``d5_memory_peak(device)`` hook
    (reset through ``d5_memory_reset_peak``) and is reported under ``allocators``.

    :param device: the device whose allocators are asked, ``"cpu"`` by default.
    :param manager: the plugin manager to call; the process-wide one by default.
    :param proc_self: the ``/proc/self`` directory to read (configurable for tests).
    """

    name: ClassVar[str] = "peak_memory"
    unit: ClassVar[str] = "B"
    better: ClassVar[str] = "lower"

    def __init__(
        self,
        device: str = "cpu",
        *,
        manager: PluginManager | None = None,
        proc_self: str | Path = "/proc/self",
    ) -> None:
        self.device = device
        self._manager = manager
        self.proc_self = Path(proc_self)
        self.reset_done = False
        self.reset_note = "the peak was not reset: it covers the whole process"
        self.reset_problems: list[str] = []

    def attach(self, bus: Any) -> None:
        self.reset()
        self.listen(bus, RUN_START, lambda _ev: self.reset())

    def _get_manager(self) -> PluginManager:
        if self._manager is None:
            from d5core.plugins import get_plugin_manager

            self._manager = get_plugin_manager()
        return self._manager

    def reset(self) -> None:
        """Reset the process peak (where permitted) and every allocator's peak."""
        try:
            (self.proc_self / "clear_refs").write_text("5")
        except OSError as exc:
            self.reset_done = False
            self.reset_note = (
                f"could not reset the peak through {self.proc_self / 'clear_refs'} "
                f"({one_line(exc)}): it covers the whole process"
            )
        else:
            self.reset_done = True
            self.reset_note = "reset through clear_refs when the run started"
        self.reset_problems = []
        try:
            outcomes = self._get_manager().call_each("d5_memory_reset_peak", device=self.device)
        except Exception as exc:
            self.reset_problems.append(f"calling d5_memory_reset_peak raised {one_line(exc)}")
            return
        for out in outcomes:
            if out.error is not None:
                self.reset_problems.append(
                    f"plugin {out.plugin!r} failed in d5_memory_reset_peak: {one_line(out.error)}"
                )

    def allocator_peaks(self) -> tuple[dict[str, int], list[str]]:
        """Peak bytes by allocator name from every plugin, and one-line problems."""
        peaks: dict[str, int] = {}
        problems: list[str] = []
        try:
            outcomes = self._get_manager().call_each("d5_memory_peak", device=self.device)
        except Exception as exc:
            return peaks, [f"calling d5_memory_peak raised {one_line(exc)}"]
        for out in outcomes:
            if out.error is not None:
                problems.append(
                    f"plugin {out.plugin!r} failed in d5_memory_peak: {one_line(out.error)}"
                )
                continue
            if out.result is None:
                continue
            if not isinstance(out.result, Mapping):
                problems.append(f"plugin {out.plugin!r} returned {out.result!r}, not a mapping")
                continue
            for allocator, value in out.result.items():
                if str(allocator) in peaks:
                    problems.append(f"allocator {allocator!r} reported twice; keeping the first")
                    continue
                try:
                    peaks[str(allocator)] = int(value)
                except (TypeError, ValueError):
                    problems.append(f"plugin {out.plugin!r} gave {allocator!r} = {value!r}")
        return peaks, problems

    def result(self) -> MetricResult:
        allocators, problems = self.allocator_peaks()
        problems = self.reset_problems + problems
        try:
            peak, source = process_peak_rss(self.proc_self)
        except Exception as exc:
            out = self.unavailable(f"no peak resident set: {one_line(exc)}")
        else:
            out = {"value": peak, "unit": self.unit, "source": source}
            out["reset"] = self.reset_done and source == "VmHWM"
            out["reset_note"] = self.reset_note
        out["device"] = self.device
        out["allocators"] = allocators
        if problems:
            out["allocator_problems"] = problems
        return finish(self, out)
