"""The worker process of :func:`d5core.loadgen.loadgen.run_scenario`
(``python -m d5core.loadgen.worker``).

It reads one JSON request on standard input (``model``, ``executor``, ``settings``,
``log_dir``, ``batch``), sets the thread variables of the settings before anything that
starts a thread pool is imported, runs the scenario, and writes JSON lines on standard
output:

- ``{"event": "done", "settings": ..., "threads": ..., "warm_up": ..., "samples": n,
  "calls": n, "batch": n, "layout": [...]}`` when LoadGen finished;
- ``{"event": "usage-error", "error": "one line"}`` for a bad model or executor;
- ``{"event": "error", "error": "one line"}`` when the executor or LoadGen failed (the
  process then exits at once, so that LoadGen never waits on a query that will not come).

Whatever the frameworks print goes to standard error: standard output carries the
protocol only.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import IO, Any

from d5core.worker_protocol import emit, one_line, protocol_stream


def _threads(executor: str, environment: dict[str, str]) -> dict[str, Any]:
    """The thread variables set, every pool as this process reports it now, and the
    executor's thread count (:func:`d5core.measure.fitness.thread_count`)."""
    from d5core.measure.fitness import framework_of, thread_count, thread_settings

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
    settings = thread_settings()
    count = thread_count(executor, framework_of("d5.frameworks", executor), [(settings, cores)])
    return {
        "environment": environment,
        "settings": settings,
        "cores": cores,
        "count": count.threads,
        "setting": count.setting,
        "describe": count.describe(),
    }


def _run(request: dict[str, Any], out: IO[str]) -> dict[str, Any]:
    from d5core.loadgen.settings import ScenarioSettings, thread_environment

    settings = ScenarioSettings.from_json(request["settings"]).check()
    environment = thread_environment(settings.threads)
    os.environ.update(environment)  # before numpy or any framework starts its pools

    from pathlib import Path

    from d5core.loadgen.loadgen import resolve_settings, start_test, test_settings
    from d5core.loadgen.sut import InferenceSUT, loadgen_handles
    from d5core.lv1.runner import executor_by_name, load_model

    executor_name = str(request["executor"])
    network = load_model(str(request["model"]))
    executor = executor_by_name(executor_name, network)

    def fail(message: str) -> None:
        emit(out, {"event": "error", "error": f"the executor failed on a query: {message}"})
        os._exit(1)

    system = InferenceSUT(executor, network, settings, batch=request.get("batch"), on_error=fail)
    warm = system.warm_up()
    resolved = resolve_settings(settings, warm)
    system.settings = resolved
    sut, qsl, close = loadgen_handles(system)
    started_us = time.perf_counter_ns() / 1000.0  # where a trace puts LoadGen's events
    try:
        start_test(sut, qsl, test_settings(resolved, warm), Path(str(request["log_dir"])))
    finally:
        stats = close()
    timed = system.timed_accuracy()
    if timed.failed:
        from d5core.errors import CheckFailed

        raise CheckFailed(f"accuracy while timed failed: {timed.line()}")
    return {
        "timed_accuracy": timed.to_json(),
        "event": "done",
        "settings": resolved.to_json(),
        "threads": _threads(executor_name, environment),
        "warm_up": warm,
        "samples": stats.samples,
        "calls": stats.calls,
        "started_us": started_us,
        "batch": system.batch,
        "layout": [o.to_json() for o in stats.layout],
    }


def main() -> int:
    """Run the request read from standard input; see the module docstring."""
    out = protocol_stream()
    request = json.load(sys.stdin)
    from d5core.errors import UsageError

    try:
        event = _run(request, out)
    except UsageError as exc:
        emit(out, {"event": "usage-error", "error": " ".join(str(exc).split())})
        return 1
    except Exception as exc:
        emit(out, {"event": "error", "error": one_line(exc)})
        return 1
    emit(out, event)
    return 0


if __name__ == "__main__":
    sys.exit(main())
