"""Data-parallel training checks for executor plugins (level 3), run over MPI.

:func:`assert_ranks_end_where_one_process_ends` launches ranks of this module (each
trains the digits MLP in float64 on its partition of a shuffled epoch under the
``allreduce`` scheme and saves its parameters), then trains one process on the ranks'
combined batch and checks that every rank ends where it ends. A rank runs as::

    mpiexec -n 2 python -m d5core.testing.distributed OUT EXECUTOR OPTIMIZER

:func:`d5_run_on_ranks` runs ``d5 run --ranks N`` on a recipe. Both need MPI:
:func:`mpi_unavailable` says why a test should skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "BATCH",
    "LR",
    "SEED",
    "STEPS",
    "assert_ranks_end_where_one_process_ends",
    "d5_run_on_ranks",
    "launcher_free_environment",
    "mpi_unavailable",
    "rank_main",
]

#: Steps each rank trains, examples in each rank's batch, the learning rate and the seed.
STEPS = 6
BATCH = 16
LR = 0.1
SEED = 0


def mpi_unavailable() -> str | None:
    """Why ranks cannot be launched here (no d5-plugin-mpi, mpiexec or mpi4py), or None."""
    try:
        from d5_plugin_mpi import launch  # type: ignore[import-not-found, unused-ignore]

        launch.mpiexec_path()
        import mpi4py  # noqa: F401
    except Exception as exc:
        return f"no MPI to launch ranks with ({exc})"
    return None


def launcher_free_environment() -> dict[str, str]:
    """This process's environment without a launcher's (``PMI_*``) or a test hook's
    (``D5_TEST_*``) variables, for a child that launches ranks itself."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "D5_TEST_"))}


def d5_run_on_ranks(recipe: Path, sets: Sequence[str], ranks: int, db: Path) -> dict[str, Any]:
    """Run ``d5 run recipe --set ... --ranks N --json`` as a command and return its one
    run, checked to have completed and passed."""
    from d5core.testing.kernel import read_json

    d5 = Path(sys.executable).with_name("d5")
    cmd = [str(d5), "run", str(recipe), *[a for s in sets for a in ("--set", s)],
           "--ranks", str(ranks), "--db", str(db), "--json"]  # fmt: skip
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env=launcher_free_environment(), timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    (doc,) = read_json(proc.stdout, "run")["runs"]
    assert doc["status"] == "complete" and doc["passed"] is True
    return dict(doc)


def rank_main(out: Path, executor: str, optimizer: str) -> None:
    """One rank: train :data:`STEPS` steps under ``allreduce`` and write the losses and
    parameters to ``out/rank<R>.npz``."""
    from d5core.api import get_plugin_manager, load_dataset
    from d5core.lv3.launch import RankContext, partitioned_sampler
    from d5core.testing.training import digits_trainer

    ctx = RankContext.from_environment()
    assert ctx is not None, "run me under mpiexec with at least 2 ranks"
    size = len(load_dataset("digits", "train"))
    sampler = partitioned_sampler(
        "shuffle", size, BATCH, rank=ctx.rank, world_size=ctx.size, seed=SEED, options={}
    )
    local = get_plugin_manager().load("d5.optimizers", optimizer)(lr=LR)
    wrapped = ctx.wrap_optimizer("allreduce", local, {})
    run = digits_trainer(executor, wrapped, sampler, steps=STEPS, agree=ctx.agree)
    result = run.run()
    arrays: dict[str, Any] = {k: np.array(v) for k, v in run.executor.get_parameters().items()}
    arrays["losses"] = np.asarray(result.losses)
    np.savez(out / f"rank{ctx.rank}.npz", **arrays)


def assert_ranks_end_where_one_process_ends(
    out: Path,
    executor: str,
    optimizer: str,
    launch_command: Callable[[int, list[str]], list[str]],
    *,
    ranks: int = 2,
    native: bool | None = None,
) -> None:
    """Launch ``ranks`` ranks of :func:`rank_main` with ``launch_command(ranks, argv)``
    and check that each ends with the parameters of one process trained on the combined
    batch (``native`` as that process's trainer takes it), and that the ranks' mean loss
    is its loss."""
    from d5core.api import get_plugin_manager, load_dataset
    from d5core.testing.training import digits_trainer, make_sampler

    argv = [sys.executable, "-m", __name__, str(out), executor, optimizer]
    proc = subprocess.run(
        launch_command(ranks, argv), capture_output=True, text=True,
        env=launcher_free_environment(), timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    got_ranks = [dict(np.load(out / f"rank{r}.npz")) for r in range(ranks)]

    size = len(load_dataset("digits", "train"))
    sampler = make_sampler("shuffle", size, ranks * BATCH, seed=SEED)
    opt = get_plugin_manager().load("d5.optimizers", optimizer)(lr=LR)
    single = digits_trainer(executor, opt, sampler, steps=STEPS, native=native)
    result = single.run()
    expected = single.executor.get_parameters()
    assert len(result.losses) == STEPS
    for r, got in enumerate(got_ranks):
        assert len(got["losses"]) == STEPS
        for name, value in expected.items():
            assert got[name].dtype == np.float64
            np.testing.assert_allclose(got[name], value, rtol=0, atol=1e-6, err_msg=f"rank {r}")
    # each rank's loss is the mean over its share of the combined batch
    mean = np.mean([got["losses"] for got in got_ranks], axis=0)
    np.testing.assert_allclose(mean, result.losses, rtol=1e-12)


if __name__ == "__main__":
    rank_main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
