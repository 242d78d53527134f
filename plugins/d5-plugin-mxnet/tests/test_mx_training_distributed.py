"""Data-parallel training on the mxnet executor (level 3): ``d5 run --ranks 2`` passes
over MPI, and two allreduce ranks end where one process ends on the 2x batch (float64)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from d5core.cli.output import read_json
from d5core.plugins import get_plugin_manager
from d5core.training.datasets import load_dataset
from d5core.training.samplers import make_sampler

pytest.importorskip("mxnet")

ROOT = Path(__file__).resolve().parents[3]
RECIPE = ROOT / "recipes" / "digits-mlp.toml"
D5 = Path(sys.executable).with_name("d5")
WORKER = Path(__file__).with_name("test_mx_training_distributed_worker.py")
RANKS = 2

_spec = importlib.util.spec_from_file_location("_mx_training_worker", WORKER)
assert _spec is not None and _spec.loader is not None
worker: Any = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(worker)


def _mpi_missing() -> str | None:
    try:
        from d5_plugin_mpi import launch

        launch.mpiexec_path()
        import mpi4py  # noqa: F401
    except Exception as exc:
        return f"no MPI to launch ranks with ({exc})"
    return None


pytestmark = pytest.mark.skipif(_mpi_missing() is not None, reason=str(_mpi_missing()))


def _environment() -> dict[str, str]:
    """This environment without a launcher's or a test hook's variables."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "D5_TEST_"))}


def test_d5_run_on_two_ranks_with_the_mxnet_executor_passes(tmp_path: Path) -> None:
    cmd = [str(D5), "run", str(RECIPE), "--set", "executor=mxnet", "--set",
           "optimizer=mx-momentum", "--ranks", str(RANKS), "--db", str(tmp_path / "r.sqlite"),
           "--json"]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=_environment(), timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (doc,) = read_json(proc.stdout, "run")["runs"]
    assert doc["status"] == "complete" and doc["passed"] is True
    assert doc["metrics"]["final_test_accuracy"] >= 0.9
    assert doc["distributed"]["ranks"] == RANKS and doc["distributed"]["scheme"] == "allreduce"


def test_two_allreduce_ranks_end_where_one_process_ends_on_the_double_batch(
    tmp_path: Path,
) -> None:
    from d5_plugin_mpi import launch

    optimizer = "mx-momentum"
    argv = [sys.executable, str(WORKER), str(tmp_path), "mxnet", optimizer]
    proc = subprocess.run(
        launch.build_command(RANKS, argv), capture_output=True, text=True,
        env=_environment(), timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [dict(np.load(tmp_path / f"rank{r}.npz")) for r in range(RANKS)]

    size = len(load_dataset("digits", "train"))
    sampler = make_sampler("shuffle", size, RANKS * worker.BATCH, seed=worker.SEED)
    opt = get_plugin_manager().load("d5.optimizers", optimizer)(lr=worker.LR)
    # the ranks step through the allreduce wrapper, on numpy arrays: so does this run
    single = worker.trainer("mxnet", opt, sampler, native=False)
    result = single.run()
    expected = single.executor.get_parameters()
    assert len(result.losses) == worker.STEPS
    for r, got in enumerate(ranks):
        assert len(got["losses"]) == worker.STEPS
        for name, value in expected.items():
            assert got[name].dtype == np.float64
            np.testing.assert_allclose(got[name], value, rtol=0, atol=1e-6, err_msg=f"rank {r}")
    # each rank's loss is the mean over its half of the double batch
    mean = np.mean([got["losses"] for got in ranks], axis=0)
    np.testing.assert_allclose(mean, result.losses, rtol=1e-12)
