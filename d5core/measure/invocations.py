"""Measuring in fresh worker processes: the invocation is the unit of independence.

A *job* is a small JSON-able spec (:class:`Job`): a kind and its arguments. The kind
names a builder, ``"module:function"``, that turns the arguments into the prepared
zero-argument callable to time (its inputs made beforehand); :func:`job_kinds` maps
short names to builders, and a kind may also be a ``"module:function"`` path itself.

:func:`run_invocations` runs *rounds*. Each round starts one fresh worker process
(``python -m d5core.measure._worker``: the jobs as JSON on its standard input, one JSON
line per result on its standard output) that runs every job of the round once, in an
order drawn at random for that round from the seed (a randomized block design: drifts of
the machine hit every job alike), each with the measurement engine
(:func:`d5core.measure.engine.measure`). Rounds continue until ``processes`` rounds ran,
or stop early once every job's between-process interval lies within ``rel_ci``.

A job that fails (its builder or its measurement raises, it kills the worker, or it
runs past its time limit and the worker is killed) is reported for that job with a
one-line error and left out of later rounds; the other jobs go on. A worker dies with
this process (SIGKILL included), and its time limit counts from its handshake (the
``start`` event), so a slow start on a busy machine costs no job its time.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import math
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import IO, Any

from d5core.errors import UsageError
from d5core.measure.audit import OutputSample
from d5core.measure.engine import Measurement, MeasureOptions
from d5core.measure.nested import NestedSummary, summarize_nested
from d5core.measure.stats import Summary
from d5core.worker_protocol import die_with_parent

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "PROTOCOL_VERSION",
    "START_TIMEOUT_S",
    "Invocations",
    "Job",
    "JobResult",
    "PreparedJob",
    "ProcessRun",
    "RoundRecord",
    "build_job",
    "check_cpus",
    "check_timeout",
    "default_timeout",
    "job_kinds",
    "job_target",
    "parse_cpus",
    "run_invocations",
]

#: Version of the JSON exchanged with the worker process.
PROTOCOL_VERSION = 1
_WORKER_MODULE = "d5core.measure._worker"
#: ``-P``: the worker imports d5 and the builders from where this process does, never from
#: a ``d5core`` folder that happens to lie in the working directory (Python 3.11+).
_SAFE_PATH: tuple[str, ...] = ("-P",) if sys.version_info >= (3, 11) else ()
#: Seconds a worker may take to start (its handshake, before any job): a hang guard, far
#: above the second or so an interpreter takes even on a loaded machine. A job's own time
#: limit starts at the handshake.
START_TIMEOUT_S = 300.0
#: A job's time limit when none is given (``--timeout``): this, plus twice the engine's
#: time budget (:func:`default_timeout`).
DEFAULT_TIMEOUT_S = 300.0
#: The most worker processes (rounds) one run may ask for.
MAX_PROCESSES = 10_000


# -- jobs ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    """What to measure: a kind (see :func:`job_kinds`), its arguments and a display name."""

    kind: str
    args: Mapping[str, Any] = field(default_factory=dict)
    name: str = ""

    @property
    def label(self) -> str:
        """The name, or the kind when there is none."""
        return self.name or self.kind

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary."""
        return {"kind": self.kind, "args": dict(self.args), "name": self.name}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Job:
        """The job stored by :meth:`to_json`."""
        return cls(
            kind=str(data["kind"]), args=dict(data.get("args") or {}), name=data.get("name") or ""
        )


@dataclass(frozen=True)
class PreparedJob:
    """What a builder may return instead of a bare callable: the callable to time, plus
    what runs before each sample outside the timed region (``setup``) and how to wait for
    a device (``synchronize``); see :func:`d5core.measure.engine.measure`."""

    fn: Callable[[], object]
    setup: Callable[[], object] | None = None
    synchronize: Callable[[], None] | None = None
    #: Stored with the measurement (:attr:`d5core.measure.engine.Measurement.details`).
    details: Mapping[str, Any] = field(default_factory=dict)
    #: Accuracy while timed: given what the last calls of a few randomly chosen timed
    #: samples returned (and which samples those were), says as a JSON-ready dict
    #: whether they equal the untimed outputs; ``failed`` true fails the measurement
    #: (``docs/audit.md``). ``None`` checks nothing.
    check: Callable[[OutputSample], Mapping[str, Any]] | None = None


