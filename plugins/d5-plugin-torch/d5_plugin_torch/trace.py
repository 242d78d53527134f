"""torch's profiler as a d5 trace profiler (``--trace framework`` or ``full``).

:class:`TorchTraceProfiler` runs :class:`torch.profiler.profile` with CPU activity
between ``start()`` and ``stop()`` and returns the operators it recorded (``aten::mm``,
``aten::addmm`` ... and any ``record_function`` range) as Chrome complete events.

**Clock.** In torch 2.13 a profiler event's ``start_ns()`` is wall-clock time:
nanoseconds since the epoch (``CLOCK_REALTIME``, read through torch's approximate
clock and converted to Unix time when the profiler stops). d5's trace time base is
``time.perf_counter_ns()`` (``CLOCK_MONOTONIC``). ``stop()`` reads the offset between
the two clocks once (``d5core.api.wall_offset_ns``), in integers, and subtracts it from
every event; integers because a
float of nanoseconds since the epoch has steps of 256 ns.

**Threads.** ``tid`` is the OS thread id of the thread that ran the operator (the
event's resource id, which torch sets to the system thread id for CPU operators).

**Levels.** At ``framework`` the profiler records the thread that calls ``start()``
(and the threads torch itself hands that thread's work to, autograd's included), with
``record_shapes`` off. At ``full`` it also records the input shapes (``args.input_shapes``)
and every thread of the process (torch's experimental ``profile_all_threads``).
Memory events are never recorded.
"""

from __future__ import annotations

from typing import Any

from d5core.api import wall_offset_ns

__all__ = ["EXECUTORS", "TorchTraceProfiler"]

#: The executors this plugin registers (``d5.frameworks`` and ``d5.operators`` names).
EXECUTORS: frozenset[str] = frozenset({"torch"})


class TorchTraceProfiler:
    """The torch profiler around a traced block (see the module docstring).

    :param level: ``framework`` or ``full``.
    """

    name = "torch.profiler"

    def __init__(self, level: str = "framework") -> None:
        self.level = level
        self._profile: Any = None

    def start(self) -> None:
        """Start torch's profiler (CPU activity)."""
        from torch._C._profiler import _ExperimentalConfig
        from torch.profiler import ProfilerActivity, profile

        full = self.level == "full"
        profiler = profile(
            activities=[ProfilerActivity.CPU],
            record_shapes=full,
            experimental_config=_ExperimentalConfig(profile_all_threads=full),
        )
        profiler.start()
        self._profile = profiler

    def stop(self) -> list[dict[str, Any]]:
        """Stop the profiler; its CPU events on d5's time base."""
        profiler, self._profile = self._profile, None
        if profiler is None:
            return []
        profiler.stop()
        offset = wall_offset_ns()
        results = profiler.profiler.kineto_results if profiler.profiler is not None else None
        if results is None:
            return []
        return [_event(e, offset, self.level == "full") for e in results.events() if _kept(e)]


def _kept(event: Any) -> bool:
    """Whether ``event`` is a CPU event that belongs in the trace."""
    from torch._C._autograd import DeviceType

    return bool(
        event.device_type() == DeviceType.CPU and not event.is_hidden_event() and event.name()
    )


def _event(event: Any, offset_ns: int, shapes: bool) -> dict[str, Any]:
    """One torch profiler event as a Chrome complete event on d5's time base."""
    args: dict[str, Any] = {"kind": str(event.activity_type())}
    if shapes:
        found = [list(s) for s in event.shapes()]
        if any(found):
            args["input_shapes"] = found
    return {
        "name": event.name(),
        "ph": "X",
        "ts": (int(event.start_ns()) - offset_ns) / 1000.0,
        "dur": max(int(event.duration_ns()), 0) / 1000.0,
        "tid": int(event.device_resource_id()),
        "args": args,
    }
