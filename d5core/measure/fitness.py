"""Is the machine fit to measure? Read its state before and after, and say what was wrong.

:func:`snapshot` reads, without changing anything:

- the load average (``/proc/loadavg``) and the logical cores (``/proc/stat``);
- the CPU time of the whole machine by kind (``/proc/stat``: busy, idle, steal) and the
  CPU time of this process and its descendants (``/proc/<pid>/stat``), so that two
  snapshots tell how much CPU *other* processes used in between;
- the frequency governor of each CPU and the turbo (boost) state, where Linux exposes
  them (``/sys/devices/system/cpu``);
- memory pressure (``/proc/pressure/memory``) and available memory (``/proc/meminfo``);
- the thread settings of the usual thread pools (environment variables, and what the
  framework plugins report through ``d5_thread_settings``: a framework is never
  imported for it; :func:`thread_settings`).

Every item that cannot be read is recorded in :attr:`MachineState.unavailable` with the
reason, never guessed. :func:`assess` turns a pair of snapshots into one-line warnings.
``docs/measurement.md`` lists the thresholds and a checklist for a quiet machine.

Frameworks compared side by side must run with the same number of threads, or the
comparison measures parallelism as well as implementations. :data:`THREAD_COUNT_SETTINGS`
says which setting is "the thread count" of each framework; :func:`thread_count` reads a
backend's from the settings its worker processes reported, and
:func:`thread_count_warning` flags backends whose counts differ.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from d5core.environment import THREAD_VARS
from d5core.results.load import HIGH_LOAD_PER_CORE, LoadAverage

__all__ = [
    "BLAS_THREAD_SETTING",
    "MEMORY_AVAILABLE_LIMIT",
    "MEMORY_PRESSURE_LIMIT",
    "OTHER_CPU_LIMIT",
    "STEAL_LIMIT",
    "THREAD_COUNT_SETTINGS",
    "THREAD_SETTINGS",
    "CpuTimes",
    "MachineState",
    "ThreadCount",
    "assess",
    "competition",
    "framework_of",
    "snapshot",
    "thread_count",
    "thread_count_warning",
    "thread_settings",
]

#: Share of the machine's CPU time other processes may use while measuring (10%).
OTHER_CPU_LIMIT = 0.10
#: Share of the CPU time the hypervisor may steal while measuring (2%).
STEAL_LIMIT = 0.02
#: ``some avg10`` of ``/proc/pressure/memory`` above which memory was under pressure (%).
MEMORY_PRESSURE_LIMIT = 1.0
#: Share of memory available below which the machine is short of memory (10%).
MEMORY_AVAILABLE_LIMIT = 0.10
#: Environment variables that size thread pools, beyond those the environment records.
THREAD_SETTINGS: tuple[str, ...] = (
    *THREAD_VARS,
    "BLIS_NUM_THREADS",
    "NUMBA_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "OMP_DYNAMIC",
    "MKL_DYNAMIC",
)
_GOVERNOR_OK = "performance"
#: "The thread count" of a framework: the threads one operator may run on (its intra-op
#: pool), read from this setting as the framework's plugin reports it through
#: ``d5_thread_settings``. Keyed by the framework's plugin (the name of its ``d5.hooks``
#: entry point; :func:`framework_of` finds it for a backend or an executor). A plugin
#: not named here declares its count by reporting the setting ``"<its name>.threads"``.
THREAD_COUNT_SETTINGS: dict[str, str] = {
    "torch": "torch.get_num_threads()",
    "tensorflow": "tf.config.threading.intra_op_parallelism_threads",
    "onnxruntime": "onnxruntime.SessionOptions.intra_op_num_threads",
    "native": "d5_kernels.omp_threads",
    "mxnet": "mxnet.omp_threads",
    "jax": "jax.intra_op_parallelism_threads",
}
#: The thread count of every other backend (numpy's, and those that compute with numpy):
#: the threads of numpy's BLAS, which this variable sets; unset, BLAS starts one thread
#: per usable core.
BLAS_THREAD_SETTING = "OMP_NUM_THREADS"


@dataclass(frozen=True)
class CpuTimes:
    """Cumulative CPU time of the whole machine in clock ticks (``/proc/stat``'s ``cpu``).

    ``busy`` is user + nice + system + irq + softirq; ``steal`` the time a hypervisor
    gave the virtual CPUs to others; ``total`` adds idle and iowait to both.
    """

    busy: int
    idle: int
    steal: int
    total: int


@dataclass(frozen=True)
class MachineState:
    """One reading of the machine (see the module docstring); JSON with :meth:`to_json`.

    ``own_ticks`` is the CPU time of the measuring process and its descendants (children
    already waited for included), in the same clock ticks as ``cpu``.
    """

    wall_time: float
    cores: int | None
    load: LoadAverage | None
    cpu: CpuTimes | None
    own_ticks: int | None
    governors: dict[str, list[int]] | None
    turbo: bool | None
    memory_pressure_avg10: float | None
    memory_available: float | None
    threads: dict[str, str | None]
    #: Item -> why it could not be read.
    unavailable: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary of every field."""
        data = asdict(self)
        data["load"] = None if self.load is None else self.load.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MachineState:
        """The state stored by :meth:`to_json`."""
        values = dict(data)
        values["load"] = LoadAverage.from_json(values.get("load"))
        cpu = values.get("cpu")
        values["cpu"] = None if cpu is None else CpuTimes(**cpu)
        return cls(**values)


# -- readers (each returns a value or raises OSError/ValueError with the reason) ------------


def _read(path: Path) -> str:
    return path.read_text(errors="replace")


def _cpu_lines(root: Path) -> tuple[CpuTimes, int]:
    """The machine's :class:`CpuTimes` and the number of ``cpuN`` lines in /proc/stat."""
    total_line, cores = None, 0
    for line in _read(root / "proc/stat").splitlines():
        if line.startswith("cpu "):
            total_line = line
        elif line.startswith("cpu") and line[3:4].isdigit():
            cores += 1
    if total_line is None:
        raise ValueError("/proc/stat has no 'cpu' line")
    v = [int(x) for x in total_line.split()[1:]] + [0] * 8
    user, nice, system, idle, iowait, irq, softirq, steal = v[:8]
    busy = user + nice + system + irq + softirq
    return CpuTimes(
        busy=busy, idle=idle + iowait, steal=steal, total=busy + idle + iowait + steal
    ), cores


def _load(root: Path, cores: int) -> LoadAverage:
    one, five, fifteen = (float(x) for x in _read(root / "proc/loadavg").split()[:3])
    return LoadAverage(one, five, fifteen, cores=max(cores, 1))


def _proc_stat(root: Path, pid: int) -> tuple[int, int]:
    """(parent pid, utime + stime + cutime + cstime) of ``pid``."""
    text = _read(root / f"proc/{pid}/stat")
    rest = text[text.rindex(")") + 2 :].split()  # the name may hold spaces and parens
    ppid = int(rest[1])
    ticks = sum(int(x) for x in rest[11:15])
    return ppid, ticks


def _tree_ticks(root: Path, pid: int) -> int:
    """CPU ticks of ``pid`` and every live descendant (children waited for included)."""
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in (root / "proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parents[int(entry.name)], ticks[int(entry.name)] = _proc_stat(root, int(entry.name))
        except (OSError, ValueError, IndexError):
            continue  # ended while we looked
    if pid not in ticks:
        raise ValueError(f"no /proc/{pid}/stat")
    total, frontier = 0, [pid]
    while frontier:
        current = frontier.pop()
        total += ticks.get(current, 0)
        frontier.extend(child for child, parent in parents.items() if parent == current)
    return total


def _governors(root: Path) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    base = root / "sys/devices/system/cpu"
    for path in sorted(base.glob("cpu[0-9]*/cpufreq/scaling_governor")):
        cpu = int(path.parent.parent.name[3:])
        found.setdefault(_read(path).strip(), []).append(cpu)
    if not found:
        raise ValueError(
            "no cpufreq/scaling_governor under /sys/devices/system/cpu (frequency scaling "
            "is not exposed, as in most virtual machines)"
        )
    return {k: sorted(v) for k, v in found.items()}


def _turbo(root: Path) -> bool:
    base = root / "sys/devices/system/cpu"
    no_turbo = base / "intel_pstate/no_turbo"
    if no_turbo.exists():
        return _read(no_turbo).strip() == "0"
    boost = base / "cpufreq/boost"
    if boost.exists():
        return _read(boost).strip() == "1"
    raise ValueError("neither intel_pstate/no_turbo nor cpufreq/boost is exposed")


def _memory_pressure(root: Path) -> float:
    for line in _read(root / "proc/pressure/memory").splitlines():
        if line.startswith("some "):
            fields = dict(item.split("=", 1) for item in line.split()[1:])
            return float(fields["avg10"])
    raise ValueError("/proc/pressure/memory has no 'some' line")


def _memory_available(root: Path) -> float:
    info: dict[str, int] = {}
    for line in _read(root / "proc/meminfo").splitlines():
        key, _, rest = line.partition(":")
        if rest.split():
            info[key] = int(rest.split()[0])
    if "MemTotal" not in info or "MemAvailable" not in info:
        raise ValueError("/proc/meminfo lacks MemTotal or MemAvailable")
    return info["MemAvailable"] / info["MemTotal"]


def thread_settings(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The thread environment variables (of ``environ``, ``os.environ`` by default), and
    the frameworks' own thread pools as their plugins report them (``d5_thread_settings``;
    a framework this process has not imported reports none)."""
    from d5core.plugins import get_plugin_manager

    environ = os.environ if environ is None else environ
    threads: dict[str, str | None] = {var: environ.get(var) for var in THREAD_SETTINGS}
    for found in get_plugin_manager().hook.d5_thread_settings():
        if isinstance(found, Mapping):
            threads.update({str(k): str(v) for k, v in found.items()})
    return threads


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    if isinstance(exc, FileNotFoundError) and exc.filename:
        text = f"{exc.filename} does not exist"
    return text or type(exc).__name__


def snapshot(
    root: str | os.PathLike[str] = "/",
    *,
    pid: int | None = None,
    environ: Mapping[str, str] | None = None,
) -> MachineState:
    """Read the machine's state now; see the module docstring.

    :param root: where ``/proc`` and ``/sys`` are found (tests pass a fake tree).
    :param pid: the measuring process, whose descendants count as its own; this process
        by default.
    :param environ: the environment whose thread settings are read; ``os.environ`` by
        default.
    """
    base = Path(root)
    unavailable: dict[str, str] = {}

    def attempt(item: str, reader: Any, *args: Any) -> Any:
        try:
            return reader(*args)
        except (OSError, ValueError, KeyError, IndexError) as exc:
            unavailable[item] = _reason(exc)
            return None

    stat = attempt("cpu", _cpu_lines, base)
    cpu, cores = (None, None) if stat is None else stat
    return MachineState(
        wall_time=time.time(),
        cores=cores,
        load=attempt("load", _load, base, cores or 1),
        cpu=cpu,
        own_ticks=attempt("own_ticks", _tree_ticks, base, os.getpid() if pid is None else pid),
        governors=attempt("governors", _governors, base),
        turbo=attempt("turbo", _turbo, base),
        memory_pressure_avg10=attempt("memory_pressure", _memory_pressure, base),
        memory_available=attempt("memory_available", _memory_available, base),
        threads=thread_settings(environ),
        unavailable=unavailable,
    )


# -- judging -------------------------------------------------------------------------------


def _cpu_ranges(cpus: Sequence[int]) -> str:
    return ",".join(str(c) for c in cpus)


def _other_cpu(before: MachineState, after: MachineState) -> tuple[float | None, float] | None:
    """(share of the CPU time used by other processes, share stolen) between two
    snapshots; the first is ``None`` when the own process tree could not be read."""
    if before.cpu is None or after.cpu is None:
        return None
    total = after.cpu.total - before.cpu.total
    if total <= 0:
        return None
    steal = (after.cpu.steal - before.cpu.steal) / total
    if before.own_ticks is None or after.own_ticks is None:
        return None, steal
    others = (after.cpu.busy - before.cpu.busy) - (after.own_ticks - before.own_ticks)
    return max(0.0, others / total), steal


def _load_warning(before: MachineState, after: MachineState, cores: int) -> list[str]:
    loads = [s.load for s in (before, after) if s.load is not None]
    high = [x for x in loads if x.one_min / max(cores, 1) > HIGH_LOAD_PER_CORE]
    if not high:
        return []
    worst = max(high, key=lambda x: x.one_min)
    return [
        f"load average {worst.one_min:.2f} on {cores} cores while measuring (above "
        f"{HIGH_LOAD_PER_CORE:g} per core): other work may have competed for the cores"
    ]


def _cpu_warnings(before: MachineState, after: MachineState, cores: int) -> list[str]:
    shares = _other_cpu(before, after)
    others, steal = (None, 0.0) if shares is None else shares
    out = _load_warning(before, after, cores) if others is None else []
    if others is not None and others > OTHER_CPU_LIMIT:
        load = (
            ""
            if after.load is None
            else f"load average {after.load.one_min:.2f} on {cores} cores: "
        )
        out.append(
            f"{load}other processes used {others:.0%} of the CPU while measuring (more than "
            f"{OTHER_CPU_LIMIT:.0%}); timings may include waiting for a core"
        )
    if steal > STEAL_LIMIT:
        out.append(
            f"the hypervisor stole {steal:.0%} of the CPU time while measuring (more than "
            f"{STEAL_LIMIT:.0%}): other virtual machines compete for these cores"
        )
    return out


def _frequency_warnings(state: MachineState) -> list[str]:
    out = []
    for governor, cpus in sorted((state.governors or {}).items()):
        if governor != _GOVERNOR_OK:
            out.append(
                f"CPU frequency governor is {governor!r} on CPUs {_cpu_ranges(cpus)}: the "
                f"clock speed follows the load; {_GOVERNOR_OK!r} keeps it steady"
            )
    if state.turbo:
        out.append(
            "turbo boost is on: the clock speed depends on temperature and on how many "
            "cores are busy, so it varies between runs"
        )
    return out


def _memory_warnings(state: MachineState) -> list[str]:
    out = []
    pressure = state.memory_pressure_avg10
    if pressure is not None and pressure > MEMORY_PRESSURE_LIMIT:
        out.append(
            f"memory pressure: processes waited for memory {pressure:.1f}% of the last 10 s "
            f"(more than {MEMORY_PRESSURE_LIMIT:g}%)"
        )
    available = state.memory_available
    if available is not None and available < MEMORY_AVAILABLE_LIMIT:
        out.append(
            f"only {available:.0%} of the memory is available (less than "
            f"{MEMORY_AVAILABLE_LIMIT:.0%}): the system may be reclaiming or swapping"
        )
    return out


def _thread_warnings(state: MachineState, cores: int, crowded: bool) -> list[str]:
    out = []
    pools = [state.threads.get(var) for var in THREAD_VARS]
    if crowded and cores > 1 and all(value is None for value in pools):
        out.append(
            "thread pools are not limited (OMP_NUM_THREADS, OPENBLAS_NUM_THREADS, "
            "MKL_NUM_THREADS unset) while other processes hold cores: a multi-threaded "
            "kernel can then run many times slower, its threads waiting for each other"
        )
    for name, value in state.threads.items():
        if value is not None and value.strip().isdigit() and int(value) > cores:
            out.append(
                f"{name}={value} asks for more threads than the {cores} cores: threads "
                "will share cores and wait for each other"
            )
    return out


def competition(before: MachineState, after: MachineState, cores: int | None = None) -> list[str]:
    """The warnings of :func:`assess` that say other work competed for the CPU between
    two snapshots (other processes, the load average where those cannot be read, steal
    time); empty when the cores were the measurement's own."""
    n = cores or after.cores or before.cores or os.cpu_count() or 1
    return _cpu_warnings(before, after, n)


def assess(before: MachineState, after: MachineState, cores: int | None = None) -> list[str]:
    """One-line warnings about what made the machine unfit between two snapshots.

    Checks, with the limits of this module: CPU used by other processes (or, when that
    cannot be read, the load average), steal time, frequency governor and turbo, memory
    pressure and available memory, and thread settings above the core count. Items that
    could not be read give no warning (they are in :attr:`MachineState.unavailable`).

    :param cores: the cores the measurement could use; the machine's by default.
    """
    n = cores or after.cores or before.cores or os.cpu_count() or 1
    warnings = _cpu_warnings(before, after, n)
    shares = _other_cpu(before, after)
    crowded = shares is not None and shares[0] is not None and shares[0] > OTHER_CPU_LIMIT
    warnings += _frequency_warnings(after)
    warnings += _memory_warnings(after)
    warnings += _thread_warnings(after, n, crowded)
    return warnings


# -- the thread counts of frameworks compared side by side ---------------------------------


def framework_of(group: str, name: str) -> str | None:
    """The framework plugin behind entry ``name`` of ``group`` (a backend of
    ``d5.operators``, an executor of ``d5.frameworks``): the name of the ``d5.hooks``
    entry of the distribution that provides it, the key of
    :data:`THREAD_COUNT_SETTINGS`; ``None`` for an unknown entry or one without hooks."""
    from packaging.utils import canonicalize_name

    from d5core.errors import PluginError
    from d5core.plugins import get_plugin_manager
    from d5core.plugins.groups import HOOKS_GROUP

    manager = get_plugin_manager()
    try:
        distribution = canonicalize_name(manager.record(group, name).distribution)
    except PluginError:
        return None
    hooks = sorted(
        r.name
        for r in manager.records
        if r.group == HOOKS_GROUP.name and canonicalize_name(r.distribution) == distribution
    )
    return hooks[0] if hooks else None


def _count(setting: str, reported: str | None, cores: int | None) -> int | None:
    """The threads ``reported`` means: a positive number as it is; ``0`` (the framework
    chooses) and an unset BLAS variable mean one thread per usable core (``cores``)."""
    value = (reported or "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    if value == "0" or (not value and setting == BLAS_THREAD_SETTING):
        return cores
    return None


@dataclass(frozen=True)
class ThreadCount:
    """The thread count one backend (or executor) ran with, in each worker process that
    measured it.

    ``setting`` is the setting read (:data:`THREAD_COUNT_SETTINGS` for its
    ``framework``, else :data:`BLAS_THREAD_SETTING`); ``reported`` its value as each
    process reported it (``None``: not reported, or the variable unset); ``per_process``
    the threads that value means there (``None``: unknown).
    """

    backend: str
    framework: str | None
    setting: str
    reported: tuple[str | None, ...]
    per_process: tuple[int | None, ...]

    @property
    def counts(self) -> list[int]:
        """The distinct known counts, smallest first (one, unless processes differed)."""
        return sorted({n for n in self.per_process if n is not None})

    @property
    def threads(self) -> int | None:
        """The count, when every process that reported one agrees; else ``None``."""
        counts = self.counts
        return counts[0] if len(counts) == 1 else None

    @property
    def amount(self) -> str:
        """``2 threads``, ``1 or 2 threads`` (processes differed), or ``an unknown number
        of threads``."""
        counts = self.counts
        if not counts:
            return "an unknown number of threads"
        return f"{' or '.join(map(str, counts))} thread{'' if counts == [1] else 's'}"

    @property
    def source(self) -> str:
        """Where the count comes from: the setting, and what an unset BLAS variable means."""
        if self.setting == BLAS_THREAD_SETTING and all(r is None for r in self.reported):
            return f"{self.setting} unset: one per usable core"
        if not self.counts:
            return f"{self.setting} not reported"
        return self.setting

    def describe(self) -> str:
        """``torch 2 threads (torch.get_num_threads())``."""
        return f"{self.backend} {self.amount} ({self.source})"

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary of every field, with ``threads``."""
        return {
            "backend": self.backend,
            "framework": self.framework,
            "setting": self.setting,
            "threads": self.threads,
            "reported": list(self.reported),
            "per_process": list(self.per_process),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ThreadCount:
        """The count stored by :meth:`to_json`."""
        return cls(
            backend=str(data["backend"]),
            framework=data.get("framework"),
            setting=str(data["setting"]),
            reported=tuple(data.get("reported") or ()),
            per_process=tuple(data.get("per_process") or ()),
        )


def thread_count(
    backend: str,
    framework: str | None,
    reports: Sequence[tuple[Mapping[str, str | None], int | None]],
) -> ThreadCount:
    """The thread count of ``backend``, whose framework plugin is ``framework``
    (:func:`framework_of`), from what each worker process that measured it reported:
    its :func:`thread_settings` after the backend's work, and the cores it could use."""
    setting = THREAD_COUNT_SETTINGS.get(framework or "")
    if setting is None:  # a plugin's own, declared by its name (d5_thread_settings)
        own = f"{framework}.threads"
        setting = own if any(own in found for found, _ in reports) else BLAS_THREAD_SETTING
    reported = tuple(settings.get(setting) for settings, _ in reports)
    return ThreadCount(
        backend=backend,
        framework=framework,
        setting=setting,
        reported=reported,
        per_process=tuple(
            _count(setting, value, cores)
            for value, (_, cores) in zip(reported, reports, strict=True)
        ),
    )


def thread_count_warning(counts: Sequence[ThreadCount]) -> str | None:
    """One line when the backends compared side by side ran with different thread
    counts, naming each count; ``None`` when they agree, or fewer than two are known."""
    known = [c for c in counts if c.counts]
    if len(known) < 2 or len({n for c in known for n in c.counts}) < 2:
        return None
    return (
        "the compared backends ran with different thread counts: "
        + ", ".join(c.describe() for c in known)
        + f"; their times differ in parallelism too (give {BLAS_THREAD_SETTING} one value "
        "for all)"
    )
