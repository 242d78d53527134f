"""d5's own plugin: the core's features, offered through the same hooks as any plugin."""

from __future__ import annotations

import importlib.metadata as md
from collections.abc import Mapping
from typing import Any

from d5core._version import PLUGIN_API_VERSION, __version__
from d5core.hookspecs import hookimpl

d5_plugin_api = f"=={PLUGIN_API_VERSION}"

#: Environment variables by which common launchers tell a process its rank and size.
_LAUNCHER_VARS: tuple[tuple[str, str, str], ...] = (
    ("mpich", "PMI_RANK", "PMI_SIZE"),
    ("open-mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("slurm", "SLURM_PROCID", "SLURM_NTASKS"),
)


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
    for name in ("numpy", "scipy", "pluggy", "stevedore"):
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
