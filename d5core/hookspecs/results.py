"""Hooks about what is stored with every result."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from d5core.hookspecs._markers import hookspec

__all__ = ["d5_environment_info", "d5_result_stored", "d5_results_tables"]


# -------------------------------------------------------------------------
# Environment and storage
# -------------------------------------------------------------------------


@hookspec
def d5_environment_info() -> Mapping[str, Any] | None:
    """Add facts to the environment recorded with every run.

    Framework plugins report what only they know: the framework version, its build
    options, thread pools, visible devices. Keep it cheap; it runs once per run.

    :return: a JSON-serialisable mapping, stored under the plugin's name, or ``None``.

    Not firstresult: every plugin's facts are recorded.

    .. versionadded:: 1.0
    """


@hookspec
def d5_result_stored(run_id: str, database: str) -> None:
    """Be told that a run was committed to the results store.

    :param run_id: the run's identifier.
    :param database: the path of the store it was written to.

    Return values are ignored.

    .. versionadded:: 1.0
    """


# -------------------------------------------------------------------------
# Tables of stored runs
# -------------------------------------------------------------------------


@hookspec
def d5_results_tables() -> Mapping[str, Callable[..., None]] | None:
    """Add a table to ``d5 results table --kind KIND``: stored runs of one kind side by
    side, however many environments they come from.

    :return: a mapping from run kind (``"op"``, ``"train"``, ...) to a function
        ``table(store, runs, *, by, as_json)`` that prints the table of ``runs`` (the
        stored :class:`~d5core.results.RunRecord` objects asked for, from ``store``, a
        :class:`~d5core.results.ResultsStore` opened for reading) to standard output,
        as JSON when ``as_json`` is true; ``by`` is the ``--by`` setting that tells
        rows apart, for tables that group by one. Raise
        :class:`~d5core.errors.UsageError` for a ``by`` the table cannot group by.
        ``None`` when the plugin adds no table.

    Not firstresult: the mappings of all plugins are merged by name. d5's own tables
    (``op`` and ``net`` from levels 0 and 1, ``train`` from level 2) come from its
    internal plugins; a kind offered twice is reported as a clash naming both plugins,
    and the first offer is kept.

    .. versionadded:: 1.7
    """
