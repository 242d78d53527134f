"""The plugin module of d5-plugin-mpi.

Nothing here imports mpi4py at module level: importing it may initialise MPI, and listing
plugins must not. The hooks import it when they are called.

The level 3 hooks make ``d5 run --ranks N`` run under ``mpiexec``: the launcher, the
detection of ``mpiexec``'s ranks, the reading of MPICH's report when a rank dies, and the
names of the distribution schemes (``d5.optimizers`` entries) this plugin offers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from d5core.api import hookimpl

__all__ = [
    "SCHEME_NAMES",
    "d5_detect_launcher",
    "d5_diagnose_rank_failure",
    "d5_distribution_schemes",
    "d5_environment_info",
    "d5_plugin_api",
    "d5_plugin_check",
    "d5_rank_launcher",
]

d5_plugin_api = ">=1.9,<2"

#: This plugin's distribution schemes (its ``d5.optimizers`` entries), the default
#: ``allreduce`` first. Named here so that listing them imports no scheme.
SCHEME_NAMES: tuple[str, ...] = (
    "allreduce",
    "parameter-server",
    "async-parameter-server",
    "model-averaging",
    "dpsgd",
)


@hookimpl
def d5_rank_launcher(communicator: str | None) -> Any:
    from d5_plugin_mpi import launch

    # mpiexec is the default launcher: it answers when no communicator is named, too.
    if communicator not in (None, launch.COMMUNICATOR):
        return None
    return launch.MpiexecLauncher(launch.mpiexec_path())


@hookimpl
def d5_detect_launcher(environ: Mapping[str, str]) -> Mapping[str, int | str] | None:
    from d5_plugin_mpi import launch

    return launch.detect(environ)


@hookimpl
def d5_diagnose_rank_failure(launcher: str, rank: int, pid: int | None, output: str) -> str | None:
    from d5_plugin_mpi import launch

    return launch.diagnose(launcher, rank, pid, output)


@hookimpl
def d5_distribution_schemes() -> Sequence[str]:
    return SCHEME_NAMES


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    import os
    import sys

    from d5_plugin_mpi import launch

    if "mpi4py.MPI" not in sys.modules and launch.detect(os.environ) is not None:
        # Importing mpi4py.MPI starts MPI, which under mpiexec every rank must do together:
        # a rank whose communicator is another (gloo) would wait for the others forever.
        from importlib import metadata

        try:
            return {"mpi4py": metadata.version("mpi4py"), "initialized": False}
        except metadata.PackageNotFoundError:
            return {"mpi4py": None, "initialized": False}
    try:
        import mpi4py
        from mpi4py import MPI
    except Exception as exc:
        return {"mpi4py": None, "error": " ".join(str(exc).split())}
    vendor, version = MPI.get_vendor()
    info: dict[str, Any] = {
        "mpi4py": mpi4py.__version__,
        "mpi_vendor": vendor,
        "mpi_vendor_version": ".".join(str(v) for v in version),
        "mpi_standard": "{}.{}".format(*MPI.Get_version()),
        "mpi_library": MPI.Get_library_version().strip().splitlines()[0],
        "initialized": bool(MPI.Is_initialized()),
    }
    if MPI.Is_initialized() and not MPI.Is_finalized():
        info["world_size"] = MPI.COMM_WORLD.Get_size()
    return info


@hookimpl
def d5_plugin_check() -> list[str]:
    try:
        import numpy as np

        from d5_plugin_mpi.comm import MPICommunicator
    except Exception as exc:
        return [f"cannot import mpi4py ({' '.join(str(exc).split())}); pip install mpi4py mpich"]
    try:
        from mpi4py import MPI

        comm = MPICommunicator(MPI.COMM_SELF)
        out = comm.allreduce(np.arange(4, dtype=np.float32))
    except Exception as exc:
        return [f"MPI could not run a 1-rank allreduce: {' '.join(str(exc).split())}"]
    if not np.array_equal(out, np.arange(4, dtype=np.float32)):
        return ["MPI computed a wrong 1-rank allreduce"]
    return []
