"""The machine's noise floor: how much identical invocations of standard workloads vary.

``d5 calibrate`` runs three workloads (:mod:`d5core.measure.standard_jobs`), each bound by
a different resource, in several fresh worker processes
(:func:`d5core.measure.invocations.run_invocations`):

- ``gemm``: a 256×256 float64 matrix product (compute bound);
- ``copy``: a copy of a 64 MiB array (memory bound);
- ``pyloop``: a Python loop of 10⁵ iterations (interpreter bound).

The workers run with one thread per thread pool (:data:`CALIBRATION_ENV`), so that the
floor measures the machine and not the collapse of multi-threaded kernels whose threads
wait for cores held by other processes (:mod:`d5core.measure.fitness` warns of that).

**Definition.** The noise floor of a workload is ``exp(σ̂) − 1``, where ``σ̂`` is the
spread of the logarithms of its process medians, estimated robustly by Shamos's
estimator: the median of ``|log mᵢ − log mⱼ|`` over all pairs of processes, divided by
``√2 · Φ⁻¹(3/4) ≈ 0.954`` (so that it estimates the standard deviation of normal data,
with a breakdown point of 29%: one disturbed process in six does not move it). It is the
relative standard deviation of one invocation's median around the machine's typical
figure. The machine's floor is the largest of the three: a comparison does not know
which resource its code is bound by.

The result is stored in the results store as a run of kind ``"calibration"`` named after
the machine's fingerprint (:func:`machine_fingerprint`: CPU model, logical cores, memory,
host name). :func:`noise_floor` reads the latest one back; :func:`ensure_noise_floor`
runs a brief calibration when a machine has none, or only one older than
:data:`DEFAULT_MAX_AGE_DAYS`. :func:`d5core.measure.nested.compare_nested` takes the floor
as its ``min_effect``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import socket
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import ArrayLike

from d5core.environment import THREAD_VARS
from d5core.errors import CheckFailed, UsageError
from d5core.measure.engine import MeasureOptions
from d5core.measure.fitness import assess, competition, snapshot
from d5core.measure.invocations import Invocations, Job, RoundRecord, run_invocations
from d5core.measure.nested import NestedSummary
from d5core.overrides import number_from_env

if TYPE_CHECKING:
    from d5core.results.store import ResultsStore, RunRecord

__all__ = [
    "BRIEF_OPTIONS",
    "BRIEF_PROCESSES",
    "CALIBRATION_ENV",
    "CALIBRATION_KIND",
    "CALIBRATION_OPTIONS",
    "CALIBRATION_PROCESSES",
    "DEFAULT_MAX_AGE_DAYS",
    "MIN_CALIBRATION_PROCESSES",
    "NOISE_FLOOR_ENV",
    "WORKLOADS",
    "Calibration",
    "NoiseFloor",
    "WorkloadNoise",
    "calibrate",
    "calibrate_into",
    "ensure_noise_floor",
    "machine_fingerprint",
    "machine_identity",
    "machine_identity_of",
    "noise_floor",
    "noise_floor_override",
    "shamos_log_spread",
    "store_calibration",
]

#: The kind of the runs that hold calibrations.
CALIBRATION_KIND = "calibration"
#: A stored calibration older than this many days is measured again by
#: :func:`ensure_noise_floor`: neighbours, kernels and firmware change on shared machines
#: from week to week, and a brief calibration costs a few seconds.
DEFAULT_MAX_AGE_DAYS = 7.0
#: Worker processes of ``d5 calibrate``, and of the brief automatic calibration.
CALIBRATION_PROCESSES = 10
BRIEF_PROCESSES = 5
#: Fewer processes give no usable spread (Shamos's estimator needs a few pairs).
MIN_CALIBRATION_PROCESSES = 3
#: The engine's options for each workload in each process.
CALIBRATION_OPTIONS = MeasureOptions(warmup=2, min_samples=10, time_budget_s=0.3)
BRIEF_OPTIONS = MeasureOptions(warmup=1, min_samples=6, time_budget_s=0.1)
#: Thread settings of the calibration's workers: one thread per thread pool, so that the
#: floor reflects the machine's noise and not threads of one kernel waiting for each other
#: on cores that other processes hold (a 256×256 GEMM with two OpenBLAS threads took
#: 30 ms instead of 0.4 ms in some processes on the project's loaded 2-core machine).
CALIBRATION_ENV: dict[str, str] = {var: "1" for var in THREAD_VARS}
#: The standard workloads (see the module docstring).
WORKLOADS: tuple[Job, ...] = (
    Job("gemm", {"n": 256, "dtype": "float64"}, name="gemm"),
    Job("copy", {"mib": 64}, name="copy"),
    Job("pyloop", {"iterations": 100_000}, name="pyloop"),
)
#: √2 · Φ⁻¹(3/4): the median of |X − Y| for X, Y independent standard normal.
_SHAMOS = math.sqrt(2.0) * 0.6744897501960817


def shamos_log_spread(process_medians: ArrayLike) -> float:
    """Shamos's robust estimate of the standard deviation of ``log(process_medians)``.

    :raises ValueError: for fewer than two values or a value that is not positive.
    """
    m = np.asarray(process_medians, dtype=float).ravel()
    if m.size < 2:
        raise ValueError("the spread between processes needs at least two processes")
    if not np.all(np.isfinite(m)) or np.any(m <= 0):
        raise ValueError("process medians must be positive finite numbers")
    logs = np.log(m)
    i, j = np.triu_indices(m.size, k=1)
    return float(np.median(np.abs(logs[i] - logs[j]))) / _SHAMOS


# -- the machine -----------------------------------------------------------------------------


def machine_identity() -> dict[str, Any]:
    """What identifies a machine for its noise floor: CPU model, cores, memory, host."""
    import psutil

    from d5core.environment import read_cpuinfo

    info = read_cpuinfo()
    return {
        "cpu_model": info.get("model name") or info.get("hardware") or info.get("cpu model"),
        "logical_cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / (1 << 30)),
        "hostname": socket.gethostname(),
    }


def machine_identity_of(environment: Mapping[str, Any]) -> dict[str, Any] | None:
    """:func:`machine_identity` as read from a run's stored environment
    (:func:`d5core.environment.capture_environment`); ``None`` when it lacks a part."""
    cpu, memory = environment.get("cpu"), environment.get("memory")
    hostname = environment.get("hostname")
    if not isinstance(cpu, Mapping) or not isinstance(memory, Mapping):
        return None
    total = memory.get("total_bytes")
    identity = {
        "cpu_model": cpu.get("model"),
        "logical_cores": cpu.get("logical_cores"),
        "memory_gib": round(total / (1 << 30)) if isinstance(total, int | float) else None,
        "hostname": hostname if isinstance(hostname, str) else None,
    }
    return None if any(v is None for v in identity.values()) else identity


def machine_fingerprint(identity: Mapping[str, Any] | None = None) -> str:
    """A 16-character hash of :func:`machine_identity` (or of ``identity``)."""
    data = json.dumps(
        dict(identity if identity is not None else machine_identity()), sort_keys=True
    )
    return hashlib.sha256(data.encode()).hexdigest()[:16]


# -- calibrating --------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkloadNoise:
    """One workload's calibration: its nested summary and noise floor (``None`` if it
    failed, with ``error`` saying why)."""

    name: str
    summary: NestedSummary | None
    floor: float | None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {
            "name": self.name,
            "summary": None if self.summary is None else self.summary.to_json(),
            "floor": self.floor,
            "error": self.error,
        }


@dataclass
class Calibration:
    """The outcome of :func:`calibrate`; ``run_id`` is set once it is stored."""

    fingerprint: str
    identity: dict[str, Any]
    brief: bool
    workloads: list[WorkloadNoise]
    machine_floor: float
    processes: int
    warnings: list[str]
    fitness: dict[str, Any]
    invocations: Invocations
    seed: int = 0
    run_id: str | None = None
    #: Why other work competed for the CPU while it ran (empty: the machine was quiet).
    #: Such a calibration measures the neighbours of the moment, not the machine: it is
    #: stored, and never used as the noise floor.
    busy: list[str] = field(default_factory=list)

    @property
    def floors(self) -> dict[str, float]:
        """Workload -> noise floor, for the workloads that worked."""
        return {w.name: w.floor for w in self.workloads if w.floor is not None}

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary (without raw samples)."""
        return {
            "fingerprint": self.fingerprint,
            "identity": self.identity,
            "brief": self.brief,
            "processes": self.processes,
            "machine_floor": self.machine_floor,
            "floors": self.floors,
            "workloads": [w.to_json() for w in self.workloads],
            "warnings": list(self.warnings),
            "busy": list(self.busy),
            "run_id": self.run_id,
            "seed": self.seed,
            "stopped_by": self.invocations.stopped_by,
            "elapsed_s": self.invocations.elapsed_s,
        }


