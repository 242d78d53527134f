"""The plugin module of d5-plugin-mpi.

Nothing here imports mpi4py at module level: importing it may initialise MPI, and listing
plugins must not. The hooks import it when they are called.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5core.hookspecs import hookimpl

__all__ = ["d5_environment_info", "d5_plugin_api", "d5_plugin_check"]

d5_plugin_api = ">=1.0,<2"


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
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