def job_kinds() -> dict[str, str]:
    """Every registered job kind and its ``"module:function"`` builder, from the
    ``d5_worker_jobs`` hook (d5's own kinds come from its internal plugins)."""
    from d5core.plugins import get_plugin_manager

    return {str(k): str(v) for k, v in get_plugin_manager().merged("d5_worker_jobs").items()}


def job_target(kind: str, kinds: Mapping[str, str] | None = None) -> str:
    """The ``"module:function"`` builder of ``kind``.

    :param kinds: the registered kinds, when already read (:func:`job_kinds`).
    :raises UsageError: for a kind that is neither registered nor a ``module:function``.
    """
    module, sep, function = kind.partition(":")
    if sep and module and function.isidentifier():
        return kind
    kinds = job_kinds() if kinds is None else kinds
    if kind in kinds:
        return kinds[kind]
    known = ", ".join(sorted(kinds))
    raise UsageError(
        f"unknown job kind {kind!r}; use one of {known}, or a 'module:function' builder"
    )


def build_job(target: str, args: Mapping[str, Any]) -> PreparedJob:
    """Import the builder ``target`` and call it with ``args`` (in the worker process)."""
    module, _, function = target.partition(":")
    builder = getattr(importlib.import_module(module), function)
    made = builder(**args)
    if isinstance(made, PreparedJob):
        return made
    if not callable(made):
        raise TypeError(f"builder {target} returned {type(made).__name__}, not a callable")
    return PreparedJob(fn=made)


# -- results -------------------------------------------------------------------------------


@dataclass
class ProcessRun:
    """One job measured in one worker process.

    ``round`` is the process's number (from 0), ``position`` the job's place in that
    round's order (from 0) among ``round_size`` jobs, and ``measurement`` what the engine
    returned there (store it with
    :meth:`d5core.results.store.ResultsStore.add_measurement`). ``threads`` are the
    process's thread settings after the job (:func:`d5core.measure.fitness.thread_settings`),
    as the worker reported them.
    """

    job: int
    round: int
    pid: int
    position: int
    round_size: int
    measurement: Measurement
    threads: dict[str, str | None] = field(default_factory=dict)

    @property
    def samples(self) -> list[float]:
        """The measurement's samples (seconds per call)."""
        return self.measurement.samples

    def to_json(self) -> dict[str, Any]:
        """The placement fields and the measurement's :meth:`~Measurement.to_json`."""
        return {
            "job": self.job,
            "round": self.round,
            "pid": self.pid,
            "position": self.position,
            "round_size": self.round_size,
            "threads": dict(self.threads),
            **self.measurement.to_json(),
        }


@dataclass
class RoundRecord:
    """One worker process: which jobs it ran in which order, on which CPUs, and how."""

    index: int
    pid: int | None
    order: list[int]
    cpus: list[int] | None
    elapsed_s: float
    runs: list[ProcessRun] = field(default_factory=list)
    #: Job index -> one-line error, for jobs that failed in this round.
    failures: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary (runs without their samples)."""
        return {
            "index": self.index,
            "pid": self.pid,
            "order": list(self.order),
            "cpus": self.cpus,
            "elapsed_s": self.elapsed_s,
            "failures": {str(k): v for k, v in self.failures.items()},
        }


@dataclass
class JobResult:
    """A job's runs in every process, their nested summary, and its error if it failed."""

    job: Job
    runs: list[ProcessRun] = field(default_factory=list)
    error: str | None = None
    summary: NestedSummary | None = None

    @property
    def per_process(self) -> list[list[float]]:
        """The samples of each process, in round order."""
        return [r.samples for r in self.runs]

    def to_json(self, samples: bool = False) -> dict[str, Any]:
        """A JSON-ready dictionary; the raw samples of each run only when asked."""
        runs = []
        for r in self.runs:
            item = r.to_json()
            if not samples:
                del item["samples"]
            runs.append(item)
        return {
            "job": self.job.to_json(),
            "error": self.error,
            "summary": None if self.summary is None else self.summary.to_json(),
            "runs": runs,
        }