def _workload_noise(job: Job, result: Any) -> WorkloadNoise:
    summary = result.summary
    if summary is None or summary.n_processes < 2:
        return WorkloadNoise(job.label, summary, None, result.error or "fewer than 2 processes")
    floor = math.expm1(shamos_log_spread(summary.process_medians))
    return WorkloadNoise(job.label, summary, floor, result.error)


def calibrate(
    *,
    processes: int = CALIBRATION_PROCESSES,
    brief: bool = False,
    seed: int = 0,
    cpus: Sequence[int] | None = None,
    on_process: Callable[[RoundRecord], None] | None = None,
) -> Calibration:
    """Measure the standard workloads in ``processes`` fresh processes; nothing is stored.

    :param brief: use the short per-process budget of the automatic calibration.
    :raises UsageError: for fewer than :data:`MIN_CALIBRATION_PROCESSES` processes.
    :raises CheckFailed: when every workload failed.
    """
    if processes < MIN_CALIBRATION_PROCESSES:
        raise UsageError(
            f"--processes must be at least {MIN_CALIBRATION_PROCESSES} for a calibration "
            f"(the spread between processes needs them), got {processes}"
        )
    identity = machine_identity()
    workers_env = {**os.environ, **CALIBRATION_ENV}  # what the workers run with
    before = snapshot(environ=workers_env)
    runs = run_invocations(
        WORKLOADS,
        processes=processes,
        options=BRIEF_OPTIONS if brief else CALIBRATION_OPTIONS,
        seed=seed,
        min_processes=processes,
        cpus=cpus,
        on_process=on_process,
        env=CALIBRATION_ENV,
    )
    after = snapshot(environ=workers_env)
    workloads = [_workload_noise(r.job, r) for r in runs.jobs]
    floors = [w.floor for w in workloads if w.floor is not None]
    if not floors:
        errors = "; ".join(f"{w.name}: {w.error}" for w in workloads)
        raise CheckFailed(f"the calibration failed: {errors}")
    return Calibration(
        fingerprint=machine_fingerprint(identity),
        identity=identity,
        brief=brief,
        workloads=workloads,
        machine_floor=max(floors),
        processes=len(runs.rounds),
        warnings=assess(before, after, len(cpus) if cpus else None),
        busy=competition(before, after, len(cpus) if cpus else None),
        fitness={"before": before.to_json(), "after": after.to_json()},
        invocations=runs,
        seed=seed,
    )


