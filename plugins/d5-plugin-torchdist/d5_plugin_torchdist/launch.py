"""Starting d5 under ``torchrun``: finding it, its command line, recognising its ranks,
and reading its report when a rank dies.

What d5core's level 3 hooks ask of this plugin lives here: :class:`TorchrunLauncher`
(``d5_rank_launcher``), :func:`detect` (``d5_detect_launcher``) and :func:`diagnose`
(``d5_diagnose_rank_failure``). Nothing here imports torch.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from d5core.api import UsageError

__all__ = [
    "COMMUNICATOR",
    "LAUNCHER",
    "TorchrunLauncher",
    "build_command",
    "detect",
    "diagnose",
    "torchrun_path",
]

#: The launcher's name in d5's messages and in ``d5_diagnose_rank_failure``.
LAUNCHER = "torchrun"
#: The ``d5.communication`` entry the ranks started by ``torchrun`` use.
COMMUNICATOR = "gloo"
#: torchrun's own log lines (glog style: ``W1129 19:40:00.123 4242 .../torch/...] ...``).
_LOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ .*\] ")
#: One failure in torchrun's report: ``rank : R (local_rank: L)`` then
#: ``exitcode : C (pid: P)``.
_FAILURE = re.compile(
    r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+) \(pid: (\d+)\)"
)


def torchrun_path() -> str:
    """The ``torchrun`` next to this Python (a venv with torch) first, then on ``PATH``."""
    here = Path(sys.executable).parent / "torchrun"
    if here.is_file() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which("torchrun")
    if found:
        return found
    raise UsageError("no torchrun found: install torch (pip install torch==2.13.0) in this Python")


def build_command(n: int, argv: Sequence[str], *, torchrun: str | None = None) -> list[str]:
    """``torchrun --standalone --nproc-per-node N --no-python argv...``.

    ``--standalone`` runs a rendezvous on this host on a free port; ``--no-python``
    runs ``argv`` as it is (it starts with the interpreter).
    """
    if n < 1:
        raise UsageError(f"the number of ranks must be at least 1, not {n}")
    exe = torchrun or torchrun_path()
    return [exe, "--standalone", "--nproc-per-node", str(n), "--no-python", *argv]


@dataclass(frozen=True)
class TorchrunLauncher:
    """The launcher d5's ``d5_rank_launcher`` hook gets from this plugin for ``gloo``.

    :param torchrun: the ``torchrun`` to run (:func:`torchrun_path`).
    """

    torchrun: str
    name: str = LAUNCHER
    communicator: str = COMMUNICATOR

    def command(self, ranks: int, argv: Sequence[str]) -> list[str]:
        """``torchrun --standalone --nproc-per-node RANKS --no-python argv...``."""
        return build_command(ranks, argv, torchrun=self.torchrun)

    def hides(self, line: str) -> bool:
        """Whether ``line`` is one of torchrun's own log lines (not echoed by d5)."""
        return bool(_LOG_LINE.match(line))


def detect(environ: Mapping[str, str]) -> dict[str, int | str] | None:
    """``{"launcher", "rank", "size", "communicator"}`` when ``environ`` shows a rank that
    torchrun (``TORCHELASTIC_RUN_ID``) or another torch launcher (``LOCAL_RANK``) started
    with ``RANK`` and ``WORLD_SIZE``, else ``None``."""
    if "RANK" not in environ or "WORLD_SIZE" not in environ:
        return None
    if "TORCHELASTIC_RUN_ID" in environ:
        launcher = LAUNCHER
    elif "LOCAL_RANK" in environ:
        launcher = "torch.distributed"
    else:
        return None
    try:
        rank, size = int(environ["RANK"]), int(environ["WORLD_SIZE"])
    except ValueError:
        return None
    return {"launcher": launcher, "rank": rank, "size": size, "communicator": COMMUNICATOR}


def diagnose(launcher: str, rank: int, pid: int | None, output: str) -> str | None:
    """One line for ``rank`` from torchrun's failure report, when its root cause (the
    first failure it observed) is that rank ended by a signal or with an exit code;
    ``None`` otherwise (the other ranks are the ones torchrun stopped after it)."""
    if launcher != LAUNCHER:
        return None
    _, marker, root = output.rpartition("Root Cause")
    found = _FAILURE.search(root) if marker else None
    if found is None or int(found.group(1)) != rank:
        return None
    if pid is not None and int(found.group(3)) != pid:
        return None
    code = int(found.group(2))
    if code < 0:
        return f"rank {rank} exited with signal {-code}"
    return f"rank {rank} exited with status {code}" if code else None
