"""Hooks about what is stored with every result."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5core.hookspecs._markers import hookspec

__all__ = ["d5_environment_info", "d5_result_stored"]


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