def calibrate_into(db: Any, **options: Any) -> Calibration:
    """Run :func:`calibrate` with ``options`` and store the result in the store at ``db``
    (the default store when ``None``): what ``d5 calibrate`` does."""
    from d5core.results.store import ResultsStore

    with ResultsStore.open(db) as store:
        store.require_writable()  # a store that cannot take it is refused before measuring
        result = calibrate(**options)
        store_calibration(store, result)
    return result


def store_calibration(store: ResultsStore, calibration: Calibration) -> str:
    """Store ``calibration`` as a run of kind :data:`CALIBRATION_KIND`; return its id.

    Every process's samples are a measurement ``time`` labelled with the workload, the
    process number and its pid; each floor is a metric ``noise_floor`` labelled with its
    workload (``"machine"`` for the machine's).
    """
    config = {
        "fingerprint": calibration.fingerprint,
        "identity": calibration.identity,
        "brief": calibration.brief,
        "processes": calibration.processes,
        "machine_floor": calibration.machine_floor,
        "floors": calibration.floors,
        "warnings": calibration.warnings,
        "busy": calibration.busy,
        "fitness": calibration.fitness,
        "options": calibration.invocations.options.to_json(),
        "env": calibration.invocations.env,
        "rounds": [r.to_json() for r in calibration.invocations.rounds],
    }
    name = f"machine {calibration.fingerprint}"
    with store.run(CALIBRATION_KIND, name, config=config, seed=calibration.seed) as run_id:
        for result in calibration.invocations.jobs:
            for run in result.runs:
                labels = {"workload": result.job.label, "process": run.round, "pid": run.pid}
                store.add_measurement(run_id, "time", run.measurement, labels=labels, unit="s")
        for w in calibration.workloads:
            if w.floor is not None:
                store.add_metric(
                    run_id,
                    "noise_floor",
                    w.floor,
                    labels={"workload": w.name},
                    unit="fraction",
                    better="lower",
                )
        store.add_metric(
            run_id,
            "noise_floor",
            calibration.machine_floor,
            labels={"workload": "machine"},
            unit="fraction",
            better="lower",
        )
    calibration.run_id = run_id
    return run_id


