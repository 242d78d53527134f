"""The worker process of :mod:`d5core.measure.invocations` (``python -m d5core.measure._worker``).

It reads one JSON document from standard input: the protocol version, the jobs in the
order to run them (each with its builder ``target``, ``args``, ``name`` and ``index``),
the engine's options and the CPUs to pin to (or ``null``). It pins itself first, before
any library starts threads, then writes JSON lines on standard output:

- ``{"event": "start", "pid": ..., "cpus": [...]}`` once;
- ``{"event": "result", "index": i, "position": p, "measurement": {...}, "threads":
  {...}}`` per job, where ``threads`` are the thread settings of this process after the
  job (:func:`d5core.measure.fitness.thread_settings`: the variables, and the pools of
  the frameworks imported so far); or with ``"error": "one line"`` instead of both when
  the job failed;
- ``{"event": "done"}`` at the end.

Whatever the jobs print, to Python's ``sys.stdout`` or to file descriptor 1 from C, goes
to standard error: standard output carries the protocol only.
"""

from __future__ import annotations

import gc
import json
import os
import sys
from typing import Any

from d5core.worker_protocol import emit, one_line, protocol_stream

#: Must equal :data:`d5core.measure.invocations.PROTOCOL_VERSION` (not imported: the
#: worker reads its request before importing anything heavy).
_PROTOCOL_VERSION = 1


def _pin(cpus: list[int] | None) -> list[int] | None:
    if cpus:
        os.sched_setaffinity(0, cpus)
    getter = getattr(os, "sched_getaffinity", None)
    return None if getter is None else sorted(getter(0))


def _run_job(job: dict[str, Any], options: Any) -> dict[str, Any]:
    """Build one job, time it and, when its builder gives a check, hold the outputs of
    a few randomly chosen timed calls to it (accuracy while timed).

    :raises CheckFailed: when those outputs are missing or differ from the untimed ones:
        the job then fails, and its timing is not reported as a result.
    """
    from d5core.errors import CheckFailed
    from d5core.measure.audit import DEFAULT_SAMPLED, OutputSample
    from d5core.measure.engine import measure
    from d5core.measure.invocations import build_job

    prepared = build_job(str(job["target"]), job.get("args") or {})
    keep = None
    if prepared.check is not None:
        keep = OutputSample.choose(DEFAULT_SAMPLED, options.min_samples)
    m = measure(
        prepared.fn,
        options,
        name=str(job.get("name", "")),
        setup=prepared.setup,
        synchronize=prepared.synchronize,
        keep=keep,
    )
    m.details = dict(prepared.details)
    if prepared.check is not None and keep is not None:
        outcome = dict(prepared.check(keep))
        keep.outputs.clear()
        m.details["timed_accuracy"] = outcome
        if outcome.get("failed"):
            raise CheckFailed(f"accuracy while timed failed: {outcome.get('detail')}")
    return m.to_json()


def main() -> int:
    """Run the jobs read from standard input; see the module docstring."""
    request = json.load(sys.stdin)
    if request.get("version") != _PROTOCOL_VERSION:
        sys.stderr.write(
            f"worker protocol {request.get('version')!r} is not {_PROTOCOL_VERSION}: the parent "
            "and the worker come from different d5 installations\n"
        )
        return 2
    cpus = _pin(request.get("cpus"))
    out = protocol_stream()
    emit(out, {"event": "start", "pid": os.getpid(), "cpus": cpus})

    from d5core.allocator import apply_allocator_policy

    apply_allocator_policy()  # the parent's policy (inherited D5_ALLOCATOR), before any job

    from d5core.bus import attach_plugins, get_bus
    from d5core.measure.engine import MeasureOptions
    from d5core.measure.fitness import thread_settings

    options = MeasureOptions(**request.get("options", {}))
    attach_plugins(get_bus())  # this process is the run: plugins hear its measurements
    for position, job in enumerate(request["jobs"]):
        event: dict[str, Any] = {"event": "result", "index": job["index"], "position": position}
        try:
            event["measurement"] = _run_job(job, options)
            event["threads"] = thread_settings()
        except Exception as exc:
            event["error"] = one_line(exc)
        emit(out, event)
        gc.collect()  # free the job's inputs before the next job is built
    emit(out, {"event": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
