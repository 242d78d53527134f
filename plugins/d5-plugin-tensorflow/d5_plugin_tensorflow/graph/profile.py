"""Per-node times of the executor's compiled graph, from TensorFlow's own profiler.

The graph runs as one ``tf.function``, so Python never sees a node start or end. Its
ops carry the name scope of the ONNX node they were made for (see
:mod:`.program`), and TensorFlow's profiler records how long each op ran; this module
runs calls under the profiler, reads the trace it writes (an ``XSpace`` protobuf) and
adds the op times up per node and direction (``gradient_tape/...`` ops are the
backward). Ops outside every node's scope (reading the results out, adding up the
gradients of a parameter used twice) are not counted; ops TensorFlow's optimizer fused
count for the node whose op survived, as in ONNX Runtime's profile.

Graphs compiled with XLA run as one compiled cluster: their calls report no node.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.graph.program import node_of_op
from d5core.api import UsageError

__all__ = ["NodeTimes", "profile_calls", "runs_from_trace"]

tf = tensorflow()

#: Per run: ``(node, op_type, direction, seconds)`` for every node that ran.
NodeTimes = list[list[tuple[str, str, str, float]]]
#: The profiler event that spans one call of a compiled function.
_CALL = "KernelAndDeviceFunc::Run"


def profile_calls(
    call: Callable[[], Any], repeats: int, by_scope: Mapping[str, tuple[str, str]]
) -> tuple[list[Any], NodeTimes]:
    """Run ``call`` ``repeats`` times under TensorFlow's profiler.

    :param by_scope: ``(node, op_type)`` of each node's name scope.
    :return: what each call returned, and the node times of each call.
    :raises UsageError: when the profiler cannot start (another profile is running).
    """
    results = []
    with tempfile.TemporaryDirectory(prefix="d5-tf-profile-") as tmp:
        options = tf.profiler.experimental.ProfilerOptions(
            host_tracer_level=2, python_tracer_level=0, device_tracer_level=0
        )
        try:
            tf.profiler.experimental.start(tmp, options=options)
        except Exception as exc:  # AlreadyExistsError, UnavailableError
            raise UsageError(f"TensorFlow's profiler cannot start: {exc}") from None
        try:
            for _ in range(repeats):
                results.append(call())
        finally:
            tf.profiler.experimental.stop()
        traces = sorted(Path(tmp).rglob("*.xplane.pb"))
        data = traces[-1].read_bytes() if traces else b""
    return results, runs_from_trace(data, repeats, by_scope)


def runs_from_trace(
    data: bytes, repeats: int, by_scope: Mapping[str, tuple[str, str]]
) -> NodeTimes:
    """Node times per call from a serialized ``XSpace``: each op event is given to the
    call (a ``KernelAndDeviceFunc::Run`` span) it started in and to its node's scope.

    Forward nodes come in graph order, then backward nodes in reverse graph order.
    """
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(data)
    order = {scope: i for i, scope in enumerate(by_scope)}
    calls: list[tuple[int, int]] = []
    ops: list[tuple[int, int, str, bool]] = []  # start, duration (ps), scope, backward
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        names = {key: meta.name for key, meta in plane.event_metadata.items()}
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            for event in line.events:
                name = names.get(event.metadata_id, "")
                start = base + event.offset_ps
                if name == _CALL:
                    calls.append((start, start + event.duration_ps))
                    continue
                op_name, colon, _ = name.rpartition(":")
                if not colon:
                    continue
                scope, backward = node_of_op(op_name)
                if scope in order:
                    ops.append((start, event.duration_ps, scope, backward))
    calls = _outermost(calls)
    totals: list[dict[tuple[str, bool], int]] = [{} for _ in calls]
    for start, duration, scope, backward in ops:
        index = next((i for i, (s, e) in enumerate(calls) if s <= start <= e), None)
        if index is not None:
            key = (scope, backward)
            totals[index][key] = totals[index].get(key, 0) + duration
    runs: NodeTimes = []
    for per_node in totals[-repeats:] if repeats else []:
        run: list[tuple[str, str, str, float]] = []
        if not per_node:  # nothing under a node's scope: a graph XLA compiled whole
            runs.append(run)
            continue
        for backward in (False, True):
            scopes = sorted((s for s, b in per_node if b is backward), key=order.__getitem__)
            if backward:
                scopes.reverse()
            else:  # every forward node, a fused or pruned one with no time of its own
                scopes = list(by_scope)
            for scope in scopes:
                node, op_type = by_scope[scope]
                seconds = per_node.get((scope, backward), 0) / 1e12
                run.append((node, op_type, "backward" if backward else "forward", seconds))
        runs.append(run)
    return runs


def _outermost(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The spans not inside another, by start."""
    kept: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if kept and start <= kept[-1][1]:
            continue
        kept.append((start, end))
    return kept
