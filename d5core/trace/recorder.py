"""One process's share of a trace: d5's spans from the metric bus, the framework
profilers' events and, at level ``full``, the process's counters.

A :class:`TraceRecorder` turns every span the bus delivers (``NAME.begin`` /
``NAME.end``) into a Chrome complete event and every instant event into an instant
event, all on the trace's time base (the bus's own clock). Framework profilers are
found through the ``d5_trace_profiler`` hook; one that fails is left out and named in
the trace's notes, and the run goes on.
"""

from __future__ import annotations

import os
import resource
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from d5core.bus import (
    BEGIN,
    COMM_CALL,
    END,
    GRAPH_NODE,
    OP_BACKWARD,
    OP_FORWARD,
    RUN_END,
    RUN_START,
    TEST_PASS,
    TRAIN_EPOCH,
    TRAIN_STEP,
    VALIDATION,
    Event,
    MetricBus,
)
from d5core.errors import UsageError, one_line
from d5core.levels.metrics import Metric
from d5core.metrics._common import StepBlock, StepFeed
from d5core.trace.document import D5_CATEGORY, new_document
from d5core.tracing import TRACE_LEVELS, TraceProfiler

__all__ = ["MAX_EVENTS", "STEP_EVENTS", "TraceRecorder", "check_level"]

#: Events one process keeps; past it, events are counted as dropped (and noted).
MAX_EVENTS = 1_000_000
#: The bus events a trace records at every level: d5's own spans (runs, epochs, test
#: passes, operator calls), communication calls and validations. Training steps (with
#: the reading of their batches) come through the metrics' step feed, in blocks where
#: the trainer hands them over so (:meth:`TraceRecorder.attach`).
STEP_EVENTS = (
    RUN_START, RUN_END, TRAIN_EPOCH + END, TEST_PASS + END, OP_FORWARD + END,
    OP_BACKWARD + END, COMM_CALL, VALIDATION,
)  # fmt: skip
_SCALARS = (str, int, float, bool)


def check_level(level: str) -> str:
    """``level`` if it is a trace level.

    :raises UsageError: naming the levels there are.
    """
    if level not in TRACE_LEVELS:
        raise UsageError(
            f"unknown trace level {level!r}: use one of {', '.join(TRACE_LEVELS)} "
            f"(--trace step|framework|full)"
        )
    return level


def _args(payload: dict[str, Any]) -> dict[str, Any]:
    """The JSON-safe scalars of an event's payload (arrays and objects are left out)."""
    return {
        k: v
        for k, v in payload.items()
        if k != "duration_ns" and (v is None or isinstance(v, _SCALARS))
    }


class _StepReader(Metric):
    """The trace's member of the step feed: it reads steps, and reports nothing."""

    name = "trace steps"
    unit = ""
    better = "lower"

    def result(self) -> Any:
        return None


