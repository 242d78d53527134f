"""Starting d5 under ``mpiexec``: finding it, building its command line, detecting it,
and reading what it says when a rank dies.

What d5core's level 3 hooks ask of the MPI plugin lives here: :class:`MpiexecLauncher`
(``d5_rank_launcher``), :func:`detect` (``d5_detect_launcher``) and :func:`diagnose`
(``d5_diagnose_rank_failure``).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from d5core.api import UsageError

__all__ = [
    "COMMUNICATOR",
    "LAUNCHER",
    "LAUNCHER_VARS",
    "MpiexecLauncher",
    "build_command",
    "detect",
    "diagnose",
    "launcher_info",
    "mpiexec_path",
    "under_launcher",
]

#: The launcher's name in d5's messages and in ``d5_diagnose_rank_failure``.
LAUNCHER = "mpiexec"
#: The ``d5.communication`` entry the ranks started by ``mpiexec`` use.
COMMUNICATOR = "mpi"
#: Environment variables by which MPI launchers tell a process its rank and size.
LAUNCHER_VARS: tuple[tuple[str, str, str], ...] = (
    ("mpich", "PMI_RANK", "PMI_SIZE"),
    ("open-mpi", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
)
#: Lines of MPICH's (Hydra's) termination banner: the launcher's, not a rank's output.
_BANNER = re.compile(
    r"^(=+|YOUR APPLICATION TERMINATED|This typically refers|Please see the FAQ|\s*$)"
)


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


@dataclass(frozen=True)
class MpiexecLauncher:
    """The launcher d5's ``d5_rank_launcher`` hook gets from this plugin.

    :param mpiexec: the ``mpiexec`` to run (:func:`mpiexec_path`).
    """

    mpiexec: str
    name: str = LAUNCHER
    communicator: str = COMMUNICATOR

    def command(self, ranks: int, argv: Sequence[str]) -> list[str]:
        """``mpiexec -n RANKS argv...`` (see :func:`build_command`)."""
        return build_command(ranks, argv, mpiexec=self.mpiexec)

    def hides(self, line: str) -> bool:
        """Whether ``line`` belongs to MPICH's termination banner (not echoed by d5)."""
        return bool(_BANNER.match(line))


def detect(environ: Mapping[str, str]) -> dict[str, int | str] | None:
    """``{"launcher", "rank", "size", "communicator"}`` when ``environ`` shows an MPI
    launcher (MPICH's ``PMI_*``, Open MPI's ``OMPI_COMM_WORLD_*``), else ``None``."""
    for launcher, rank_var, size_var in LAUNCHER_VARS:
        if rank_var in environ and size_var in environ:
            try:
                rank, size = int(environ[rank_var]), int(environ[size_var])
            except ValueError:
                continue
            return {"launcher": launcher, "rank": rank, "size": size, "communicator": COMMUNICATOR}
    return None


def diagnose(launcher: str, rank: int, pid: int | None, output: str) -> str | None:
    """One line for ``rank`` (process ``pid``) from MPICH's report of a bad termination
    (``PID <pid> RUNNING AT <host>`` followed by ``EXIT CODE: <signal>``), else ``None``."""
    if launcher != LAUNCHER or pid is None:
        return None
    found = re.search(rf"PID {pid} RUNNING AT .*?\n.*?EXIT CODE: (\d+)", output)
    if found is None:
        return None
    signum = int(found.group(1))
    return f"rank {rank} exited with signal {signum}" if 0 < signum < 64 else None


def launcher_info(environ: Mapping[str, str] | None = None) -> Mapping[str, int | str] | None:
    """``{"launcher", "rank", "size", ...}`` when started by a parallel launcher, else
    ``None``.

    Asks the plugins' ``d5_detect_launcher`` hooks; falls back to this plugin's own
    :func:`detect` when the plugin manager cannot be used.
    """
    env = os.environ if environ is None else environ
    try:
        from d5core.api import get_plugin_manager

        found = get_plugin_manager().hook.d5_detect_launcher(environ=env)
    except Exception:
        found = detect(env)
    return found if found else None


def under_launcher(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process is one rank of a job started by ``mpiexec``, ``srun``, ..."""
    return launcher_info(environ) is not None
