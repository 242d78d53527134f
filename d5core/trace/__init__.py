"""Across-stack traces: d5's spans and the frameworks' own profilers on one timeline.

d5's internal plugin for ``--trace LEVEL`` and ``d5 trace``; docs/traces.md says what
each level records.

- :mod:`d5core.trace.document`: the stored trace document (Chrome trace events);
- :mod:`d5core.trace.recorder`: one process's events (bus spans, framework profilers
  through ``d5_trace_profiler``, process counters);
- :mod:`d5core.trace.capture`: traced passes of ``d5 bench``, traced blocks, storing;
- :mod:`d5core.trace.summary`: the operators that took the most time (``--top``);
- :mod:`d5core.trace.trace_cmd`: ``d5 trace``;
- :mod:`d5core.report.trace_figure` and :mod:`d5core.report.traces`: the report's timeline.
"""