class TraceRecorder:
    """Collects the trace events of this process.

    :param level: ``step``, ``framework`` or ``full``.
    :param process: the name of this process's track (``"d5 bench net"``,
        ``"rank 1"``).
    :param rank: the rank of a distributed run (its track is sorted by it).
    """

    def __init__(self, level: str, process: str, rank: int | None = None) -> None:
        self.level = check_level(level)
        self.pid = os.getpid()
        self.process = process
        self.rank = rank
        self.events: list[dict[str, Any]] = []
        self.notes: list[str] = []
        self.profilers: list[str] = []
        self.dropped = 0
        self._threads: dict[int, str] = {threading.get_native_id(): "main"}
        self._named_tids: dict[str, int] = {}
        self._lock = threading.Lock()
        #: Tracks of this trace that are not this process: pid -> name (LoadGen's run).
        self.extra_tracks: dict[int, str] = {}

    # -- events ---------------------------------------------------------------

    def add(self, event: dict[str, Any], pid: int | None = None) -> None:
        """Keep one event, unless the cap is reached; its ``pid`` is this process's, or
        ``pid`` for a track of :attr:`extra_tracks`."""
        if len(self.events) >= MAX_EVENTS:
            self.dropped += 1
            return
        event["pid"] = self.pid if pid is None else pid
        self.events.append(event)

    def on_event(self, event: Event) -> None:
        """A bus subscriber: spans (and instant events that carry their duration, such
        as ``comm.call``) become complete events, the rest instant events."""
        name = event.name
        if name.endswith(BEGIN):
            return
        tid = threading.get_native_id()
        duration = event.payload.get("duration_ns")
        if name.endswith(END) or isinstance(duration, int):
            ns = int(duration or 0)
            self.add({
                "name": name.removesuffix(END), "cat": D5_CATEGORY, "ph": "X",
                "ts": (event.t_ns - ns) / 1000.0, "dur": ns / 1000.0,
                "tid": tid, "args": {"level": event.level, **_args(event.payload)},
            })  # fmt: skip
            if name == TRAIN_STEP + END:
                data_t0, data_ns = event.payload.get("data_t0_ns"), event.payload.get("data_ns")
                if isinstance(data_t0, int) and isinstance(data_ns, int):
                    self._data_span(data_t0, data_ns, tid, event.payload.get("step"))
                if self.level == "full":
                    self.counters(event.t_ns / 1000.0)
        else:
            self.add({
                "name": name, "cat": D5_CATEGORY, "ph": "i", "s": "t", "ts": event.t_ns / 1000.0,
                "tid": tid, "args": {"level": event.level, **_args(event.payload)},
            })  # fmt: skip

    def attach(self, *buses: MetricBus, nodes: bool = False) -> Callable[[], None]:
        """Hear d5's own events (:data:`STEP_EVENTS`) on each of ``buses``, the training
        steps of the first one, and with ``nodes`` the graph nodes' spans too; returns
        the function that stops it.

        Steps are read as the built-in metrics read them, through the step feed, so the
        trainer keeps handing them over in blocks (no event per step) and a ``step``
        trace costs the training little; at ``full`` every step is heard as it ends, for
        the process counters. Nodes are heard only where no framework profiler runs (the
        numpy reference, an executor without one): some executors run their graph node
        by node, or profile each node, while somebody listens to the nodes, and a trace
        must show the execution that was measured.
        """
        names = (*STEP_EVENTS, *((GRAPH_NODE + END,) if nodes else ()))
        chosen = list(dict.fromkeys(buses))
        undo = [bus.subscribe(name, self.on_event) for bus in chosen for name in names]
        if chosen and self.level == "full":
            undo.append(chosen[0].subscribe(TRAIN_STEP + END, self.on_event))
        elif chosen:
            reader = _StepReader()
            StepFeed.of(chosen[0]).join(
                reader, on_step=lambda event, _step, _epoch: self.on_event(event),
                on_steps=self.on_steps,
            )  # fmt: skip
            undo.append(reader.detach)

        def unsubscribe() -> None:
            for one in undo:
                one()

        return unsubscribe

    def on_steps(self, block: StepBlock) -> None:
        """Training steps handed over together: each a ``train.step`` span (and its
        batch's reading a ``train.data`` span), as their events would have given."""
        if block.starts_ns is None:
            self.notes.append(f"{len(block)} steps of epoch {block.epoch} came without times")
            return
        tid = threading.get_native_id()
        for i, start in enumerate(block.starts_ns):
            args = {"level": 2, "step": block.first_step + i, "epoch": block.epoch,
                    "batch_size": block.batch_sizes[i], "loss": block.losses[i],
                    "lr": block.lrs[i]}  # fmt: skip
            self.add({"name": TRAIN_STEP, "cat": D5_CATEGORY, "ph": "X", "ts": start / 1000.0,
                      "dur": block.seconds[i] * 1e6, "tid": tid, "args": args})  # fmt: skip
            if block.data_t0_ns is not None and block.data_ns is not None:
                self._data_span(block.data_t0_ns[i], block.data_ns[i], tid, args["step"])

    def _data_span(self, t0_ns: int, ns: int, tid: int, step: Any) -> None:
        self.add({"name": "train.data", "cat": D5_CATEGORY, "ph": "X", "ts": t0_ns / 1000.0,
                  "dur": ns / 1000.0, "tid": tid, "args": {"level": 2, "step": step}})  # fmt: skip

    def counters(self, ts_us: float) -> None:
        """At level ``full``: the process's CPU time, page faults and context switches
        so far, as counter events at ``ts_us``."""
        use = resource.getrusage(resource.RUSAGE_SELF)
        for name, values in (
            ("cpu time (ms)", {"user": use.ru_utime * 1e3, "system": use.ru_stime * 1e3}),
            ("page faults", {"minor": use.ru_minflt, "major": use.ru_majflt}),
            ("context switches", {"voluntary": use.ru_nvcsw, "involuntary": use.ru_nivcsw}),
        ):
            self.add({"name": name, "cat": "process", "ph": "C", "ts": ts_us, "tid": 0,
                      "args": values})  # fmt: skip

    @contextmanager
    def span(self, name: str, **args: Any) -> Iterator[None]:
        """Record the block as a d5 span (for work no bus event covers: a traced step
        of ``d5 bench``, preparing an executor)."""
        from time import perf_counter_ns

        full = self.level == "full"
        t0 = perf_counter_ns()
        if full:
            self.counters(t0 / 1000.0)
        try:
            yield
        finally:
            t1 = perf_counter_ns()
            self.add({
                "name": name, "cat": D5_CATEGORY, "ph": "X", "ts": t0 / 1000.0,
                "dur": (t1 - t0) / 1000.0, "tid": threading.get_native_id(), "args": args,
            })  # fmt: skip
            if full:
                self.counters(t1 / 1000.0)

    # -- framework profilers --------------------------------------------------

    @contextmanager
    def framework(self, executor: str, subject: object = None) -> Iterator[bool]:
        """At levels ``framework`` and ``full``: run every profiler that a plugin offers
        for ``executor`` around the block and keep their events. Gives whether one runs."""
        if self.level == "step":
            yield False
            return
        started = self._start_profilers(executor, subject)
        try:
            yield bool(started)
        finally:
            for plugin, profiler in started:
                self._stop_profiler(plugin, profiler)

    def _start_profilers(self, executor: str, subject: object) -> list[tuple[str, TraceProfiler]]:
        from d5core.plugins.manager import get_plugin_manager

        started = []
        outcomes = get_plugin_manager().call_each(
            "d5_trace_profiler", executor=executor, level=self.level, subject=subject
        )
        for outcome in outcomes:
            if outcome.error is not None:
                self.notes.append(
                    f"plugin {outcome.plugin}: its profiler failed: {one_line(outcome.error)}"
                )
                continue
            profiler = outcome.result
            if profiler is None:
                continue
            try:
                profiler.start()
            except Exception as exc:
                self.notes.append(
                    f"plugin {outcome.plugin}: {getattr(profiler, 'name', '?')} did not start: "
                    f"{one_line(exc)}"
                )
                continue
            started.append((outcome.plugin, profiler))
        return started

    def _stop_profiler(self, plugin: str, profiler: TraceProfiler) -> None:
        name = str(getattr(profiler, "name", plugin))
        try:
            events = profiler.stop()
        except Exception as exc:
            self.notes.append(f"plugin {plugin}: {name} failed when stopped: {one_line(exc)}")
            return
        self.profilers.append(name)
        for event in events:
            event = dict(event)
            if event.get("ph") == "M":  # a profiler naming its threads
                if event.get("name") == "thread_name" and isinstance(event.get("tid"), int):
                    label = str((event.get("args") or {}).get("name", ""))
                    self._threads.setdefault(int(event["tid"]), label)
                continue
            event.setdefault("cat", name)
            tid = event.get("tid", 0)
            if isinstance(tid, str):
                event["tid"] = self._thread_of(tid)
            self.add(event)

    def _thread_of(self, label: str) -> int:
        """A numeric track for a thread a profiler names but does not number."""
        with self._lock:
            tid = self._named_tids.get(label)
            if tid is None:
                tid = 1_000_000_000 + len(self._named_tids)
                self._named_tids[label] = tid
                self._threads[tid] = label
            return tid

    # -- the document ---------------------------------------------------------

    def document(self, **described: Any) -> dict[str, Any]:
        """This process's trace document: its events with the tracks named, and
        ``described`` (``run_id``, ``kind`` ...) in ``otherData``."""
        meta: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": self.pid, "tid": 0,
             "args": {"name": f"{self.process} (pid {self.pid})"}},
            {"name": "process_sort_index", "ph": "M", "pid": self.pid, "tid": 0,
             "args": {"sort_index": self.rank if self.rank is not None else 0}},
        ]  # fmt: skip
        for pid, name in self.extra_tracks.items():
            meta.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                         "args": {"name": name}})  # fmt: skip
            for tid in sorted({int(e["tid"]) for e in self.events if e["pid"] == pid}):
                meta.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                             "args": {"name": f"thread {tid}"}})  # fmt: skip
        tids = {int(e["tid"]) for e in self.events if "tid" in e and e["pid"] == self.pid}
        for tid in sorted(tids | set(self._threads)):
            label = self._threads.get(tid, f"thread {tid}")
            meta.append({"name": "thread_name", "ph": "M", "pid": self.pid, "tid": tid,
                         "args": {"name": label}})  # fmt: skip
        notes = list(self.notes)
        if self.dropped:
            notes.append(f"{self.dropped} events past the cap of {MAX_EVENTS} were dropped")
        import socket
        import time

        return new_document(
            meta + self.events,
            level=self.level,
            rank=self.rank,
            host=socket.gethostname(),
            # the wall clock less the trace's, to line up processes of several hosts
            wall_offset_us=(time.time_ns() - time.perf_counter_ns()) / 1000.0,
            profilers=sorted(set(self.profilers)),
            notes=notes,
            **described,
        )
