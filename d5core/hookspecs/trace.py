"""Hooks of traced runs (``--trace framework`` or ``full``): framework profilers."""

from __future__ import annotations

from typing import TYPE_CHECKING

from d5core.hookspecs._markers import hookspec

if TYPE_CHECKING:
    from d5core.tracing import TraceProfiler

__all__ = ["d5_trace_profiler"]


@hookspec
def d5_trace_profiler(executor: str, level: str, subject: object) -> TraceProfiler | None:
    """Offer a profiler whose events join the timeline of a traced run.

    Called once per traced executor, at levels ``framework`` and ``full`` only, before
    d5 prepares the traced work. d5 then calls ``start()`` on every profiler offered,
    prepares and runs the work, calls ``stop()`` and merges the events it returns with
    its own spans on one time base (:func:`d5core.tracing.trace_clock_us`). The traced
    work never produces a reported timing: ``d5 bench`` traces extra passes after its
    timed workers, and a traced ``d5 run`` is stored and shown as traced.

    :param executor: the name of what runs the work: a ``d5.frameworks`` executor or a
        ``d5.operators`` backend (``torch``, ``onnxruntime``, ``native`` ...).
    :param level: ``framework`` or ``full``.
    :param subject: the object about to be traced (a graph executor or an operator
        backend), or ``None`` when d5 has none to give (a training run); a profiler
        that needs the instance (onnxruntime turns profiling on in its session) reads
        it here.
    :return: a :class:`~d5core.tracing.TraceProfiler`, or ``None`` when the plugin
        has nothing to say about ``executor``. Import the framework lazily: only for
        an executor of your own.

    Not firstresult: every profiler offered runs (a framework's and a native kernel
    library's, say). One that raises, here or in ``start``/``stop``, is left out and
    named in the trace's notes; the traced run goes on.

    .. versionadded:: 1.12
    """
