"""The level 3 hooks of d5-plugin-torchdist: the torchrun launcher (for gloo only),
torchrun's ranks recognised, torchrun's report read, the environment read by the
communicator, and a real 2-rank job under torchrun."""

from __future__ import annotations

import subprocess
import sys

import pytest
from d5_plugin_torchdist import launch
from d5_plugin_torchdist.comm import rendezvous

from d5core.api import UsageError, get_plugin_manager

#: What torchrun writes when rank 1 is killed and it stops rank 0 (pids vary).
TORCHRUN_REPORT = """\
W1129 19:41:08.969000 5773 torch/distributed/elastic/multiprocessing/api.py:1028] Sending process 5785 closing signal SIGTERM
E1129 19:41:08.973000 5773 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -9) local_rank: 1 (pid: 5786) of binary: /venv/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
======================================================
run FAILED
------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-29_19:41:08
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 5785)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 5785
------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-29_19:41:08
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 5786)  (SIGKILL)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 5786
======================================================
"""  # noqa: E501


def test_the_launcher_is_offered_for_gloo_only() -> None:
    hook = get_plugin_manager().hook.d5_rank_launcher
    launcher = hook(communicator="gloo")
    assert (launcher.name, launcher.communicator) == ("torchrun", "gloo")
    cmd = launcher.command(3, ["python", "-m", "d5core"])
    assert cmd[0] == launch.torchrun_path()
    assert cmd[1:] == ["--standalone", "--nproc-per-node", "3", "--no-python",
                       "python", "-m", "d5core"]  # fmt: skip
    default = hook(communicator=None)
    assert default is None or default.communicator != "gloo"  # mpiexec stays the default


def test_without_torchrun_the_launcher_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(launch.sys, "executable", "/nonexistent/python")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(UsageError, match=r"^no torchrun found: install torch"):
        get_plugin_manager().hook.d5_rank_launcher(communicator="gloo")


def test_the_launcher_hides_torchrun_log_lines_only() -> None:
    launcher = launch.TorchrunLauncher("/usr/bin/torchrun")
    first = TORCHRUN_REPORT.splitlines(keepends=True)[0]
    assert launcher.hides(first)
    assert not launcher.hides("run 1234: complete after 2 epochs\n")
    assert not launcher.hides("  rank      : 1 (local_rank: 1)\n")


def test_torchrun_report_names_the_root_cause_rank_and_its_signal() -> None:
    diagnose = get_plugin_manager().hook.d5_diagnose_rank_failure
    assert diagnose(launcher="torchrun", rank=1, pid=5786, output=TORCHRUN_REPORT) == (
        "rank 1 exited with signal 9"
    )
    assert diagnose(launcher="torchrun", rank=1, pid=None, output=TORCHRUN_REPORT) == (
        "rank 1 exited with signal 9"
    )
    # rank 0 was only stopped by torchrun after rank 1 died: not the cause
    assert diagnose(launcher="torchrun", rank=0, pid=5785, output=TORCHRUN_REPORT) is None
    assert diagnose(launcher="torchrun", rank=1, pid=1111, output=TORCHRUN_REPORT) is None
    assert launch.diagnose("mpiexec", 1, 5786, TORCHRUN_REPORT) is None
    assert launch.diagnose("torchrun", 1, 5786, "no report") is None


def test_torchrun_ranks_are_detected_with_the_gloo_communicator() -> None:
    detect = get_plugin_manager().hook.d5_detect_launcher
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "x"}
    assert detect(environ=env) == {
        "launcher": "torchrun", "rank": 1, "size": 2, "communicator": "gloo",
    }  # fmt: skip
    # torchrun inside an MPI or Slurm allocation: torchrun's rank wins
    both = {**env, "PMI_RANK": "0", "PMI_SIZE": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}
    assert detect(environ=both)["launcher"] == "torchrun"
    plain = {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}
    assert launch.detect(plain) == {"launcher": "torch.distributed", "rank": 0, "size": 2,
                                    "communicator": "gloo"}  # fmt: skip
    assert launch.detect({"RANK": "0", "WORLD_SIZE": "2"}) is None
    assert launch.detect({"RANK": "x", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}) is None