# -- reading it back ------------------------------------------------------------------------


@dataclass(frozen=True)
class NoiseFloor:
    """A stored calibration: the machine's floor and each workload's, and how old it is."""

    fingerprint: str
    machine_floor: float
    floors: dict[str, float]
    created: str
    run_id: str
    processes: int
    brief: bool
    warnings: list[str] = field(default_factory=list)
    #: Where the floor comes from: ``"calibration"``, :data:`NOISE_FLOOR_ENV`, or
    #: ``"default"`` (d5's default minimum effect, when the only recent calibration ran on
    #: a busy machine; :attr:`warnings` says so).
    source: str = "calibration"
    #: Why the calibration's machine was busy (see :attr:`Calibration.busy`).
    busy: list[str] = field(default_factory=list)

    @property
    def age_days(self) -> float:
        """Days since the calibration was stored."""
        created = datetime.fromisoformat(self.created)
        return (datetime.now(timezone.utc) - created).total_seconds() / 86400.0

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary, with :attr:`age_days`."""
        return {**asdict(self), "age_days": self.age_days}


def _from_run(run: RunRecord) -> NoiseFloor | None:
    cfg = run.config
    try:
        return NoiseFloor(
            fingerprint=str(cfg["fingerprint"]),
            machine_floor=float(cfg["machine_floor"]),
            floors={str(k): float(v) for k, v in dict(cfg.get("floors") or {}).items()},
            created=run.created,
            run_id=run.id,
            processes=int(cfg.get("processes", 0)),
            brief=bool(cfg.get("brief", False)),
            warnings=[str(w) for w in cfg.get("warnings") or []],
            busy=[str(w) for w in cfg.get("busy") or []],
        )
    except (KeyError, TypeError, ValueError):
        return None  # not a calibration this version of d5 wrote


def noise_floor(
    store: ResultsStore,
    fingerprint: str | None = None,
    max_age_days: float | None = DEFAULT_MAX_AGE_DAYS,
    *,
    include_busy: bool = False,
) -> NoiseFloor | None:
    """The newest complete calibration of the machine ``fingerprint`` (this one by
    default) in ``store``; ``None`` when there is none, or the newest is older than
    ``max_age_days`` (``None``: any age). Calibrations taken while other work competed
    for the CPU are passed over unless ``include_busy``."""
    wanted = fingerprint if fingerprint is not None else machine_fingerprint()
    for run in store.list_runs(kind=CALIBRATION_KIND):
        if run.status != "complete" or run.config.get("fingerprint") != wanted:
            continue
        found = _from_run(run)
        if found is None or (found.busy and not include_busy):
            continue
        if max_age_days is not None and found.age_days > max_age_days:
            return None
        return found
    return None


def _default_for(busy: NoiseFloor) -> NoiseFloor:
    """d5's default floor, standing in while the only recent calibration ran busy."""
    from d5core.measure.compare import DEFAULT_MIN_EFFECT

    return NoiseFloor(
        fingerprint=busy.fingerprint,
        machine_floor=DEFAULT_MIN_EFFECT,
        floors={},
        created=busy.created,
        run_id=busy.run_id,
        processes=busy.processes,
        brief=busy.brief,
        warnings=[
            f"calibration {busy.run_id} ran on a busy machine ({busy.busy[0]}), so it is "
            f"not used; d5's default of {DEFAULT_MIN_EFFECT:.0%} stands in until "
            "'d5 calibrate' runs on a quiet machine"
        ],
        source="default",
        busy=list(busy.busy),
    )


