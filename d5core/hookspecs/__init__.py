"""d5's hook specifications, one module per level plus measurement, results and CLI.

Plugins implement hooks with :data:`hookimpl`::

    from d5core.hookspecs import hookimpl

    @hookimpl
    def d5_environment_info():
        return {"answer": 42}

An implementation may accept fewer arguments than its specification, so hooks can grow
new arguments without breaking existing plugins.

An implementation that raises is left out of that call and reported (a
:class:`~d5core.plugins.PluginWarning` naming the plugin and the hook), unless its
specification is marked :func:`propagates`. The hooks in :data:`MERGED_HOOKS` return
mappings that d5 merges by name; a name offered twice is reported as a clash naming both
plugins, and the first offer is kept (see ``docs/plugins/README.md``, "Calling hooks").
"""

from __future__ import annotations

from types import ModuleType

from d5core.hookspecs import (
    cli,
    customop,
    distributed,
    measure,
    metrics,
    networks,
    operators,
    plugin,
    report,
    results,
    trace,
    training,
)
from d5core.hookspecs._markers import PROJECT, hookimpl, hookspec, propagates

__all__ = ["MERGED_HOOKS", "PROJECT", "SPEC_MODULES", "hookimpl", "hookspec", "propagates"]

#: Every hook specification module, in the order the reference documents them.
SPEC_MODULES: tuple[ModuleType, ...] = (
    plugin,
    operators,
    customop,
    networks,
    training,
    distributed,
    metrics,
    measure,
    results,
    report,
    trace,
    cli,
)

#: Hooks whose implementations return a mapping from name to thing, merged into one
#: catalogue by :meth:`d5core.plugins.PluginManager.merged`. d5's own entries come
#: through the same hooks, from the internal plugin ``builtins`` (:mod:`d5core.builtin`).
MERGED_HOOKS: tuple[str, ...] = (
    "d5_custom_operators",
    "d5_operator_shape_suites",
    "d5_model_zoo",
    "d5_graph_passes",
    "d5_lr_schedules",
    "d5_worker_jobs",
    "d5_results_tables",
)
