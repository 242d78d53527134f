"""d5's own hooks, offered through the same hooks as any plugin's.

- ``core``: this module, registered through d5core's own ``d5.hooks`` entry point like any
  installed plugin (environment facts, the self-check, Slurm's launcher variables).
- the internal plugins (:data:`INTERNAL_PLUGINS`): ``builtins``, the kernel's commands and
  measurement jobs, and one plugin per level package (``builtins.lv0`` ... ``builtins.lv3``,
  ``builtins.loadgen``, ``builtins.report``), which bring their commands, report figures,
  worker jobs and catalogues (zoo models, graph passes, operator suites, learning-rate
  schedules). Like tox's internal plugins they are registered by every
  :class:`~d5core.plugins.PluginManager` itself, the empty one of the ``d5_plugin_manager``
  test fixture included: they are what d5 itself understands. Their implementations are
  ``tryfirst``, so they are called before every ordinary implementation, and on a name a
  plugin offers too d5's entry is kept and the clash reported, naming both
  (``docs/plugins/README.md``, "Calling hooks"). Each returns a fresh object, so that a
  plugin's wrapper may change what it gets.
"""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Mapping
from typing import Any

from d5core._version import PLUGIN_API_VERSION, __version__
from d5core.hookspecs import hookimpl

d5_plugin_api = f"=={PLUGIN_API_VERSION}"

#: Slurm's variables that exist only inside a job step (a task ``srun`` started): a batch
#: script has ``SLURM_PROCID`` and ``SLURM_NTASKS`` too, but it is one process, not a rank.
_SLURM_STEP_VARS: tuple[str, ...] = ("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS")


@hookimpl
def d5_detect_launcher(environ: Mapping[str, str]) -> Mapping[str, int | str] | None:
    """Slurm's ``srun`` starts any program: a task's rank is ``SLURM_PROCID`` and its step's
    size ``SLURM_STEP_NUM_TASKS`` (else ``SLURM_NTASKS``). Communication plugins recognise
    their own launchers (and ``srun`` with their library's process manager) first."""
    if not any(name in environ for name in _SLURM_STEP_VARS):
        return None  # not a task of a job step (a batch script, or no Slurm at all)
    size_var = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in environ else "SLURM_NTASKS"
    try:
        return {
            "launcher": "slurm",
            "rank": int(environ["SLURM_PROCID"]),
            "size": int(environ[size_var]),
        }
    except (KeyError, ValueError):
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


# -- the kernel's internal plugin ------------------------------------------------------


class _Kernel:
    """The kernel's own entries of the hooks: its commands and its measurement jobs."""

    @hookimpl(tryfirst=True)
    def d5_cli_commands(self) -> list[Any]:
        from d5core.cli.lazy import LazyCommand, LazyGroup

        return [
            LazyCommand(
                "list-plugins",
                "d5core.cli.plugins_cmd:list_plugins",
                "List installed plugins and their status (metadata only).",
            ),
            LazyGroup(
                "bench",
                help="Benchmark operators across backends, networks across executors, "
                "and communication.",
            ),
            LazyGroup("validate", help="Validate operators and networks against the reference."),
        ]

    @hookimpl(tryfirst=True)
    def d5_worker_jobs(self) -> Mapping[str, str]:
        return {
            name: f"d5core.measure.standard_jobs:{name}"
            for name in ("gemm", "copy", "pyloop", "spin")
        }


#: The internal plugin ``d5core:builtins``, registered by every plugin manager.
KERNEL = _Kernel()

#: d5's internal plugins, ``(name, "module[:attribute]")``, registered by every plugin
#: manager before any installed plugin and whatever the environment selects, as tox
#: registers its own: one package per level and the kernel's own entries. Each reaches
#: the kernel only through the hooks it implements (its commands, figures, worker jobs
#: and catalogues); this list is the one place where the kernel names them. pluggy calls
#: the plugin registered last first, so the list runs backwards: the kernel's entries
#: are called first, and level 0's figures come before level 1's.
INTERNAL_PLUGINS: tuple[tuple[str, str], ...] = (
    ("builtins.teamstore", "d5core.teamstore.plugin"),
    ("builtins.trace", "d5core.trace.plugin"),
    ("builtins.report", "d5core.report.plugin"),
    ("builtins.lv3", "d5core.lv3.plugin"),
    ("builtins.lv2", "d5core.lv2.plugin"),
    ("builtins.loadgen", "d5core.loadgen.plugin"),
    ("builtins.lv1", "d5core.lv1.plugin"),
    ("builtins.lv0", "d5core.lv0.plugin"),
    ("builtins", "d5core.builtin:KERNEL"),
)
