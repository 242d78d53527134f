"""The plugin manager: discovery with stevedore, calling with pluggy.

Discovery reads installed metadata and imports each distribution's light plugin module
(group ``d5.hooks``). Components in the other groups are imported only when a user selects
one by name or runs a check. Every load happens in its own ``try``; a failure becomes the
status of that one record and never reaches the others.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pluggy
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from d5core._version import PLUGIN_API_VERSION, __version__
from d5core.errors import PluginError
from d5core.hookspecs import PROJECT, SPEC_MODULES
from d5core.plugins.catalog import Catalog, discover, unmet_requirement
from d5core.plugins.groups import GROUPS, HOOKS_GROUP
from d5core.plugins.loading import load_entry_point, load_entry_points
from d5core.plugins.records import PluginRecord, Status
from d5core.plugins.selection import Selection
from d5core.plugins.validation import hook_functions, hook_problems

__all__ = [
    "API_ATTRIBUTE",
    "HookOutcome",
    "PluginManager",
    "get_plugin_manager",
    "reset_plugin_manager",
]

#: The module attribute in which a plugin declares the plugin-API versions it supports.
API_ATTRIBUTE = "d5_plugin_api"

_CORE_DISTRIBUTION = "d5core"


@dataclass
class HookOutcome:
    """What one plugin's implementation of a hook returned, or the error it raised."""

    plugin: str
    result: Any = None
    error: BaseException | None = None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def api_problem(declared: object, distribution: str) -> str | None:
    """Why a declared plugin-API range excludes this core, or ``None`` if it includes it."""
    if declared is None:
        return (
            f"declares no plugin API range; add {API_ATTRIBUTE} = "
            f"'>={PLUGIN_API_VERSION},<{int(PLUGIN_API_VERSION.split('.')[0]) + 1}' "
            f"to its plugin module"
        )
    try:
        spec = SpecifierSet(str(declared))
    except InvalidSpecifier:
        return f"declares an invalid plugin API range {declared!r}; use a form like '>=1.0,<2'"
    if not spec.contains(PLUGIN_API_VERSION, prereleases=True):
        return (
            f"supports plugin API {declared} but d5core {__version__} offers plugin API "
            f"{PLUGIN_API_VERSION}; install a release of {distribution} made for plugin API "
            f"{PLUGIN_API_VERSION}"
        )
    return None


