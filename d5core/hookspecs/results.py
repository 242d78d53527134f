"""Hooks about what is stored with every result."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from d5core.hookspecs._markers import hookspec, propagates

if TYPE_CHECKING:
    from d5core.results.backend import StoreBackend

__all__ = ["d5_environment_info", "d5_result_stored", "d5_results_backend", "d5_results_tables"]


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
    :param database: where the store is, as messages name it: the path of an SQLite
        file, or a database URL with any password replaced by ``***``.

    Return values are ignored.

    .. versionadded:: 1.0
    .. versionchanged:: 1.11
       ``database`` may be a URL.
    """


@propagates
@hookspec(firstresult=True)
def d5_results_backend(url: str, create: bool, timeout_s: float) -> StoreBackend | None:
    """Open the results database that a URL names (``--db URL``, ``D5_DB=URL``).

    d5 keeps results in SQLite files itself; a database named by a URL
    (``scheme://...``) is opened by the plugin that knows its scheme. d5's internal
    plugin :mod:`d5core.teamstore` opens ``postgresql://`` and ``postgres://`` URLs.

    :param url: the URL as the user gave it (it may hold a password: never show it;
        :func:`d5core.results.paths.redact_url` hides it).
    :param create: whether the store may be created: ``False`` for the commands that
        only read (``d5 results``, ``d5 report``), which must refuse an empty database.
    :param timeout_s: how long a write may wait for another writer.
    :return: a connected :class:`~d5core.results.backend.StoreBackend` (subclass it);
        the store then calls its ``prepare`` and runs its SQL through it. ``None``
        when the plugin does not open URLs of this scheme, so that another can.

    Raising :class:`~d5core.errors.UsageError` ends the call and reaches the user, as
    the one line that says what is wrong (a malformed URL, an unreachable server, a
    client library to install); nothing is stored.

    firstresult: stops at the first non-``None`` result. When every plugin returns
    ``None``, d5 refuses the URL in one line naming its scheme.

    .. versionadded:: 1.11
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
