"""Measurement hooks: the metric bus, device synchronisation and memory.

Metrics themselves are selected by name through the ``d5.metrics`` entry-point group.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5core.hookspecs._markers import hookspec, propagates

__all__ = [
    "d5_bus_subscribe",
    "d5_memory_peak",
    "d5_memory_reset_peak",
    "d5_synchronize",
    "d5_thread_settings",
]


# -------------------------------------------------------------------------
# The metric bus
# -------------------------------------------------------------------------


@hookspec
def d5_bus_subscribe(bus: Any) -> None:
    """Subscribe to events on the metric bus at the start of a run.

    Called once per bus, by :func:`d5core.bus.attach_plugins`: when a training run
    starts (its own bus, before ``run.start`` is published), and on the process-wide
    bus of a ``d5 bench`` worker process before it measures and of a process that
    validates an operator or a network (before the ``validation`` event).

    :param bus: the run's :class:`d5core.bus.MetricBus`; call ``bus.subscribe(name,
        callback)`` for the events to observe. Callbacks run inside measured code: keep
        them cheap and never block.

    Return values are ignored.

    .. versionadded:: 1.0
    """


# -------------------------------------------------------------------------
# Timing and memory
# -------------------------------------------------------------------------


@propagates
@hookspec
def d5_synchronize(device: str) -> None:
    """Wait until all work queued on ``device`` has finished.

    The measurement engine calls this before every clock read when the measured code
    runs on an accelerator, or is an operator or executor marked ``asynchronous``
    (MXNet's and JAX's calls return before their work is done, even on the CPU), so that
    asynchronous launches are not timed as free. A short call is timed in blocks of many
    calls between two synchronisations: the hook must wait for every call of the block,
    not only the last. A framework with no "wait for everything" of its own (JAX) keeps
    what its calls returned and waits for those; if it runs calls in the order they were
    made, waiting for the last call's results is enough.

    :param device: a device string such as ``"cpu"`` or ``"cuda:0"``. Implementations
        ignore devices they do not own.

    Raising ends the call and fails the measurement: a timing taken without
    synchronising would be wrong.

    Return values are ignored.

    .. versionadded:: 1.0
    """


@hookspec
def d5_memory_peak(device: str) -> Mapping[str, int] | None:
    """Report the peak bytes held by a framework's allocator since the last reset.

    :param device: the device string, as for :func:`d5_synchronize`.
    :return: a mapping from allocator name (``"torch.cuda"``) to peak bytes, or ``None``
        when the plugin has no allocator on that device.

    Not firstresult: the peaks of all allocators are reported side by side.

    .. versionadded:: 1.0
    """


@hookspec
def d5_memory_reset_peak(device: str) -> None:
    """Reset the peak counters reported by :func:`d5_memory_peak`.

    :param device: the device string.

    Return values are ignored.

    .. versionadded:: 1.0
    """


# -------------------------------------------------------------------------
# The machine's fitness to measure
# -------------------------------------------------------------------------


@hookspec
def d5_thread_settings() -> Mapping[str, str] | None:
    """Report the sizes of a framework's own thread pools, as they are set now.

    Called whenever d5 records whether the machine was fit to measure (before and after
    ``d5 bench``, by :func:`d5core.measure.fitness.snapshot`); the settings are stored
    with the run beside the thread environment variables (``OMP_NUM_THREADS``, ...),
    which d5 reads itself.

    Implementations must not import their framework to answer: report only what a
    framework already imported by the process says (look it up in ``sys.modules``), and
    return ``None`` otherwise.

    :return: a mapping from a setting's name (``"torch.get_num_threads()"``) to its
        value as text, or ``None``.

    One of the settings is the framework's thread count, which ``d5 bench`` compares
    across the backends it runs side by side (and warns when they differ). d5's own
    plugins are named in ``d5core.measure.fitness.THREAD_COUNT_SETTINGS``; any other
    plugin reports its count under ``"<plugin>.threads"``, ``<plugin>`` being the name
    of its ``d5.hooks`` entry point. d5's own plugins size their pools the same way: a
    positive ``OMP_NUM_THREADS``, else the cores the process may run on.

    Not firstresult: every framework's settings are recorded side by side.

    .. versionadded:: 1.1
    """
