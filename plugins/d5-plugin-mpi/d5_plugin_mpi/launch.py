"""Starting d5 under ``mpiexec``: finding it, building its command line, detecting it
(and Slurm's ``srun``), and reading what it says when a rank dies.

What d5core's level 3 hooks ask of the MPI plugin lives here: :class:`MpiexecLauncher`
(``d5_rank_launcher``), :func:`detect` (``d5_detect_launcher``) and :func:`diagnose`
(``d5_diagnose_rank_failure``).

Slurm: ``srun --mpi=pmi2`` gives every task MPICH's ``PMI_RANK``/``PMI_SIZE`` and serves
the PMI requests of the ``mpich`` wheel's library, so MPI wires up and :func:`detect`
names the launcher ``slurm`` with the ``mpi`` communicator. A step without PMI
(``srun --mpi=none``) still has ``SLURM_PROCID`` and ``SLURM_STEP_NUM_TASKS``; MPI
cannot join such tasks (each is a one-rank world), so no communicator is named there
and the choice is left to ``D5_DISTRIBUTED_COMMUNICATOR`` (one that needs no PMI, such
as gloo). A batch script is not a step: Slurm sets ``SLURM_PROCID=0`` and the job's
``SLURM_NTASKS`` there too, but it is one process, so it is reported as one rank and
``d5 run`` (``--ranks N`` included) works in it as on a workstation.
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
    "SLURM",
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
#: The launcher's name for Slurm's ``srun`` (and for a Slurm batch script).
SLURM = "slurm"
#: Variables that only a Slurm job step (``srun``) sets, not the batch script.
_SLURM_STEP_VARS: tuple[str, ...] = ("SLURM_STEP_ID", "SLURM_STEPID", "SLURM_STEP_NUM_TASKS")
#: Variables MPICH's Hydra sets for its ranks, and ``srun``'s PMI-2 server does not.
_HYDRA_VARS: tuple[str, ...] = ("PMI_HOSTNAME", "HYDI_CONTROL_FD", "MPI_LOCALNRANKS")
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
    """``{"launcher", "rank", "size"[, "communicator"]}`` when ``environ`` shows a launcher
    this plugin knows, else ``None``.

    MPI's own variables come first: MPICH's ``PMI_*`` (from ``mpiexec``, or from
    ``srun --mpi=pmi2``: then the launcher is ``slurm``), Open MPI's
    ``OMPI_COMM_WORLD_*``; these name the ``mpi`` communicator. Without them, Slurm's
    ``SLURM_PROCID`` and ``SLURM_STEP_NUM_TASKS`` (else ``SLURM_NTASKS``) give the rank
    and size of a job step, with no communicator named (MPI needs PMI to join the tasks);
    in a batch script, which is no step, this process is one rank of one.
    """
    for launcher, rank_var, size_var in LAUNCHER_VARS:
        found = _ints(environ, rank_var, size_var)
        if found is not None:
            if launcher == "mpich" and _srun_pmi(environ):
                launcher = SLURM
            return {"launcher": launcher, "rank": found[0], "size": found[1],
                    "communicator": COMMUNICATOR}  # fmt: skip
    return _slurm(environ)


def _ints(environ: Mapping[str, str], rank_var: str, size_var: str) -> tuple[int, int] | None:
    try:
        return int(environ[rank_var]), int(environ[size_var])
    except (KeyError, ValueError):
        return None


def _is_step(environ: Mapping[str, str]) -> bool:
    return any(var in environ for var in _SLURM_STEP_VARS)


def _srun_pmi(environ: Mapping[str, str]) -> bool:
    """Whether the PMI variables come from ``srun``'s PMI-2 server: a job step whose task
    id and size are the PMI rank and size, and none of the variables Hydra gives its
    ranks (Hydra, started inside an allocation, runs its proxies with ``srun``, so its
    ranks carry the ``SLURM_*`` of the proxies' step)."""
    if not _is_step(environ) or any(var in environ for var in _HYDRA_VARS):
        return False
    size = environ.get("SLURM_STEP_NUM_TASKS", environ.get("SLURM_NTASKS"))
    return (environ.get("SLURM_PROCID"), size) == (environ.get("PMI_RANK"), environ.get("PMI_SIZE"))


def _slurm(environ: Mapping[str, str]) -> dict[str, int | str] | None:
    if not _is_step(environ):
        found = _ints(environ, "SLURM_PROCID", "SLURM_NTASKS")
        return None if found is None else {"launcher": SLURM, "rank": 0, "size": 1}
    size_var = "SLURM_STEP_NUM_TASKS" if "SLURM_STEP_NUM_TASKS" in environ else "SLURM_NTASKS"
    found = _ints(environ, "SLURM_PROCID", size_var)
    if found is None:
        return None
    return {"launcher": SLURM, "rank": found[0], "size": found[1]}


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
