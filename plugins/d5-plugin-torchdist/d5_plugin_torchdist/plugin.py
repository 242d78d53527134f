"""The plugin module of d5-plugin-torchdist.

Nothing here imports torch at module level: listing plugins must stay fast. The hooks
import it when they are called.

The level 3 hooks make ``d5 run --ranks N --communicator gloo`` run under ``torchrun``:
the launcher (offered only for the ``gloo`` communicator, so that another plugin's
launcher stays the default), the recognition of torchrun's ranks, and the reading of
torchrun's report when a rank dies. The distribution schemes come from the plugins that
register them (d5-plugin-mpi's run on any communicator).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from d5core.api import hookimpl

__all__ = [
    "d5_detect_launcher",
    "d5_diagnose_rank_failure",
    "d5_environment_info",
    "d5_plugin_api",
    "d5_plugin_check",
    "d5_rank_launcher",
]

d5_plugin_api = ">=1.9,<2"


@hookimpl
def d5_rank_launcher(communicator: str | None) -> Any:
    from d5_plugin_torchdist import launch

    if communicator != launch.COMMUNICATOR:
        return None
    return launch.TorchrunLauncher(launch.torchrun_path())


@hookimpl(tryfirst=True)
def d5_detect_launcher(environ: Mapping[str, str]) -> Mapping[str, int | str] | None:
    # First: torchrun inside a Slurm or MPI allocation sets its own RANK/WORLD_SIZE,
    # and those, not the allocation's, are this process's.
    from d5_plugin_torchdist import launch

    return launch.detect(environ)


@hookimpl
def d5_diagnose_rank_failure(launcher: str, rank: int, pid: int | None, output: str) -> str | None:
    from d5_plugin_torchdist import launch

    return launch.diagnose(launcher, rank, pid, output)


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    if "torch" not in sys.modules:
        # Not imported by the work of this process (another framework's run): the
        # version from the metadata. Importing torch here cost every such run 2 s.
        return {"torch": _installed_version(), "imported": False}
    try:
        import torch
        import torch.distributed as dist
    except Exception as exc:
        return {"torch": None, "error": " ".join(str(exc).split())}
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "distributed": bool(dist.is_available()),
        "gloo": bool(dist.is_available() and dist.is_gloo_available()),
    }
    if dist.is_available() and dist.is_initialized():
        info["world_size"] = int(dist.get_world_size())
        info["backend"] = str(dist.get_backend())
    return info


def _installed_version() -> str | None:
    try:
        return metadata.version("torch")
    except metadata.PackageNotFoundError:
        return None


@hookimpl
def d5_plugin_check() -> list[str]:
    try:
        import numpy as np
        import torch.distributed as dist

        from d5_plugin_torchdist.comm import GlooCommunicator
    except Exception as exc:
        return [f"cannot import torch.distributed ({' '.join(str(exc).split())}); "
                "pip install torch==2.13.0"]  # fmt: skip
    if not dist.is_available() or not dist.is_gloo_available():
        return ["this torch build has no gloo backend; install a build of torch with gloo"]
    if dist.is_initialized():
        return []  # a job's group is running: a 1-rank check would disturb it
    try:
        comm = GlooCommunicator(environ={})
        out = comm.allreduce(np.arange(4, dtype=np.float32))
    except Exception as exc:
        return [f"gloo could not run a 1-rank allreduce: {' '.join(str(exc).split())}"]
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    if not np.array_equal(out, np.arange(4, dtype=np.float32)):
        return ["gloo computed a wrong 1-rank allreduce"]
    return []
