"""Traced work: extra passes of ``d5 bench`` after its timed workers, traced blocks of
``d5 validate`` and ``d5 run``, and keeping the trace with the run.

``d5 bench op`` and ``d5 bench net`` never trace the workers that produce their timings:
once the workers are done, each executor (or backend) is prepared again in the command's
process under the framework's profilers and run :data:`TRACED_STEPS` times, each call a
``bench.step`` span. The run is stored with ``trace`` in its config, so every table
marks it as traced.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from d5core.bus import MetricBus, use_bus
from d5core.errors import one_line
from d5core.trace.document import artifact_name
from d5core.trace.recorder import TraceRecorder

__all__ = [
    "TRACED_STEPS",
    "PhaseSpans",
    "keep_document",
    "store_trace",
    "trace_job",
    "trace_steps",
    "traced_block",
    "traced_line",
    "traced_worker",
]

#: The calls of each executor or backend that a traced ``d5 bench`` records.
TRACED_STEPS = 10


def trace_steps(
    recorder: TraceRecorder,
    subject: str,
    instance: object,
    prepare: Callable[[], Callable[[], object]],
    steps: int = TRACED_STEPS,
    **args: Any,
) -> None:
    """Prepare ``subject``'s step under its profilers and run it ``steps`` times, each
    call a ``bench.step`` span (``args`` label it), on a bus the recorder hears.

    The run's timings are stored before this runs: a traced pass that raises ends with a
    note in the trace naming the executor and the error, and the other executors are
    still traced.
    """
    try:
        with use_bus(MetricBus()) as bus, traced_block(recorder, subject, instance, bus):
            with recorder.span("prepare", subject=subject, **args):
                step = prepare()
            with recorder.span("first call", subject=subject, **args):
                step()  # a warm-up: the steps below are the steady state
            for index in range(steps):
                with recorder.span("bench.step", subject=subject, step=index, **args):
                    step()
    except Exception as exc:
        recorder.notes.append(f"{subject}: the traced steps failed: {one_line(exc)}")


def trace_job(recorder: TraceRecorder, job: Any, subject: str, **args: Any) -> None:
    """Trace :data:`TRACED_STEPS` calls of a ``d5 bench`` job (a
    :class:`~d5core.measure.invocations.Job`), built in this process as a worker builds
    it: the profilers see the building too."""
    from d5core.measure.invocations import build_job, job_target

    target = job_target(job.kind)

    def prepare() -> Callable[[], object]:
        prepared = build_job(target, job.args)

        def step() -> None:
            if prepared.setup is not None:
                prepared.setup()
            prepared.fn()
            if prepared.synchronize is not None:
                prepared.synchronize()

        return step

    trace_steps(recorder, subject, None, prepare, **args)


@contextmanager
def traced_block(
    recorder: TraceRecorder | None,
    subject: str,
    instance: object = None,
    bus: MetricBus | None = None,
) -> Iterator[None]:
    """Trace a block as it runs: ``subject``'s profilers run around it and the recorder
    hears ``bus`` (a training run's own) and the process-wide bus (where communicators
    publish). Graph nodes are heard only when no profiler runs (see
    :meth:`TraceRecorder.attach`). Does nothing without a recorder."""
    if recorder is None:
        yield
        return
    from d5core.bus import get_bus

    with recorder.framework(subject, instance) as profiled:
        buses = (get_bus(),) if bus is None else (bus, get_bus())
        unsubscribe = recorder.attach(*buses, nodes=recorder.level != "step" and not profiled)
        try:
            yield
        finally:
            unsubscribe()


class PhaseSpans:
    """Each phase of a validation worker (``torch inference``, ``numpy backprop`` ...)
    as a ``validate.call`` span, from one phase to the next: wrap the worker's phase
    callback with :meth:`wrap`, and :meth:`close` the last span at the end."""

    def __init__(self, recorder: TraceRecorder, subjects: Iterable[str]) -> None:
        self.recorder = recorder
        self.subjects = set(subjects)
        self._open: Any = None

    def wrap(self, phase: Callable[[str], None]) -> Callable[[str], None]:
        def on_phase(name: str) -> None:
            self.close()
            subject = name.split(" ", 1)[0]
            if subject in self.subjects:  # an executor's call: a step
                self._open = self.recorder.span("validate.call", subject=subject, phase=name)
            else:  # loading, creating: work around the calls
                self._open = self.recorder.span("validate.phase", phase=name)
            self._open.__enter__()
            phase(name)

        return on_phase

    def close(self) -> None:
        if self._open is not None:
            self._open.__exit__(None, None, None)
            self._open = None


def traced_worker(
    trace: str | None, subject: str, phase: Callable[[str], None], work: Callable[..., Any]
) -> dict[str, Any]:
    """Run a validation worker's ``work(phase)`` traced at ``trace`` (untraced when
    ``None``); its JSON result gets the trace document under ``"trace"``."""
    if trace is None:
        return dict(work(phase))
    from d5core.plugins.reference import reference_name

    recorder = TraceRecorder(trace, "d5 validate (worker)")
    references = {reference_name(group) for group in ("d5.operators", "d5.frameworks")}
    spans = PhaseSpans(recorder, {subject, *references})
    try:
        with traced_block(recorder, subject):
            result = dict(work(spans.wrap(phase)))
    finally:
        spans.close()
    result["trace"] = recorder.document(kind="validate", subjects=[subject])
    return result


def keep_document(store: Any, run_id: str, document: Mapping[str, Any] | None) -> None:
    """Keep a trace document made in a worker with the run it belongs to."""
    if not document:
        return
    document = {**document, "otherData": {**document["otherData"], "run_id": run_id}}
    data = json.dumps(document, separators=(",", ":")).encode()
    store.add_artifact(run_id, artifact_name(document["otherData"].get("rank")), data)


def store_trace(
    store: Any, run_id: str, recorder: TraceRecorder, **described: Any
) -> Mapping[str, Any]:
    """Keep ``recorder``'s document with the run (``trace.json``, or
    ``trace.rank<R>.json`` for a rank) and return it."""
    document = recorder.document(run_id=run_id, **described)
    data = json.dumps(document, separators=(",", ":")).encode()
    store.add_artifact(run_id, artifact_name(recorder.rank), data)
    return document


def traced_line(run_id: str, level: str) -> str:
    """What a command prints under its results when it traced."""
    return (
        f"traced ({level}): run {run_id} keeps its trace; open it with "
        f"'d5 trace {run_id} -o trace.json' (Perfetto) or see 'd5 trace {run_id} --top 15'"
    )
