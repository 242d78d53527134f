"""The kernel's services a plugin's tests reach for: the process-wide plugin manager,
installed versions, the ``--json`` envelope and the fitness record's thread settings.

These wrap d5core's internal modules so that a plugin's tests import only
:mod:`d5core.api`, :mod:`d5core.onnx` and :mod:`d5core.testing`: when d5core moves its
internals, this kit follows and the plugins' tests do not change.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["fitness_threads", "installed_versions", "read_json", "reset_plugin_manager"]


def reset_plugin_manager(manager: Any = None) -> None:
    """Install ``manager`` as the process-wide plugin manager, or (``None``) drop the
    current one so that the next :func:`d5core.api.get_plugin_manager` discovers what is
    installed afresh."""
    from d5core.plugins import reset_plugin_manager as reset

    reset(manager)


def installed_versions(distribution: str) -> dict[str, str]:
    """The versions of ``distribution`` and of its own requirements, by name: what a
    stored result made through that plugin records."""
    from d5core.plugins.catalog import installed_versions as versions

    return versions(distribution)


def read_json(text: str, command: str | None = None) -> Any:
    """The ``data`` of a ``d5 ... --json`` output, read strictly (no ``NaN``); with
    ``command``, the envelope must be that command's."""
    from d5core.cli.output import read_json as read

    return read(text, command)


def fitness_threads(environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The thread settings the fitness record of a measurement stores now, the settings
    plugins report through ``d5_thread_settings`` included."""
    from d5core.measure.fitness import snapshot

    return dict(snapshot(environ=environ).threads)
