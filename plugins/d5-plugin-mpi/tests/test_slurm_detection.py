"""Slurm: how the plugin tells an ``srun`` task, a batch script and an ``mpiexec`` rank
inside an allocation apart, from the variables each really has.

The environments below are what Slurm 22.05.8 gave (``srun -n 2 ... env`` and a batch
script's ``env``, on a one-node cluster), trimmed to the variables detection reads; the
last are ranks of MPICH's Hydra, whose proxies ``srun`` started (the first two as this
Slurm and the wheel's Hydra gave them in a batch script). A real
``srun`` run of ``d5 run`` is in tests/integration/test_slurm_run.py.
"""

from __future__ import annotations

import pytest
from d5_plugin_mpi import launch

#: Task 1 of ``srun -n 2 --mpi=pmi2``: Slurm's PMI-2 server sets MPICH's variables too.
SRUN_PMI2_TASK_1 = {
    "SLURM_JOB_ID": "1", "SLURM_STEP_ID": "0", "SLURM_STEPID": "0", "SLURM_PROCID": "1",
    "SLURM_LOCALID": "1", "SLURM_NTASKS": "2", "SLURM_STEP_NUM_TASKS": "2",
    "SLURM_STEP_NODELIST": "vm", "PMI_FD": "13", "PMI_JOBID": "1.0", "PMI_RANK": "1",
    "PMI_SIZE": "2",
}  # fmt: skip
#: The same task under ``srun -n 2 --mpi=none``: no PMI at all.
SRUN_NO_PMI_TASK_1 = {k: v for k, v in SRUN_PMI2_TASK_1.items() if not k.startswith("PMI_")}
#: A batch script of ``sbatch -n 2``: task 0 of the job's 2, but no step.
BATCH_SCRIPT = {
    "SLURM_JOB_ID": "4", "SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0",
    "SLURM_NTASKS": "2", "SLURM_NPROCS": "2",
}  # fmt: skip
#: Rank 1 of ``mpiexec -n 2`` in a batch script of ``sbatch -n 2``, as Slurm 22.05.8 and
#: the wheel's Hydra gave it: Hydra started its proxy with ``srun`` (task 0 of a one-task
#: step), and the rank got Hydra's PMI.
HYDRA_IN_ALLOCATION_RANK_1 = {
    "SLURM_JOB_ID": "12", "SLURM_STEP_ID": "0", "SLURM_PROCID": "0", "SLURM_NTASKS": "2",
    "SLURM_STEP_NUM_TASKS": "1", "PMI_FD": "6", "PMI_HOSTNAME": "vm", "PMI_RANK": "1",
    "PMI_SIZE": "2", "MPI_LOCALNRANKS": "2", "MPI_LOCALRANKID": "1",
}  # fmt: skip
#: Rank 0 of the same job: its PMI rank happens to be its proxy's task id.
HYDRA_IN_ALLOCATION_RANK_0 = {**HYDRA_IN_ALLOCATION_RANK_1, "PMI_RANK": "0", "PMI_FD": "5",
                              "MPI_LOCALRANKID": "0"}  # fmt: skip
#: Rank 1 of ``mpiexec -n 2`` over two nodes, one rank each: the proxies' step has as
#: many tasks as the job has ranks, and the ranks match the task ids.
HYDRA_ONE_RANK_PER_NODE_RANK_1 = {
    "SLURM_JOB_ID": "13", "SLURM_STEP_ID": "0", "SLURM_PROCID": "1", "SLURM_NTASKS": "2",
    "SLURM_STEP_NUM_TASKS": "2", "PMI_FD": "6", "PMI_HOSTNAME": "node2", "PMI_RANK": "1",
    "PMI_SIZE": "2", "MPI_LOCALNRANKS": "1", "MPI_LOCALRANKID": "0",
}  # fmt: skip


