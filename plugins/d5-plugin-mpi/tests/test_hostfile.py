"""``mpiexec -f HOSTFILE`` (MPICH's Hydra): ranks go where the host file puts them, and
``d5 run`` started that way trains in place.

The host files name only this machine (``localhost`` and ``127.0.0.1``, which Hydra
starts without ssh), so the test runs anywhere mpiexec does; a host file naming other
machines works the same once Hydra can reach them (docs/clusters.md).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from d5_plugin_mpi import launch

from d5core.api import UsageError

RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "synthetic-cnn.toml"
#: Each rank reports where Hydra says it runs, what the plugin detects and a sum.
WORKER = """
import json, os, sys
import numpy as np
from d5_plugin_mpi import launch
from d5_plugin_mpi.comm import MPICommunicator
comm = MPICommunicator()
total = comm.allreduce(np.array([comm.rank + 1.0]))
report = {"host": os.environ.get("PMI_HOSTNAME"), "found": launch.detect(os.environ),
          "sum": float(total[0])}
with open(os.path.join(sys.argv[1], f"rank{comm.rank}.json"), "w") as out:
    json.dump(report, out)
"""


@pytest.fixture
def mpiexec() -> str:
    try:
        return launch.mpiexec_path()
    except UsageError as exc:
        pytest.skip(str(exc))


def _clean_env() -> dict[str, str]:
    """This environment less an enclosing launcher's variables and d5's test hooks."""
    drop = ("PMI_", "SLURM_", "OMPI_", "D5_TEST_", "D5_DISTRIBUTED_")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def test_ranks_are_placed_by_the_host_file(mpiexec: str, tmp_path: Path) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:1\n127.0.0.1:1\n")
    cmd = [mpiexec, "-f", str(hosts), "-n", "2", sys.executable, "-c", WORKER, str(tmp_path)]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["host"] for r in ranks] == ["localhost", "127.0.0.1"]
    assert [r["found"] for r in ranks] == [
        {"launcher": "mpich", "rank": r, "size": 2, "communicator": "mpi"} for r in (0, 1)
    ]
    assert [r["sum"] for r in ranks] == [3.0, 3.0]


def test_d5_run_under_mpiexec_with_a_host_file_trains_in_place(
    mpiexec: str, tmp_path: Path
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("localhost:2\n")
    d5 = [sys.executable, "-m", "d5core", "run", str(RECIPE), "--db", str(tmp_path / "r.db")]
    cmd = [mpiexec, "-f", str(hosts), "-n", "2", *d5, "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env(), timeout=300,
                          cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads(done.stdout)["data"]["runs"][0]
    assert run["status"] == "complete"
    rows = run["distributed"]["per_rank"]
    assert [row["rank"] for row in rows] == [0, 1]
    assert rows[0]["rank_bytes_sent"] == rows[1]["rank_bytes_received"] > 0
