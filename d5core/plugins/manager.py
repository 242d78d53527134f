"""The plugin manager: discovery from installed metadata, calling with pluggy.

Every manager first registers d5's internal plugins
(:data:`~d5core.plugins.groups.INTERNAL_PLUGINS`: the built-in catalogues), then, unless
it is an empty one for tests, discovers the installed plugins: it reads installed
metadata and imports each distribution's light plugin module (group ``d5.hooks``) with
:meth:`importlib.metadata.EntryPoint.load`. Components in the other groups are imported
only when a user selects one by name or runs a check. Every load happens in its own
``try``; a failure becomes the status of that one record and never reaches the others.

Every hook is called one way: through pluggy's hook relay, ``manager.hook.NAME(...)``
(:meth:`PluginManager.call_each` and :meth:`PluginManager.merged` make that same call
and also say which plugin gave what). Per-plugin failure isolation lives in one place,
:mod:`d5core.plugins.guards`: when a plugin is registered, each of its ordinary hook
implementations is wrapped in a guard that turns an exception into a reported
:class:`~d5core.plugins.problems.HookProblem` (and a :class:`PluginWarning`) and lets the
call go on. pluggy's own machinery is left alone, so ``tryfirst``/``trylast``,
``firstresult``, wrappers and tracing (:meth:`PluginManager.trace_calls`, which
``d5 --debug`` turns on) behave as pluggy documents them.
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import pluggy
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name

from d5core._version import PLUGIN_API_VERSION, __version__
from d5core.errors import PluginError
from d5core.hookspecs import MERGED_HOOKS, PROJECT, SPEC_MODULES
from d5core.hookspecs._markers import PROPAGATES_ATTR
from d5core.plugins.catalog import Catalog, discover, unmet_requirement
from d5core.plugins.groups import GROUPS, HOOKS_GROUP, INTERNAL_PLUGINS
from d5core.plugins.guards import HookOutcome, guarded, recording
from d5core.plugins.loading import load_entry_point
from d5core.plugins.problems import CLASH, FAILED, HookProblem, PluginWarning, one_line
from d5core.plugins.records import PluginRecord, Status, listing_order
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
    """d5's one plugin manager: a typed facade over pluggy, fed from entry points.

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
        self._problems: dict[str, HookProblem] = {}
        #: ``id`` of every registered plugin object, to refuse registering one twice.
        self._registered: dict[int, str] = {}
        internal = self._register_internal()
        if discover_installed:
            self._load_installed(discover())
        self.records = sorted([*internal, *self.records], key=listing_order)

    # -- public surface ---------------------------------------------------

    @property
    def hook(self) -> pluggy.HookRelay:
        """pluggy's hook relay: ``manager.hook.d5_environment_info()`` calls every plugin.

        An implementation that raises is left out of the call and reported (see
        :attr:`problems`), unless its hook is marked
        :func:`~d5core.hookspecs.propagates`.
        """
        return self._pm.hook

    @property
    def pluggy_manager(self) -> pluggy.PluginManager:
        """The underlying pluggy manager, for tools that need pluggy itself.

        It holds each plugin as registered: an object carrying the plugin's hook
        functions, each guarded (see :mod:`d5core.plugins.guards`).
        """
        return self._pm

    @property
    def problems(self) -> list[HookProblem]:
        """Every hook failure and clash reported by this manager so far, each once."""
        return list(self._problems.values())

    def register(self, plugin: object, name: str | None = None) -> str:
        """Register a plugin object (a module or an instance) that was not installed.

        :raises PluginError: when its hooks do not match the specifications, or when it
            or its name is registered already.
        :return: the name under which it was registered.
        """
        name = name or getattr(plugin, "__name__", None) or f"inline-{id(plugin)}"
        problems = hook_problems(self._pm, plugin)
        if problems:
            raise PluginError(f"plugin {name!r}: {problems[0]}")
        self._add(plugin, name)
        return name

    def trace_calls(
        self, writer: Callable[[str], object], *, width: int | None = None
    ) -> Callable[[], None]:
        """Write every hook call, its arguments and its result with ``writer``.

        This is pluggy's tracing (``pm.trace.root.setwriter`` and ``pm.enable_tracing``);
        ``d5 --debug`` turns it on, writing to standard error.

        :param width: cut each line of the trace to this many characters (a catalogue's
            result can fill pages); ``None`` keeps them whole.
        :return: a function that turns the tracing off again.
        """

        def write(text: str) -> None:
            if width is not None:
                text = "".join(
                    line if len(line) <= width + 1 else f"{line[:width]} ...\n"
                    for line in text.splitlines(keepends=True)
                )
            writer(text)

        self._pm.trace.root.setwriter(write)
        undo = self._pm.enable_tracing()

        def stop() -> None:
            undo()
            self._pm.trace.root.setwriter(None)

        return stop

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
        """Call ``hook_name`` once, through pluggy, and say what each plugin gave.

        This is ``manager.hook.NAME(**kwargs)`` (wrappers, ``tryfirst`` and
        ``firstresult`` apply), plus one :class:`HookOutcome` per ordinary
        implementation that ran, in the order pluggy called them: its plugin and its
        result, ``None`` included, or the exception it raised (which was reported and
        left out of the call, as always).
        """
        outcomes, _ = self._call(hook_name, kwargs)
        return outcomes

    def merged(self, hook_name: str, **kwargs: Any) -> dict[str, Any]:
        """Merge the mappings that the plugins' ``hook_name`` implementations return.

        One pluggy call gives the mappings, as wrappers leave them, in the order pluggy
        called the implementations; the first offer of a name is kept. A name offered
        again, a plugin that raised and a result that is not a mapping are reported as a
        :class:`PluginWarning` naming the hook and the plugins, and kept in
        :attr:`problems`. d5's own entries come from the internal ``builtins`` plugin, whose
        implementations of these hooks are ``tryfirst``: they are kept on a clash.
        """
        outcomes, results = self._call(hook_name, kwargs)
        given_by = {id(out.result): out.plugin for out in outcomes if out.result is not None}
        merged: dict[str, Any] = {}
        owner: dict[str, str] = {}
        for result in results:
            plugin = given_by.get(id(result)) or self._wrapper_names(hook_name)
            if not isinstance(result, Mapping):
                self._report(
                    HookProblem(
                        FAILED,
                        hook_name,
                        (plugin,),
                        f"plugin {plugin!r} returned {type(result).__name__} from "
                        f"{hook_name}, not a mapping from name to entry; d5 left it out",
                    )
                )
                continue
            for key, value in result.items():
                if key not in merged:
                    merged[key], owner[key] = value, plugin
                    continue
                kept = owner[key]
                self._report(
                    HookProblem(
                        CLASH,
                        hook_name,
                        (kept, plugin),
                        f"{hook_name}: {key!r} is offered by both {kept!r} and {plugin!r}; "
                        f"keeping the one from {kept!r}",
                    )
                )
        return merged

    def _wrapper_names(self, hook_name: str) -> str:
        """The plugins that wrap ``hook_name``, for an outcome no implementation gave."""
        names = [
            impl.plugin_name
            for impl in getattr(self._pm.hook, hook_name).get_hookimpls()
            if impl.wrapper or impl.hookwrapper
        ]
        return ", ".join(names) or "an unknown plugin"

    def _call(self, hook_name: str, kwargs: Mapping[str, Any]) -> tuple[list[HookOutcome], Any]:
        """The outcomes of one call of ``hook_name`` and what pluggy returned."""
        caller = getattr(self._pm.hook, hook_name)
        with recording(hook_name) as rec:
            try:
                result = caller(**kwargs)
            except Exception as exc:
                if self._propagates(hook_name):
                    raise
                # Only a wrapper gets here: ordinary implementations are guarded.
                self._failed(hook_name, self._wrapper_names(hook_name), exc)
                result = None if caller.spec and caller.spec.opts.get("firstresult") else []
        return rec.outcomes, result

    def check(self) -> list[PluginRecord]:
        """Import every enabled entry, run each plugin's ``d5_plugin_check`` and call
        every merged hook (:data:`~d5core.hookspecs.MERGED_HOOKS`) once.

        Statuses of the records are updated in place and the records returned: a
        plugin module whose self-check finds problems or raises, or whose merged hook
        raises, becomes ``failed``. Every hook problem involving a plugin, clashes
        included, is listed in its record's ``problems``; all of them are in
        :attr:`problems`.
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
                owner.error = f"its self-check raised {one_line(out.error)}"
            elif out.result:
                owner.status = Status.FAILED
                owner.error = "; ".join(str(p) for p in out.result)
        for hook_name in MERGED_HOOKS:
            self.merged(hook_name)
        for found in self.problems:
            for name in found.plugins:
                owner = by_plugin.get(name)
                if owner is None or found.message in owner.problems:
                    continue
                owner.problems.append(found.message)
                if found.kind == FAILED and owner.status is Status.OK:
                    owner.status, owner.error = Status.FAILED, found.message
        return self.records

    # -- reporting --------------------------------------------------------

    def _report(self, problem: HookProblem) -> None:
        """Keep ``problem`` and warn about it, once per manager."""
        if problem.message in self._problems:
            return
        self._problems[problem.message] = problem
        warnings.warn(PluginWarning(problem.message), stacklevel=3)

    def _failed(self, hook_name: str, plugin: str, exc: BaseException) -> None:
        self._report(
            HookProblem(
                FAILED,
                hook_name,
                (plugin,),
                f"plugin {plugin!r} failed in {hook_name} ({one_line(exc)}); d5 carried "
                f"on without it",
            )
        )

    def _propagates(self, hook_name: str) -> bool:
        """Whether exceptions of ``hook_name``'s implementations reach its caller."""
        spec = getattr(getattr(self._pm.hook, hook_name, None), "spec", None)
        return bool(spec is not None and getattr(spec.function, PROPAGATES_ATTR, False))

    def _add(self, plugin: object, name: str) -> None:
        """Register ``plugin`` with pluggy, its ordinary implementations guarded."""
        if id(plugin) in self._registered:
            raise PluginError(
                f"plugin {name!r} is registered already, as {self._registered[id(plugin)]!r}"
            )
        if self._pm.has_plugin(name):
            raise PluginError(f"a plugin named {name!r} is registered already; pick another name")
        proxy = guarded(plugin, name, propagates=self._propagates, failed=self._failed)
        self._pm.register(proxy, name)
        self._registered[id(plugin)] = name

    # -- discovery --------------------------------------------------------

    def _register_internal(self) -> list[PluginRecord]:
        """Register :data:`INTERNAL_PLUGINS`; their records, all ``ok``."""
        records = []
        for name, value in INTERNAL_PLUGINS:
            module_name, _, attr = value.partition(":")
            module = importlib.import_module(module_name)
            plugin = getattr(module, attr) if attr else module
            self._add(plugin, f"{_CORE_DISTRIBUTION}:{name}")
            records.append(
                PluginRecord(
                    name=name,
                    group=HOOKS_GROUP.name,
                    distribution=_CORE_DISTRIBUTION,
                    version=__version__,
                    value=value,
                    hooks=sorted(hook_functions(plugin)),
                )
            )
        return records

    def _load_error(self, rec: PluginRecord, exc: BaseException) -> str:
        return (
            f"importing {rec.value} raised {one_line(exc)}; fix or reinstall "
            f"{rec.distribution}, or turn it off with D5_DISABLE_PLUGINS={rec.name}"
        )

    def _load_installed(self, catalog: Catalog) -> None:
        self.records = catalog.records
        self._eps = catalog.entry_points
        dist_problem: dict[str, tuple[Status, str]] = {}
        checked: set[str] = set()  # distributions whose requirements were read (once each)
        for rec in self.records:
            key = canonicalize_name(rec.distribution)
            if key != _CORE_DISTRIBUTION:
                off = self._selection.reason_off(rec.name, rec.distribution)
                if off:
                    rec.status, rec.error = Status.DISABLED, off
                    continue
            if key not in checked:
                checked.add(key)
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
        """Import the plugin modules of ``records``, each on its own; return the loaded
        objects by record id. One that raises (anything, ``AssertionError`` included)
        becomes ``failed`` and the others load."""
        loaded: dict[int, Any] = {}
        for rec in records:
            try:
                loaded[id(rec)] = load_entry_point(self._eps[id(rec)])
            except Exception as exc:
                rec.status, rec.error = Status.FAILED, self._load_error(rec, exc)
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
            self._add(plugin, f"{rec.distribution}:{rec.name}")
        except Exception as exc:
            rec.status, rec.error = Status.FAILED, f"could not register its hooks: {one_line(exc)}"
            return
        rec.hooks = sorted(hook_functions(plugin))


def _interface_problem(group: str, obj: Any) -> str | None:
    """Why ``obj`` cannot serve as an entry of ``group``, or ``None``."""
    path = GROUPS[group].interface if group in GROUPS else ""
    if not path:
        return None
    module_name, _, attr = path.partition(":")
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