class PluginManager:
    """d5's one plugin manager: a typed facade over pluggy fed by stevedore.

    :param environ: the environment to read ``D5_DISABLE_PLUGINS`` and
        ``D5_LOAD_PLUGINS`` from; ``os.environ`` by default.
    :param discover_installed: load the installed plugins; ``False`` gives an empty
        manager to which plugins are added with :meth:`register` (for tests).
    """

    def __init__(
        self, environ: Mapping[str, str] | None = None, *, discover_installed: bool = True
    ) -> None:
        self._pm = pluggy.PluginManager(PROJECT)
        for module in SPEC_MODULES:
            self._pm.add_hookspecs(module)
        self._selection = Selection.from_environ(os.environ if environ is None else environ)
        self.records: list[PluginRecord] = []
        self._eps: dict[int, md.EntryPoint] = {}
        if discover_installed:
            self._load_installed(discover())

    # -- public surface ---------------------------------------------------

    @property
    def hook(self) -> pluggy.HookRelay:
        """pluggy's hook relay: ``manager.hook.d5_environment_info()`` calls every plugin."""
        return self._pm.hook

    @property
    def pluggy_manager(self) -> pluggy.PluginManager:
        """The underlying pluggy manager, for tools that need pluggy itself."""
        return self._pm

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register a plugin object (a module or an instance) that was not installed.

        :raises PluginError: when its hooks do not match the specifications.
        :return: the name under which it was registered.
        """
        name = name or getattr(plugin, "__name__", None) or f"inline-{id(plugin)}"
        problems = hook_problems(self._pm, plugin)
        if problems:
            raise PluginError(f"plugin {name!r}: {problems[0]}")
        self._pm.register(plugin, name=name)
        return name

    def names(self, group: str) -> list[str]:
        """Names of the entries of ``group`` that are usable (status ``ok``)."""
        return sorted({r.name for r in self.records if r.group == group and r.status is Status.OK})

    def record(self, group: str, name: str) -> PluginRecord:
        """The record of entry ``name`` in ``group``.

        :raises PluginError: naming the group, the name and what is installed.
        """
        matches = [r for r in self.records if r.group == group and r.name == name]
        if not matches:
            what = GROUPS[group].provides if group in GROUPS else group
            known = ", ".join(self.names(group)) or "none"
            raise PluginError(
                f"no {what} named {name!r} (installed: {known}); "
                f"'d5 list-plugins' shows every plugin and its status"
            )
        if len(matches) > 1:
            dists = ", ".join(sorted(r.distribution for r in matches))
            raise PluginError(
                f"{name!r} in {group} is offered by several distributions ({dists}); "
                f"uninstall one or disable it with D5_DISABLE_PLUGINS"
            )
        return matches[0]

    def load(self, group: str, name: str) -> Any:
        """Import and return the component ``name`` of ``group`` (a class or factory).

        :raises PluginError: when it is unknown, not ok, or fails to import; the record's
            status becomes ``failed`` in the last case.
        """
        rec = self.record(group, name)
        if rec.status is not Status.OK:
            raise PluginError(
                f"{rec.name!r} from {rec.distribution} is {rec.status.value}: {rec.error}"
            )
        try:
            return load_entry_point(self._eps[id(rec)])
        except Exception as exc:
            rec.status, rec.error = Status.FAILED, self._load_error(rec, exc)
            raise PluginError(f"{rec.name!r} from {rec.distribution}: {rec.error}") from exc

    def call_each(self, hook_name: str, **kwargs: Any) -> list[HookOutcome]:
        """Call every implementation of ``hook_name`` on its own.

        Unlike ``manager.hook.NAME(...)``, an exception in one plugin is caught and
        returned in its :class:`HookOutcome`, and the remaining plugins still run.
        Implementations run in pluggy's order: ``tryfirst`` ones first, then the most
        recently registered first.
        """
        caller = getattr(self._pm.hook, hook_name)
        outcomes: list[HookOutcome] = []
        for impl in reversed(caller.get_hookimpls()):
            args = {a: kwargs[a] for a in impl.argnames if a in kwargs}
            try:
                outcomes.append(HookOutcome(impl.plugin_name, impl.function(**args)))
            except Exception as exc:
                outcomes.append(HookOutcome(impl.plugin_name, error=exc))
        return outcomes

    def merged(self, hook_name: str, **kwargs: Any) -> tuple[dict[str, Any], list[str]]:
        """Merge the mappings returned by ``hook_name`` from all plugins.

        :return: the merged mapping and one-line problems (a plugin that raised, a name
            offered twice: the entry of the plugin called first is kept).
        """
        merged: dict[str, Any] = {}
        owner: dict[str, str] = {}
        problems: list[str] = []
        for out in self.call_each(hook_name, **kwargs):
            if out.error is not None:
                problems.append(
                    f"plugin {out.plugin!r} failed in {hook_name}: {_one_line(out.error)}"
                )
                continue
            for key, value in dict(out.result or {}).items():
                if key in merged:
                    problems.append(
                        f"{hook_name}: {key!r} is offered by both {owner[key]!r} and "
                        f"{out.plugin!r}; keeping the one from {owner[key]!r}"
                    )
                    continue
                merged[key], owner[key] = value, out.plugin
        return merged, problems

    def check(self) -> list[PluginRecord]:
        """Import every enabled entry and run each plugin's ``d5_plugin_check``.

        Statuses of the records are updated in place; the records are returned.
        """
        for rec in self.records:
            if rec.status is not Status.OK or rec.group == HOOKS_GROUP.name:
                continue
            try:
                obj = self.load(rec.group, rec.name)
            except PluginError:
                continue
            problem = _interface_problem(rec.group, obj)
            if problem:
                rec.status, rec.error = Status.FAILED, problem
        by_plugin = {
            f"{r.distribution}:{r.name}": r for r in self.records if r.group == HOOKS_GROUP.name
        }
        for out in self.call_each("d5_plugin_check"):
            owner = by_plugin.get(out.plugin)
            if owner is None:
                continue
            if out.error is not None:
                owner.status = Status.FAILED
                owner.error = f"its self-check raised {_one_line(out.error)}"
            elif out.result:
                owner.status = Status.FAILED
                owner.error = "; ".join(str(p) for p in out.result)
        return self.records

    # -- discovery --------------------------------------------------------

    def _load_error(self, rec: PluginRecord, exc: BaseException) -> str:
        return (
            f"importing {rec.value} raised {_one_line(exc)}; fix or reinstall "
            f"{rec.distribution}, or turn it off with D5_DISABLE_PLUGINS={rec.name}"
        )

    def _load_installed(self, catalog: Catalog) -> None:
        self.records = catalog.records
        self._eps = catalog.entry_points
        dist_problem: dict[str, tuple[Status, str]] = {}
        for rec in self.records:
            key = canonicalize_name(rec.distribution)
            if key != _CORE_DISTRIBUTION:
                off = self._selection.reason_off(rec.name, rec.distribution)
                if off:
                    rec.status, rec.error = Status.DISABLED, off
                    continue
            if key not in dist_problem:
                dist = catalog.distributions.get(key)
                unmet = unmet_requirement(dist) if dist is not None else None
                if unmet:
                    dist_problem[key] = (Status.FAILED, unmet)
            if key in dist_problem:
                rec.status, rec.error = dist_problem[key]

        hook_records = [
            r for r in self.records if r.group == HOOKS_GROUP.name and r.status is Status.OK
        ]
        loaded = self._import_hook_modules(hook_records)
        dists_with_hooks = set()
        for rec in hook_records:
            key = canonicalize_name(rec.distribution)
            dists_with_hooks.add(key)
            if rec.status is Status.OK:
                self._register_installed(rec, loaded[id(rec)])
            if rec.status is not Status.OK:
                dist_problem[key] = (rec.status, rec.error or "")
        for rec in self.records:
            if rec.group == HOOKS_GROUP.name or rec.status is not Status.OK:
                continue
            key = canonicalize_name(rec.distribution)
            rec.hooks = [GROUPS[rec.group].provides]
            if key in dist_problem:
                status, why = dist_problem[key]
                rec.status, rec.error = status, f"its plugin module is {status.value}: {why}"
            elif key not in dists_with_hooks and key != _CORE_DISTRIBUTION:
                rec.status = Status.INCOMPATIBLE
                rec.error = (
                    f"{rec.distribution} has no d5.hooks entry point declaring its plugin API "
                    f"range; add one (docs/plugins/tutorial.md shows how)"
                )

    def _import_hook_modules(self, records: Iterable[PluginRecord]) -> dict[int, Any]:
        """Import the plugin modules of ``records``; return loaded objects by record id."""
        by_ep = {id(self._eps[id(rec)]): rec for rec in records}
        failures: dict[int, BaseException] = {}

        def on_failure(ep: Any, exc: BaseException) -> None:
            failures[id(ep)] = exc

        loaded: dict[int, Any] = {}
        eps = [self._eps[id(rec)] for rec in by_ep.values()]
        for ep, obj in load_entry_points(eps, on_failure):
            loaded[id(by_ep[id(ep)])] = obj
        for ep_id, rec in by_ep.items():
            if ep_id in failures:
                rec.status, rec.error = Status.FAILED, self._load_error(rec, failures[ep_id])
            elif id(rec) not in loaded:
                rec.status = Status.FAILED
                rec.error = f"{rec.value} could not be imported; reinstall {rec.distribution}"
        return loaded

    def _register_installed(self, rec: PluginRecord, plugin: Any) -> None:
        problem = api_problem(getattr(plugin, API_ATTRIBUTE, None), rec.distribution)
        if problem:
            rec.status, rec.error = Status.INCOMPATIBLE, problem
            return
        problems = hook_problems(self._pm, plugin)
        if problems:
            rec.status, rec.error = Status.FAILED, problems[0]
            return
        try:
            self._pm.register(plugin, name=f"{rec.distribution}:{rec.name}")
        except Exception as exc:
            rec.status, rec.error = Status.FAILED, f"could not register its hooks: {_one_line(exc)}"
            return
        rec.hooks = sorted(hook_functions(plugin))


def _interface_problem(group: str, obj: Any) -> str | None:
    """Why ``obj`` cannot serve as an entry of ``group``, or ``None``."""
    path = GROUPS[group].interface if group in GROUPS else ""
    if not path:
        return None
    module_name, _, attr = path.partition(":")
    import importlib

    interface = getattr(importlib.import_module(module_name), attr)
    if isinstance(obj, type):
        if issubclass(obj, interface):
            return None
    elif isinstance(obj, interface) or callable(obj):
        return None
    return f"is {obj!r}, which is not a {interface.__name__}; point the entry point at one"


_lock = threading.Lock()
_manager: PluginManager | None = None


def get_plugin_manager() -> PluginManager:
    """The process-wide plugin manager, created on first use."""
    global _manager
    with _lock:
        if _manager is None:
            _manager = PluginManager()
        return _manager


def reset_plugin_manager(manager: PluginManager | None = None) -> None:
    """Replace (or forget) the process-wide manager; for tests and long-lived tools."""
    global _manager
    with _lock:
        _manager = manager
