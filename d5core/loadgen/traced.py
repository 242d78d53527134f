"""A traced ``--scenario`` run: each executor's inference traced after LoadGen's runs.

LoadGen's performance run is the timed region whose figures are reported, so nothing is
traced inside it. Once every executor has run, each is prepared again in this process
and traced for a few inference steps of the scenario's batch, as ``d5 bench net
--trace`` does. At level ``full`` the performance run's own query events (LoadGen's
``mlperf_log_trace.json``) join the timeline as a track of their own, placed at the
moment the worker started LoadGen's test.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["loadgen_events", "trace_scenario"]

#: The pid of the first LoadGen track: no OS process has it (Linux pids stay below 2**22),
#: as the worker that ran LoadGen has ended.
_LOADGEN_PID = 1_000_000_000


def loadgen_events(
    log_dir: Path, started_us: float, executor: str, pid: int
) -> list[dict[str, Any]]:
    """LoadGen's trace events of one performance run, moved onto the trace's time base:
    its first event at ``started_us`` (when the worker started the test)."""
    path = log_dir / "mlperf_log_trace.json"
    if not path.is_file():
        return []
    events = []
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip().rstrip(",")
        if not line.startswith("{"):
            continue
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict) and event.get("ph") in ("X", "i") and "ts" in event:
            events.append(event)
    if not events:
        return []
    origin = min(float(e["ts"]) for e in events)
    moved = []
    for e in events:
        tid = e.get("tid")
        out = {"name": str(e.get("name")), "ph": e["ph"], "cat": "loadgen", "pid": pid,
               "tid": tid if isinstance(tid, int) else 0,
               "ts": started_us + float(e["ts"]) - origin,
               "args": {"executor": executor, **(e.get("args") or {})}}  # fmt: skip
        if e["ph"] == "X":
            out["dur"] = float(e.get("dur", 0.0))
        else:
            out["s"] = "t"
        moved.append(out)
    return moved


def trace_scenario(
    store: Any, run_id: str, level: str, request: Any, outcomes: Sequence[Any]
) -> None:
    """Trace each executor of ``request`` that ran, and keep the trace with the run."""
    from functools import partial

    from d5core.lv1.runner import executor_by_name, load_model, network_workload, prepare_step
    from d5core.trace.capture import store_trace, trace_steps
    from d5core.trace.recorder import TraceRecorder

    recorder = TraceRecorder(level, "d5 bench net --scenario")
    names = [o.executor for o in outcomes]
    workload = network_workload(request.model, batch=request.batch, mode="inference",
                                seed=request.settings.seed)  # fmt: skip
    for name in names:
        executor = executor_by_name(name, load_model(request.model))
        trace_steps(recorder, name, executor,
                    partial(prepare_step, executor, name, workload),
                    model=request.model, mode="inference")  # fmt: skip
    if level == "full":
        for index, outcome in enumerate(outcomes):
            result = outcome.result
            started = (result.details or {}).get("started_us")
            if started is None:
                recorder.notes.append(f"{outcome.executor}: LoadGen's start was not recorded")
                continue
            pid = _LOADGEN_PID + index
            moved = loadgen_events(Path(result.log_dir), float(started), outcome.executor, pid)
            recorder.extra_tracks[pid] = f"LoadGen performance run of {outcome.executor}"
            for event in moved:
                recorder.add(event, pid=pid)
        recorder.notes.append(
            "LoadGen's events are placed by the worker's clock reading as the test started "
            "(LoadGen's own start-up, under a millisecond, is not accounted for)"
        )
    store_trace(store, run_id, recorder, kind="inference", subjects=names,
                model=request.model, scenario=request.settings.scenario)  # fmt: skip
