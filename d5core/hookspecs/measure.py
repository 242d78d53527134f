"""Hooks of the measurement engine: the jobs its worker processes can build."""

from __future__ import annotations

from collections.abc import Mapping

from d5core.hookspecs._markers import hookspec

__all__ = ["d5_worker_jobs"]


# -------------------------------------------------------------------------
# Worker jobs
# -------------------------------------------------------------------------


@hookspec
def d5_worker_jobs() -> Mapping[str, str] | None:
    """Name the kinds of job that d5's measurement workers can build and time.

    ``d5 bench`` measures in fresh worker processes (``--processes``). The parent sends
    each worker a job: a kind and its JSON arguments. The worker imports the kind's
    builder and calls it with the arguments; the builder returns the zero-argument
    callable to time, or a :class:`~d5core.measure.invocations.PreparedJob` that adds
    an untimed setup, a device synchronisation and details to store. The worker loads
    no plugin to find the builder: the parent resolves the kind through this hook.

    :return: a mapping from kind (a short name, such as ``"op"``) to the builder's
        ``"module:function"`` path, or ``None``. Import nothing at module level for
        this: the path is imported in the worker only.

    Not firstresult: the mappings of all plugins are merged by name. d5's own kinds come
    from its internal plugins (the kernel's ``gemm``, ``copy``, ``pyloop`` and ``spin``,
    level 0's ``op``, level 1's ``net``); a kind offered twice is reported as a clash
    naming both plugins, and the first offer is kept. A job may also name a
    ``"module:function"`` builder directly, without this hook.

    .. versionadded:: 1.7
    """
