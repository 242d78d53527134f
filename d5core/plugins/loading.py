"""stevedore managers that load exactly the entry points d5 discovered.

stevedore normally lists a group's entry points through a cache (per process and on
disk). d5 has already read fresh metadata, knows which distribution each entry comes
from, and must see plugins installed while it runs, so these managers are handed the
entry points instead of looking them up.
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Callable, Sequence
from typing import Any

import stevedore
from stevedore.extension import Extension

__all__ = ["PluginImportError", "load_entry_point", "load_entry_points"]


class PluginImportError(Exception):
    """An ``AssertionError`` raised while importing a plugin, which stevedore would let
    escape; d5 isolates it like any other import failure."""


class _GivenEntryPoints:
    """Mixin: list the given entry points and isolate every import failure."""

    _given: Sequence[md.EntryPoint]

    def list_entry_points(self) -> list[md.EntryPoint]:
        return list(self._given)

    def _load_one_plugin(self, ep: md.EntryPoint, *args: Any, **kwargs: Any) -> Any:
        try:
            return super()._load_one_plugin(ep, *args, **kwargs)  # type: ignore[misc]
        except AssertionError as exc:
            raise PluginImportError(f"AssertionError: {exc}") from exc


class _NamedManager(_GivenEntryPoints, stevedore.NamedExtensionManager):  # type: ignore[type-arg]
    def __init__(self, given: Sequence[md.EntryPoint], **kwargs: Any) -> None:
        self._given = given
        super().__init__(**kwargs)


class _DriverManager(_GivenEntryPoints, stevedore.DriverManager):  # type: ignore[type-arg]
    def __init__(self, given: md.EntryPoint, **kwargs: Any) -> None:
        self._given = [given]
        super().__init__(**kwargs)


def load_entry_points(
    entry_points: Sequence[md.EntryPoint],
    on_failure: Callable[[md.EntryPoint, BaseException], None],
) -> list[tuple[md.EntryPoint, Any]]:
    """Import ``entry_points`` (all of one group), each in isolation.

    :param on_failure: called with the entry point and the exception of each one that
        could not be imported.
    :return: pairs of entry point and loaded object, for those that loaded.
    """
    if not entry_points:
        return []
    manager = _NamedManager(
        entry_points,
        namespace=entry_points[0].group,
        names=[ep.name for ep in entry_points],
        invoke_on_load=False,
        on_load_failure_callback=lambda _m, ep, exc: on_failure(ep, exc),
        on_missing_entrypoints_callback=None,
    )
    extensions: list[Extension[Any]] = manager.extensions
    return [(ext.entry_point, ext.plugin) for ext in extensions]


def load_entry_point(entry_point: md.EntryPoint) -> Any:
    """Import one entry point and return its object; exceptions propagate."""

    def reraise(_manager: Any, _ep: Any, exc: BaseException) -> None:
        raise exc

    driver = _DriverManager(
        entry_point,
        namespace=entry_point.group,
        name=entry_point.name,
        invoke_on_load=False,
        on_load_failure_callback=reraise,
    )
    return driver.driver
