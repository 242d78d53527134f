"""Starting d5 under ``mpiexec``: finding it, building its command line, detecting it."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from d5core.errors import UsageError

__all__ = ["build_command", "launcher_info", "mpiexec_path", "under_launcher"]


def mpiexec_path() -> str:
    """The ``mpiexec`` next to this Python (a venv with ``mpich``) first, then on ``PATH``."""
    here = Path(sys.executable).parent / "mpiexec"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which("mpiexec")
    if found:
        return found
    raise UsageError("no mpiexec found: install mpich (pip install mpich) or a system MPI")


@functools.lru_cache(maxsize=8)
def _is_open_mpi(mpiexec: str) -> bool:
    try:
        out = subprocess.run(
            [mpiexec, "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    text = out.stdout + out.stderr
    return "Open MPI" in text or "OpenRTE" in text or "open-mpi" in text.lower()


def build_command(
    n: int, argv: Sequence[str], *, extra: Iterable[str] = (), mpiexec: str | None = None
) -> list[str]:
    """``mpiexec -n N [extra...] argv...``; Open MPI run as root gets the flags it needs.

    MPICH's hydra runs as root and oversubscribed without flags; Open MPI needs
    ``--allow-run-as-root`` (as root) and ``--oversubscribe``.
    """
    if n < 1:
        raise UsageError(f"the number of ranks must be at least 1, not {n}")
    exe = mpiexec or mpiexec_path()
    cmd = [exe, "-n", str(n)]
    if _is_open_mpi(exe):
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd.append("--oversubscribe")
    cmd.extend(extra)
    cmd.extend(argv)
    return cmd


def launcher_info(environ: Mapping[str, str] | None = None) -> Mapping[str, int | str] | None:
    """``{"launcher", "rank", "size"}`` when started by a parallel launcher, else ``None``.

    Asks the plugins' ``d5_detect_launcher`` hooks; falls back to d5core's own detection
    when the plugin manager cannot be used.
    """
    env = os.environ if environ is None else environ
    try:
        from d5core.plugins.manager import get_plugin_manager

        found = get_plugin_manager().hook.d5_detect_launcher(environ=env)
    except Exception:
        from d5core.builtin import d5_detect_launcher

        found = d5_detect_launcher(env)
    return found if found else None


def under_launcher(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is one rank of a job started by ``mpiexec``, ``srun``, ..."""
    return launcher_info(environ) is not None
