"""``d5 run`` under a real Slurm: ``srun`` tasks train in place, a batch script runs d5
as on a workstation, and a step without PMI is refused in one line.

The module starts a one-node cluster of its own (``slurmctld`` and ``slurmd`` in the
foreground, a configuration in a temporary folder, free ports, no munge:
``auth/none``), so it needs Slurm's programs (Debian's ``slurm-wlm``) and root. Where
they are missing the tests skip, saying so; under ``CI=true`` they fail instead, since
``.ci/run`` installs Slurm as root and a lane without it must not pass silently.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.usefixtures("mpi_env")

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "digits-mlp.toml"
PROGRAMS = ("slurmctld", "slurmd", "srun", "sbatch", "sinfo")


def _missing() -> str | None:
    """Why no Slurm cluster can be started here, or ``None``."""
    absent = [p for p in PROGRAMS if shutil.which(p) is None]
    if absent:
        return f"Slurm is not installed ({', '.join(absent)} missing: apt-get install slurm-wlm)"
    if os.geteuid() != 0:
        return "a private Slurm cluster needs root (slurmd runs the tasks as root)"
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Cluster:
    """A one-node Slurm cluster in ``folder``; :meth:`env` is what its clients need."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.host = socket.gethostname().split(".")[0]
        self.conf = folder / "slurm.conf"
        (folder / "state").mkdir()
        (folder / "spool").mkdir()
        cpus = max(4, os.cpu_count() or 1)
        lines = [
            "ClusterName=d5test", f"SlurmctldHost={self.host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}", f"SlurmdPort={_free_port()}",
            "AuthType=auth/none", "CredType=cred/none", "SlurmUser=root", "SlurmdUser=root",
            f"StateSaveLocation={folder / 'state'}", f"SlurmdSpoolDir={folder / 'spool'}",
            f"SlurmctldPidFile={folder / 'slurmctld.pid'}",
            f"SlurmdPidFile={folder / 'slurmd.pid'}",
            f"SlurmctldLogFile={folder / 'slurmctld.log'}",
            f"SlurmdLogFile={folder / 'slurmd.log'}",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none", "MailProg=/bin/true",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core", "MpiDefault=none",
            "ReturnToService=2", "SlurmdParameters=config_overrides",
            f"NodeName={self.host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN",
            f"PartitionName=d5 Nodes={self.host} Default=YES MaxTime=INFINITE State=UP",
        ]  # fmt: skip
        self.conf.write_text("\n".join(lines) + "\n")
        self.daemons: list[subprocess.Popen[bytes]] = []

    def env(self, **extra: str) -> dict[str, str]:
        """This process's environment without an enclosing job's variables, pointed at
        the cluster, plus ``extra``."""
        keep = {k: v for k, v in os.environ.items()
                if not k.startswith(("SLURM_", "PMI_", "D5_TEST_", "D5_DISTRIBUTED_"))}  # fmt: skip
        return {**keep, "SLURM_CONF": str(self.conf), **extra}

    def start(self) -> None:
        for daemon in ("slurmctld", "slurmd"):
            log = (self.folder / f"{daemon}.out").open("wb")
            cmd = [daemon, "-D", "-f", str(self.conf)]
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=self.env())
            self.daemons.append(proc)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True,
                                   text=True, env=self.env(), timeout=30)  # fmt: skip
            if state.stdout.strip() == "idle":
                return
            if any(d.poll() is not None for d in self.daemons):
                break
            time.sleep(0.5)
        logs = " | ".join(
            (self.folder / f"{d}.out").read_text(errors="replace").strip().splitlines()[-1]
            for d in ("slurmctld", "slurmd") if (self.folder / f"{d}.out").stat().st_size
        )  # fmt: skip
        raise RuntimeError(f"the private Slurm cluster did not come up: {logs}")

    def stop(self) -> None:
        for daemon in self.daemons:
            daemon.terminate()
        for daemon in self.daemons:
            try:
                daemon.wait(timeout=20)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    why = _missing()
    if why is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}; CI must run the Slurm tests (.ci/run installs slurm-wlm)")
        pytest.skip(why)
    found = Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        found.start()
        yield found
    finally:
        found.stop()


def _d5(*args: str) -> list[str]:
    return [sys.executable, "-m", "d5core", *args]


def test_srun_with_pmi2_trains_every_task_in_place(cluster: Cluster, tmp_path: Path) -> None:
    db = tmp_path / "runs.db"
    cmd = ["srun", "-n", "2", "--mpi=pmi2",
           *_d5("run", str(RECIPE), "--db", str(db), "--json")]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, env=cluster.env(),
                          timeout=300, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads(done.stdout)["data"]["runs"][0]
    assert run["status"] == "complete"
    per_rank = run["distributed"]["per_rank"]
    assert [row["rank"] for row in per_rank] == [0, 1]
    assert all(row["rank_bytes_sent"] > 0 for row in per_rank)


def test_a_batch_script_runs_d5_as_on_a_workstation(cluster: Cluster, tmp_path: Path) -> None:
    # Slurm sets SLURM_PROCID=0 and SLURM_NTASKS=2 in the script: it is still one process.
    db, out = tmp_path / "runs.db", tmp_path / "job.out"
    plain = " ".join(_d5("run", str(RECIPE), "--db", str(db)))
    ranks = " ".join(_d5("run", str(RECIPE), "--ranks", "2", "--db", str(db)))
    script = tmp_path / "job.sh"
    script.write_text(
        f"#!/bin/bash\n#SBATCH -n 2\n{plain} || exit $?\n{ranks} || exit $?\necho JOB-OK\n"
    )
    done = subprocess.run(["sbatch", "-W", "-o", str(out), str(script)], capture_output=True,
                          text=True, env=cluster.env(), timeout=600, cwd=tmp_path)  # fmt: skip
    text = out.read_text(errors="replace") if out.exists() else ""
    assert done.returncode == 0 and "JOB-OK" in text, (done.stderr + text)[-2000:]
    assert text.count(": complete (") == 2


def test_srun_without_pmi_is_refused_in_one_line_per_task(cluster: Cluster, tmp_path: Path) -> None:
    cmd = ["srun", "-n", "2", "--mpi=none",
           *_d5("run", str(RECIPE), "--db", str(tmp_path / "runs.db"))]  # fmt: skip
    env = cluster.env(D5_DISTRIBUTED_COMMUNICATOR="mpi")
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)  # fmt: skip
    errors = [line for line in done.stderr.splitlines() if line.startswith("d5: error:")]
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert len(errors) == 2, done.stderr[-2000:]
    assert all("the 'mpi' communicator says rank 0 of 1" in line for line in errors)