def test_an_srun_task_with_pmi2_is_a_slurm_rank_on_the_mpi_communicator() -> None:
    assert launch.detect(SRUN_PMI2_TASK_1) == {
        "launcher": "slurm", "rank": 1, "size": 2, "communicator": "mpi",
    }  # fmt: skip


def test_an_srun_task_without_pmi_names_no_communicator() -> None:
    # MPI cannot join tasks that have no PMI: each would be a world of one.
    assert launch.detect(SRUN_NO_PMI_TASK_1) == {"launcher": "slurm", "rank": 1, "size": 2}


def test_the_step_size_wins_over_the_jobs_task_count() -> None:
    # ``srun -n 2`` inside an allocation of 8 tasks: the step has 2.
    env = {**SRUN_NO_PMI_TASK_1, "SLURM_NTASKS": "8"}
    assert launch.detect(env) == {"launcher": "slurm", "rank": 1, "size": 2}


def test_old_slurm_steps_without_the_step_size_fall_back_to_ntasks() -> None:
    env = {"SLURM_STEPID": "0", "SLURM_PROCID": "2", "SLURM_NTASKS": "3"}
    assert launch.detect(env) == {"launcher": "slurm", "rank": 2, "size": 3}


def test_a_batch_script_is_one_rank_not_rank_0_of_the_jobs_tasks() -> None:
    assert launch.detect(BATCH_SCRIPT) == {"launcher": "slurm", "rank": 0, "size": 1}


@pytest.mark.parametrize(
    "env", [HYDRA_IN_ALLOCATION_RANK_0, HYDRA_IN_ALLOCATION_RANK_1, HYDRA_ONE_RANK_PER_NODE_RANK_1]
)
def test_hydra_inside_an_allocation_is_mpich_with_its_own_pmi_rank(env: dict[str, str]) -> None:
    assert launch.detect(env) == {
        "launcher": "mpich", "rank": int(env["PMI_RANK"]), "size": 2, "communicator": "mpi",
    }  # fmt: skip


def test_pmi_whose_rank_is_not_the_slurm_task_is_not_credited_to_srun() -> None:
    env = {**SRUN_PMI2_TASK_1, "PMI_RANK": "0"}
    assert launch.detect(env)["launcher"] == "mpich"


def test_open_mpi_variables_under_srun_still_name_open_mpi() -> None:
    env = {**SRUN_NO_PMI_TASK_1, "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"}
    assert launch.detect(env) == {
        "launcher": "open-mpi", "rank": 1, "size": 2, "communicator": "mpi",
    }  # fmt: skip


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"SLURM_JOB_ID": "3", "SLURM_NTASKS": "2"},  # salloc's shell: no task id
        {**SRUN_NO_PMI_TASK_1, "SLURM_PROCID": "x"},
        {**SRUN_NO_PMI_TASK_1, "SLURM_STEP_NUM_TASKS": "two"},
        {**BATCH_SCRIPT, "SLURM_NTASKS": ""},
    ],
)
def test_environments_that_name_no_task_are_not_detected(env: dict[str, str]) -> None:
    assert launch.detect(env) is None


def test_a_slurm_step_is_under_a_launcher() -> None:
    assert launch.under_launcher(SRUN_PMI2_TASK_1)
    assert launch.under_launcher(SRUN_NO_PMI_TASK_1)


def test_diagnosis_reads_only_mpiexecs_report_whatever_started_the_ranks() -> None:
    # The parent's launcher is always mpiexec; a rank's own launcher (srun) is never
    # passed, and srun's output is not Hydra's report.
    hydra = "=   PID 4242 RUNNING AT vm\n=   EXIT CODE: 9\n"
    assert launch.diagnose("mpiexec", 1, 4242, hydra) == "rank 1 exited with signal 9"
    assert launch.diagnose("slurm", 1, 4242, hydra) is None
    srun = "srun: error: vm: task 1: Killed\n"
    assert launch.diagnose("mpiexec", 1, 4242, srun) is None