def test_rendezvous_reads_torch_then_mpi_then_slurm_variables() -> None:
    addr = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
    assert rendezvous({"RANK": "1", "WORLD_SIZE": "2", **addr}) == (1, 2, "10.0.0.1", 29500)
    assert rendezvous({"PMI_RANK": "2", "PMI_SIZE": "4", **addr})[:2] == (2, 4)
    assert rendezvous({"SLURM_PROCID": "3", "SLURM_NTASKS": "8", **addr})[:2] == (3, 8)
    both = {"RANK": "0", "WORLD_SIZE": "2", "PMI_RANK": "1", "PMI_SIZE": "2", **addr}
    assert rendezvous(both)[:2] == (0, 2)
    assert rendezvous({}) == (0, 1, None, None)


@pytest.mark.parametrize(
    ("environ", "words"),
    [
        ({"PMI_RANK": "1", "PMI_SIZE": "2"}, "MASTER_ADDR and MASTER_PORT"),
        ({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h"}, "MASTER_ADDR and MASTER_PORT"),
        (
            {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "http"},
            "MASTER_PORT='http' is not a TCP port",
        ),
        ({"RANK": "one", "WORLD_SIZE": "2"}, "must be whole numbers"),
        ({"RANK": "2", "WORLD_SIZE": "2"}, "RANK=2 is not a rank of WORLD_SIZE=2"),
    ],
)
def test_a_bad_environment_is_one_line_saying_what_to_set(
    environ: dict[str, str], words: str
) -> None:
    with pytest.raises(UsageError) as info:
        rendezvous(environ)
    message = str(info.value)
    assert words in message and "\n" not in message


def test_listing_the_plugin_imports_no_torch() -> None:
    code = "import sys, d5_plugin_torchdist.plugin; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    assert out.stdout.strip() == "False"


def test_the_environment_facts_of_a_process_without_torch_import_no_torch() -> None:
    # every run records them: another framework's run must not pay torch's import
    code = (
        "import sys; from d5_plugin_torchdist import plugin; "
        "info = plugin.d5_environment_info(); print(info['imported'], 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    assert out.stdout.split() == ["False", "False"]


def test_the_plugin_check_runs_a_one_rank_allreduce_and_reports_nothing() -> None:
    code = (
        "from d5_plugin_torchdist import plugin; import torch.distributed as dist; "
        "print(plugin.d5_plugin_check(), dist.is_initialized(), "
        "plugin.d5_environment_info()['gloo'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)  # fmt: skip
    assert out.stdout.split() == ["[]", "False", "True"]


RANK_SCRIPT = """
import os
import numpy as np
from d5_plugin_torchdist import launch
from d5_plugin_torchdist.comm import GlooCommunicator
found = launch.detect(os.environ)
comm = GlooCommunicator()
total = comm.allreduce(np.array([comm.rank + 1.0]))
line = f"{found['launcher']} {found['rank']} {comm.rank} {comm.size} {total[0]}\\n"
os.write(1, line.encode())  # one write: the ranks share the pipe
"""


def test_ranks_started_by_the_torchrun_launcher_meet_over_gloo() -> None:
    launcher = get_plugin_manager().hook.d5_rank_launcher(communicator="gloo")
    cmd = launcher.command(2, [sys.executable, "-c", RANK_SCRIPT])
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    said = out.stdout + "".join(
        line for line in out.stderr.splitlines(keepends=True) if not launcher.hides(line)
    )
    assert out.returncode == 0, said[-3000:]
    lines = sorted(line for line in out.stdout.splitlines() if line.strip())
    assert lines == ["torchrun 0 0 2 3.0", "torchrun 1 1 2 3.0"], said[-3000:]
