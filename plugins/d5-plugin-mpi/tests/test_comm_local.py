"""In-process checks: entry points, plugin hooks, launcher helpers, 1-rank communicator."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys

import numpy as np
import pytest
from d5_plugin_mpi import launch

from d5core.api import COMM_CALL, Event, MetricBus, UsageError, use_bus
from d5core.testing.training import SingleProcessCommunicator


def test_entry_points() -> None:
    eps = md.entry_points()
    assert "d5_plugin_mpi.plugin" in {e.value for e in eps.select(group="d5.hooks")}
    comm = {e.name: e.value for e in eps.select(group="d5.communication")}
    assert comm["mpi"] == "d5_plugin_mpi.comm:MPICommunicator"


def test_plugin_module_does_not_import_mpi4py() -> None:
    code = "import sys, d5_plugin_mpi.plugin; print('mpi4py' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_plugin_check_and_info() -> None:
    code = (
        "from d5_plugin_mpi import plugin; print(plugin.d5_plugin_check()); "
        "i = plugin.d5_environment_info(); print(i['mpi_vendor'], i['world_size'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "[]"
    assert lines[1].endswith(" 1")


def test_under_launcher() -> None:
    assert launch.under_launcher({"PMI_RANK": "1", "PMI_SIZE": "4"})
    assert launch.under_launcher({"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"})
    assert launch.under_launcher({"SLURM_PROCID": "0", "SLURM_NTASKS": "2"})
    assert not launch.under_launcher({})


def test_build_command(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        exe = launch.mpiexec_path()
    except UsageError:
        pytest.skip("no mpiexec")
    cmd = launch.build_command(2, ["python", "x.py"], extra=["-v"])
    assert cmd[0] == exe and cmd[1:3] == ["-n", "2"] and cmd[-3:] == ["-v", "python", "x.py"]
    with pytest.raises(UsageError):
        launch.build_command(0, ["python"])


def test_mpiexec_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UsageError, match="pip install mpich"):
        launch.mpiexec_path()


def test_single_process_communicator() -> None:
    comm = SingleProcessCommunicator()
    events: list[Event] = []
    bus = MetricBus()
    bus.subscribe(COMM_CALL, events.append)
    x = np.arange(5.0)
    with use_bus(bus):
        assert np.array_equal(comm.allreduce(x), x)
        assert np.array_equal(comm.reduce_scatter(x), x)
        assert [a.tolist() for a in comm.allgather(x)] == [x.tolist()]
        assert comm.ring_neighbors() == [0, 0]
        comm.barrier()
    assert comm.counters()["calls"] == {
        "allreduce": 1,
        "reduce_scatter": 1,
        "allgather": 1,
        "barrier": 1,
    }
    assert comm.counters()["bytes_sent"] == 0 and len(events) == 4
    comm.reset_counters()
    assert comm.counters()["calls"] == {} and comm.comm_seconds == 0
