"""d5's own hooks, offered through the same hooks as any plugin's, in two plugins.

- ``core``: this module, registered through d5core's own ``d5.hooks`` entry point like any
  installed plugin (environment facts, the self-check, Slurm's launcher variables).
- ``builtins``: :data:`CATALOGUES`, d5's entries of the hooks merged by name (zoo models,
  graph passes, operator suites, learning-rate schedules). Like tox's internal plugins
  it is registered by every :class:`~d5core.plugins.PluginManager` itself, the empty one
  of the ``d5_plugin_manager`` test fixture included: they are the names d5 itself
  understands. Its implementations are ``tryfirst``, so they are called before every
  ordinary implementation, and on a name a plugin offers too d5's entry is kept and the
  clash reported, naming both (``docs/plugins/README.md``, "Calling hooks"). Each returns
  a fresh dict, so that a plugin's wrapper may change what it gets.
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from d5core._version import PLUGIN_API_VERSION, __version__
from d5core.hookspecs import hookimpl

d5_plugin_api = f"=={PLUGIN_API_VERSION}"

#: Environment variables by which launchers that start any program tell a process its
#: rank and size. Communication plugins recognise their own launchers.
_LAUNCHER_VARS: tuple[tuple[str, str, str], ...] = (("slurm", "SLURM_PROCID", "SLURM_NTASKS"),)


@hookimpl
def d5_detect_launcher(environ: Mapping[str, str]) -> Mapping[str, int | str] | None:
    for launcher, rank_var, size_var in _LAUNCHER_VARS:
        if rank_var in environ and size_var in environ:
            try:
                return {
                    "launcher": launcher,
                    "rank": int(environ[rank_var]),
                    "size": int(environ[size_var]),
                }
            except ValueError:
                continue
    return None


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    versions: dict[str, str | None] = {}
    for name in ("numpy", "scipy", "pluggy"):
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    return {"d5core": __version__, "plugin_api": PLUGIN_API_VERSION, **versions}


@hookimpl
def d5_plugin_check() -> list[str]:
    problems = []
    for module in ("numpy", "scipy.stats"):
        try:
            __import__(module)
        except Exception as exc:
            problems.append(f"cannot import {module} ({exc}); reinstall d5core")
    return problems


# -- the internal plugin: catalogues, imported when their hook is called -------------


class _Catalogues:
    """d5's entries of the merged hooks (see the module docstring)."""

    @hookimpl(tryfirst=True)
    def d5_model_zoo(self) -> Mapping[str, Callable[..., Any]]:
        from d5core.networks.zoo import ZOO

        return dict(ZOO)

    @hookimpl(tryfirst=True)
    def d5_graph_passes(self) -> Mapping[str, Callable[..., Any]]:
        from d5core.networks.passes import PASSES

        return dict(PASSES)

    @hookimpl(tryfirst=True)
    def d5_operator_shape_suites(self) -> Mapping[str, Sequence[Any]]:
        from d5core.workloads.problems import SUITES

        return dict(SUITES)

    @hookimpl(tryfirst=True)
    def d5_lr_schedules(self) -> Mapping[str, Callable[..., Any]]:
        from d5core.training.schedules import BUILTIN_SCHEDULES

        return dict(BUILTIN_SCHEDULES)

    @hookimpl(tryfirst=True)
    def d5_report_figures(self, runs: Sequence[Any], store: Any) -> list[Any]:
        from d5core.report.figures import builtin_figures

        return builtin_figures(runs, store)


#: The internal plugin ``d5core:builtins``, registered by every plugin manager.
CATALOGUES = _Catalogues()