#: Environment variable that sets the machine's noise floor instead of a calibration
#: (a fraction, e.g. ``0.03``); test suites set it so that no test calibrates.
NOISE_FLOOR_ENV = "D5_NOISE_FLOOR"


def noise_floor_override(environ: Mapping[str, str] | None = None) -> float | None:
    """The floor :data:`NOISE_FLOOR_ENV` sets, or ``None`` when it is unset or empty.

    :raises UsageError: for a value that is not a number from 0 up to (not including) 1.
    """
    return number_from_env(
        NOISE_FLOOR_ENV,
        must_be="a fraction from 0 up to 1, such as 0.03 for 3%",
        unset_to="use this machine's calibration",
        accept=lambda value: 0.0 <= value < 1.0,
        environ=environ,
    )


def _overridden(value: float) -> NoiseFloor:
    return NoiseFloor(
        fingerprint=machine_fingerprint(),
        machine_floor=value,
        floors={},
        created=datetime.now(timezone.utc).isoformat(),
        run_id="",
        processes=0,
        brief=False,
        source=NOISE_FLOOR_ENV,
    )


def ensure_noise_floor(
    store: ResultsStore,
    *,
    max_age_days: float = DEFAULT_MAX_AGE_DAYS,
    processes: int = BRIEF_PROCESSES,
    cpus: Sequence[int] | None = None,
    on_status: Callable[[str], None] | None = None,
) -> NoiseFloor:
    """This machine's noise floor: the stored one, or a brief calibration run and stored
    now when the machine was never calibrated or its calibration is older than
    ``max_age_days``.

    :param on_status: told, in one line, when and why a calibration runs.
    :raises UsageError: for a bad :data:`NOISE_FLOOR_ENV`, which, when set, is the floor
        (nothing is read, run or stored).
    """
    override = noise_floor_override()
    if override is not None:
        return _overridden(override)
    fingerprint = machine_fingerprint()
    found = noise_floor(store, fingerprint, max_age_days, include_busy=True)
    if found is not None:
        quiet = found if not found.busy else noise_floor(store, fingerprint, max_age_days)
        return quiet if quiet is not None else _default_for(found)
    if on_status is not None:
        older = noise_floor(store, fingerprint, None)
        why = (
            "first time this machine is seen"
            if older is None
            else f"its calibration is {older.age_days:.0f} days old"
        )
        on_status(
            f"measuring this machine's noise floor ({why}): a brief calibration in "
            f"{processes} processes"
        )
    calibration = calibrate(processes=processes, brief=True, cpus=cpus)
    store_calibration(store, calibration)
    stored = noise_floor(store, fingerprint, None, include_busy=True)
    assert stored is not None  # just written
    return _default_for(stored) if stored.busy else stored