@dataclass
class Invocations:
    """The outcome of :func:`run_invocations`.

    ``stopped_by`` is ``"processes"`` (all rounds ran), ``"ci"`` (every job's
    between-process interval was within ``rel_ci``), ``"time_budget"`` or ``"failed"``
    (every job failed).
    """

    jobs: list[JobResult]
    rounds: list[RoundRecord]
    stopped_by: str
    seed: int
    options: MeasureOptions
    cpus: list[int] | None
    elapsed_s: float
    #: Environment variables set for the workers on top of this process's environment.
    env: dict[str, str] = field(default_factory=dict)

    def to_json(self, samples: bool = False) -> dict[str, Any]:
        """A JSON-ready dictionary of the whole; raw samples only when asked."""
        return {
            "jobs": [j.to_json(samples) for j in self.jobs],
            "rounds": [r.to_json() for r in self.rounds],
            "stopped_by": self.stopped_by,
            "seed": self.seed,
            "options": self.options.to_json(),
            "cpus": self.cpus,
            "env": dict(self.env),
            "elapsed_s": self.elapsed_s,
        }


# -- CPUs ----------------------------------------------------------------------------------


def _available_cpus() -> set[int] | None:
    getter = getattr(os, "sched_getaffinity", None)
    return None if getter is None else set(getter(0))


def parse_cpus(text: str) -> list[int]:
    """``"0,2-3"`` -> ``[0, 2, 3]``, checked against the CPUs this process may use.

    :raises UsageError: for a malformed list, a CPU not available, or a system that
        cannot pin processes.
    """
    cpus: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        first, dash, last = part.partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise UsageError(f"--cpus {text!r}: expected CPU numbers and ranges such as 0,2-3")
        lo, hi = int(first), int(last) if dash else int(first)
        if hi < lo:
            raise UsageError(f"--cpus {text!r}: the range {part} runs backwards")
        cpus.update(range(lo, hi + 1))
    return check_cpus(sorted(cpus))


def check_cpus(cpus: Sequence[int]) -> list[int]:
    """``cpus`` sorted, after checking that this process may run on each of them."""
    available = _available_cpus()
    if available is None or not hasattr(os, "sched_setaffinity"):
        raise UsageError("pinning workers to CPUs needs Linux (os.sched_setaffinity)")
    chosen = sorted({int(c) for c in cpus})
    if not chosen:
        raise UsageError("an empty CPU list; name at least one CPU, e.g. --cpus 0")
    missing = [c for c in chosen if c not in available]
    if missing:
        allowed = ",".join(str(c) for c in sorted(available))
        raise UsageError(f"CPU {missing[0]} is not available to d5 (it may use {allowed})")
    return chosen


# -- one worker process ----------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _last_error_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return _one_line(lines[-1]) if lines else ""


