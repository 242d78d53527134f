"""The level 3 hooks d5core calls: the mpiexec launcher, MPI's rank detection, the
reading of MPICH's report on a dead rank, and the scheme names."""

from __future__ import annotations

import importlib.metadata as md

import pytest
from d5_plugin_mpi import launch
from d5_plugin_mpi.plugin import SCHEME_NAMES

from d5core.api import UsageError, get_plugin_manager

#: What MPICH's Hydra writes when a rank is killed (pid and host vary).
HYDRA_REPORT = """\

===================================================================================
=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES
=   PID 4242 RUNNING AT build-host
=   EXIT CODE: 9
=   CLEANING UP REMAINING PROCESSES
=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES
===================================================================================
YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)
This typically refers to a problem with your application.
Please see the FAQ page for debugging suggestions
"""


def test_the_launcher_hook_offers_mpiexec_for_the_mpi_communicator() -> None:
    try:
        exe = launch.mpiexec_path()
    except UsageError:
        pytest.skip("no mpiexec")
    for communicator in (None, "mpi"):
        launcher = get_plugin_manager().hook.d5_rank_launcher(communicator=communicator)
        assert (launcher.name, launcher.communicator) == ("mpiexec", "mpi")
    cmd = launcher.command(3, ["python", "-m", "d5core"])
    assert cmd[0] == exe and cmd[1:3] == ["-n", "3"] and cmd[-3:] == ["python", "-m", "d5core"]


def test_the_launcher_hook_leaves_other_communicators_to_their_plugins() -> None:
    from d5_plugin_mpi import plugin

    assert plugin.d5_rank_launcher(communicator="gloo") is None


def test_the_launcher_hook_says_what_to_install_without_mpiexec(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def missing() -> str:
        raise UsageError("no mpiexec found: install mpich (pip install mpich) or a system MPI")

    monkeypatch.setattr(launch, "mpiexec_path", missing)
    with pytest.raises(UsageError, match="pip install mpich"):
        get_plugin_manager().hook.d5_rank_launcher(communicator=None)


def test_the_launcher_hides_mpich_banner_lines_only() -> None:
    launcher = launch.MpiexecLauncher("/usr/bin/mpiexec")
    hidden = [line for line in HYDRA_REPORT.splitlines(keepends=True) if launcher.hides(line)]
    assert "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)\n" in hidden
    assert "=" * 83 + "\n" in hidden
    assert not launcher.hides("epoch 1: loss 0.42\n")


def test_mpich_report_of_a_killed_rank_is_one_line_naming_its_signal() -> None:
    diagnose = get_plugin_manager().hook.d5_diagnose_rank_failure
    line = diagnose(launcher="mpiexec", rank=1, pid=4242, output=HYDRA_REPORT)
    assert line == "rank 1 exited with signal 9"
    assert diagnose(launcher="mpiexec", rank=0, pid=1111, output=HYDRA_REPORT) is None
    assert diagnose(launcher="mpiexec", rank=1, pid=None, output=HYDRA_REPORT) is None
    assert diagnose(launcher="srun", rank=1, pid=4242, output=HYDRA_REPORT) is None


def test_mpi_launchers_are_detected_with_the_mpi_communicator() -> None:
    detect = get_plugin_manager().hook.d5_detect_launcher
    assert detect(environ={"PMI_RANK": "1", "PMI_SIZE": "4"}) == {
        "launcher": "mpich", "rank": 1, "size": 4, "communicator": "mpi",
    }  # fmt: skip
    found = detect(environ={"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "2"})
    assert found["launcher"] == "open-mpi" and found["communicator"] == "mpi"
    assert launch.detect({"PMI_RANK": "x", "PMI_SIZE": "2"}) is None


def test_the_scheme_names_are_the_plugins_distributed_optimizers() -> None:
    from d5core.api import DistributedOptimizer

    entries = {
        ep.name: ep
        for ep in md.entry_points(group="d5.optimizers")
        if ep.dist is not None and ep.dist.name == "d5-plugin-mpi"
    }
    assert sorted(SCHEME_NAMES) == sorted(entries)
    assert all(issubclass(entries[name].load(), DistributedOptimizer) for name in SCHEME_NAMES)
    assert SCHEME_NAMES[0] == "allreduce"
    offered = get_plugin_manager().hook.d5_distribution_schemes()
    assert list(SCHEME_NAMES) in [list(names) for names in offered]