def _exit_description(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _payload(
    jobs: Sequence[Job],
    targets: Sequence[str],
    order: Sequence[int],
    options: MeasureOptions,
    cpus: list[int] | None,
) -> str:
    return json.dumps(
        {
            "version": PROTOCOL_VERSION,
            "jobs": [
                {
                    "index": i,
                    "target": targets[i],
                    "args": dict(jobs[i].args),
                    "name": jobs[i].label,
                }
                for i in order
            ],
            "options": options.to_json(),
            "cpus": cpus,
        }
    )


def _parse_lines(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue  # not ours: the worker keeps stdout clean, but be safe
        if isinstance(event, dict) and "event" in event:
            events.append(event)
    return events


def _measurement(data: Mapping[str, Any]) -> Measurement:
    """The :class:`Measurement` a worker sent as :meth:`Measurement.to_json`."""
    known = {f.name for f in fields(Measurement)}
    values = {k: v for k, v in data.items() if k in known}
    values["summary"] = Summary.from_json(data["summary"])
    values["options"] = MeasureOptions(**data["options"])
    values["samples"] = [float(v) for v in data["samples"]]
    return Measurement(**values)


def _process_run(event: Mapping[str, Any], index: int, pid: int, size: int) -> ProcessRun:
    return ProcessRun(
        job=int(event["index"]),
        round=index,
        pid=pid,
        position=int(event["position"]),
        round_size=size,
        measurement=_measurement(event["measurement"]),
        threads={
            str(k): None if v is None else str(v) for k, v in event.get("threads", {}).items()
        },
    )


def _read_lines(stream: IO[str], sink: queue.Queue[str | None]) -> None:
    """Put each line of ``stream`` in ``sink``, then ``None`` at its end."""
    try:
        for line in iter(stream.readline, ""):
            sink.put(line)
    except (OSError, ValueError):
        pass
    sink.put(None)


def _collect(stream: IO[str], sink: list[str]) -> None:
    with contextlib.suppress(OSError, ValueError):
        for line in iter(stream.readline, ""):
            sink.append(line)


def _feed(stream: IO[str], payload: str) -> None:
    """Write the request; a worker that died before reading it is noticed by its exit."""
    with contextlib.suppress(OSError, ValueError):
        stream.write(payload)
        stream.close()


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL the worker and whatever its jobs started in its process group."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        proc.kill()


def _communicate(
    payload: str,
    env: Mapping[str, str],
    timeout_s: float | None,
    start_timeout_s: float | None = START_TIMEOUT_S,
) -> tuple[int, str, str, str | None]:
    """Run one worker on ``payload``: (pid, stdout, stderr, how it failed or ``None``).

    The worker dies with this process (:func:`~d5core.worker_protocol.die_with_parent`)
    and runs in a process group of its own, which is killed with it. Its clock starts at
    its handshake (the ``start`` event), not at its launch: until then only
    ``start_timeout_s`` applies, so a busy machine that is slow to start a Python process
    does not eat a job's time. From the handshake on, each job (from the previous
    ``result`` event) may take ``timeout_s`` seconds.
    """
    proc = subprocess.Popen(
        [sys.executable, *_SAFE_PATH, "-m", _WORKER_MODULE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env} if env else None,
        start_new_session=True,
        preexec_fn=die_with_parent(),
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    lines: queue.Queue[str | None] = queue.Queue()
    out: list[str] = []
    err: list[str] = []
    threads = [
        threading.Thread(target=_feed, args=(proc.stdin, payload), daemon=True),
        threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True),
        threading.Thread(target=_collect, args=(proc.stderr, err), daemon=True),
    ]
    for thread in threads:
        thread.start()
    failed: str | None = None
    try:
        failed = _follow(proc, lines, out, timeout_s, start_timeout_s)
    finally:
        if proc.poll() is None:
            _kill_group(proc)
        proc.wait()
        for thread in threads:
            thread.join(timeout=5.0)  # a grandchild may hold stderr open: do not wait on it
    if failed is None and proc.returncode != 0:
        failed = _exit_description(proc.returncode)
    return proc.pid, "".join(out), "".join(err), failed


def _follow(
    proc: subprocess.Popen[str],
    lines: queue.Queue[str | None],
    out: list[str],
    timeout_s: float | None,
    start_timeout_s: float | None,
) -> str | None:
    """Read the worker's events until its standard output ends; how it overran, or
    ``None``. The deadline moves at the handshake and at each job's result."""
    now = time.monotonic()
    deadline = None if start_timeout_s is None else now + start_timeout_s
    started = False
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            line = lines.get(timeout=wait)
        except queue.Empty:
            _kill_group(proc)
            if started:
                return f"timed out after {timeout_s:g} s"
            return f"did not start within {start_timeout_s:g} s"
        if line is None:
            break
        out.append(line)
        event = _parse_lines(line)
        if event and event[0]["event"] in ("start", "result"):
            started = True
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
    # The protocol ended: the worker is exiting (or closed its stream and lingers).
    try:
        proc.wait(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        if started:
            return f"timed out after {timeout_s:g} s"
        return f"did not start within {start_timeout_s:g} s"
    return None


def _run_round(
    index: int,
    jobs: Sequence[Job],
    targets: Sequence[str],
    order: list[int],
    options: MeasureOptions,
    cpus: list[int] | None,
    timeout_s: float | None,
    env: Mapping[str, str],
    start_timeout_s: float | None = START_TIMEOUT_S,
) -> RoundRecord:
    """Start one worker for ``order`` and turn what it reports into a :class:`RoundRecord`."""
    start = time.perf_counter()
    payload = _payload(jobs, targets, order, options, cpus)
    pid, stdout, stderr, failed = _communicate(payload, env, timeout_s, start_timeout_s)
    record = RoundRecord(
        index=index, pid=pid, order=list(order), cpus=None, elapsed_s=time.perf_counter() - start
    )
    started, done = False, set()
    for event in _parse_lines(stdout):
        if event["event"] == "start":
            started = True
            record.pid = int(event.get("pid", pid))
            record.cpus = event.get("cpus")
        elif event["event"] == "result":
            done.add(int(event["index"]))
            if event.get("error"):
                record.failures[int(event["index"])] = _one_line(str(event["error"]))
            else:
                record.runs.append(_process_run(event, index, record.pid or pid, len(order)))
    pending = [j for j in order if j not in done]
    if pending:
        _blame(record, pending, failed or "ended without reporting it", stderr, started)
    return record


def _blame(record: RoundRecord, pending: list[int], how: str, stderr: str, started: bool) -> None:
    """Record why the worker left ``pending`` unmeasured: the job it was running failed;
    when it never started, every job of the round did. Jobs after the one running are
    left for later rounds."""
    detail = _last_error_line(stderr)
    suffix = f": {detail}" if detail else ""
    if not started:
        when = "" if how.startswith("did not start") else " before running any job"
        for job in pending:
            record.failures[job] = f"the worker process {how}{when}{suffix}"
    else:
        record.failures[pending[0]] = f"the worker process {how} while running it{suffix}"


# -- the rounds ----------------------------------------------------------------------------


def default_timeout(options: MeasureOptions | None = None) -> float:
    """A job's time limit when none is given: :data:`DEFAULT_TIMEOUT_S` plus twice the
    engine's time budget, so that a long ``--time-budget`` is never cut short by it."""
    budget = 0.0 if options is None else float(options.time_budget_s)
    return DEFAULT_TIMEOUT_S + 2.0 * budget


def check_timeout(value: float | None, option: str = "--timeout") -> float | None:
    """``value`` when it is a usable time limit in seconds (``None`` stays ``None``).

    :raises UsageError: for zero, a negative number, NaN or infinity.
    """
    if value is None:
        return None
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"{option} {value}: give a time limit in seconds, a finite number above 0")
    return float(value)


def _check_jobs(jobs: Sequence[Job]) -> list[str]:
    """Each job's builder, read once for the whole run; bad jobs are usage errors."""
    if not jobs:
        raise UsageError("nothing to measure: no job was given")
    kinds = job_kinds()
    targets = []
    for job in jobs:
        targets.append(job_target(job.kind, kinds))
        try:
            json.dumps(dict(job.args))
        except (TypeError, ValueError) as exc:
            raise UsageError(
                f"the arguments of job {job.label!r} must be JSON numbers, strings, lists or "
                f"dicts: {exc}"
            ) from exc
    return targets


def _all_within(results: Sequence[JobResult], rel_ci: float) -> bool:
    live = [r for r in results if r.error is None]
    return bool(live) and all(
        r.summary is not None and r.summary.ci_rel_halfwidth <= rel_ci for r in live
    )


def run_invocations(
    jobs: Sequence[Job],
    *,
    processes: int,
    options: MeasureOptions | None = None,
    seed: int = 0,
    min_processes: int = 2,
    rel_ci: float = 0.0,
    cpus: Sequence[int] | None = None,
    on_process: Callable[[RoundRecord], None] | None = None,
    time_budget_s: float | None = None,
    timeout_s: float | None = None,
    env: Mapping[str, str] | None = None,
    start_timeout_s: float | None = START_TIMEOUT_S,
) -> Invocations:
    """Measure each job in up to ``processes`` fresh worker processes, one per round.

    :param jobs: what to measure; every job runs once in each round.
    :param processes: the most rounds (worker processes) to run.
    :param options: the engine's options for every measurement.
    :param seed: seeds the order of the jobs within each round.
    :param min_processes: rounds always run before stopping early (by ``rel_ci`` or
        ``time_budget_s``); at most ``processes``.
    :param rel_ci: stop once every job's between-process interval lies within ± this
        fraction of its median; 0 never stops early.
    :param cpus: pin every worker to these CPUs (``os.sched_setaffinity``); recorded.
    :param on_process: called with each round's record once its worker has finished.
    :param time_budget_s: start no round once this much time has passed (after
        ``min_processes`` rounds).
    :param timeout_s: kill a worker that spends longer on one job (counted from its
        handshake, then from each job's result; ``None``: no limit); that job fails with
        "timed out after N s" and the others go on in later rounds.
    :param start_timeout_s: kill a worker that has not made its handshake this long after
        it was launched; every job of its round fails.
    :param env: environment variables for the workers on top of this process's (thread
        settings, for example: they must be set before a library starts its threads).
    :raises UsageError: for no job, an unknown kind, arguments that are not JSON,
        fewer than one process, or CPUs that cannot be used.
    """
    targets = _check_jobs(jobs)
    if not 1 <= processes <= MAX_PROCESSES:
        raise UsageError(f"--processes must be 1..{MAX_PROCESSES}, got {processes}")
    if not rel_ci >= 0:
        raise UsageError(f"the between-process CI target must be >= 0, got {rel_ci}")
    opts = options if options is not None else MeasureOptions()
    limit = check_timeout(timeout_s)
    check_timeout(start_timeout_s, "the start limit")
    pinned = None if cpus is None else check_cpus(cpus)
    extra_env = {str(k): str(v) for k, v in (env or {}).items()}
    floor = max(1, min(min_processes, processes))
    results = [JobResult(job=j) for j in jobs]
    rounds: list[RoundRecord] = []
    rng = random.Random(seed)
    start = time.perf_counter()
    stopped_by = "processes"
    for index in range(processes):
        live = [i for i, r in enumerate(results) if r.error is None]
        if not live:
            stopped_by = "failed"
            break
        if index >= floor:
            if rel_ci > 0 and _all_within(results, rel_ci):
                stopped_by = "ci"
                break
            if time_budget_s is not None and time.perf_counter() - start >= time_budget_s:
                stopped_by = "time_budget"
                break
        order = rng.sample(live, len(live))
        record = _run_round(
            index, jobs, targets, order, opts, pinned, limit, extra_env, start_timeout_s
        )
        rounds.append(record)
        for run in record.runs:
            results[run.job].runs.append(run)
        for job, error in record.failures.items():
            results[job].error = error
        for i in order:
            if results[i].runs:
                results[i].summary = summarize_nested(results[i].per_process, opts.confidence)
        if on_process is not None:
            on_process(record)
    if all(r.error is not None for r in results):
        stopped_by = "failed"
    return Invocations(
        jobs=results,
        rounds=rounds,
        stopped_by=stopped_by,
        seed=seed,
        options=opts,
        cpus=pinned,
        elapsed_s=time.perf_counter() - start,
        env=extra_env,
    )
