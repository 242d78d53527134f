"""One rank of the data-parallel check in test_mx_training_distributed.py.

Run under ``mpiexec -n N``: ``python test_mx_training_distributed_worker.py OUT EXECUTOR
OPTIMIZER``. Each rank trains the digits MLP in float64 for :data:`STEPS` steps of
:data:`BATCH` examples (its partition of a shuffled epoch) with the ``allreduce`` scheme,
then writes its parameters to ``OUT/rank<R>.npz``. The test builds the single-process
run on the ``N x BATCH`` batch with :func:`trainer` too. Importing this module runs
nothing (pytest collects it: it holds no tests).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np

STEPS = 6
BATCH = 16
LR = 0.1
SEED = 0


def trainer(
    executor: str, optimizer: Any, sampler: Any, agree: Any = None, native: bool | None = None
) -> Any:
    """A float64 digits-MLP trainer on ``executor`` that stops after :data:`STEPS`;
    ``native`` as :class:`~d5core.training.trainer.Trainer` takes it."""
    from d5core.networks import zoo
    from d5core.runners.networks import executor_by_name, with_loss
    from d5core.training.datasets import load_dataset
    from d5core.training.trainer import StopConditions, Trainer

    train = load_dataset("digits", "train")
    net = zoo.build("mlp", input_shape=tuple(train.input_shape), classes=10, hidden=[64], seed=0)
    trained, loss = with_loss(net.as_float64())
    return Trainer(
        executor_by_name(executor, trained), loss, optimizer, train, sampler,
        transforms=lambda x, rng: x.astype(np.float64),
        stop=StopConditions(max_epochs=1, max_steps=STEPS), progress=False, agree=agree,
        native=native,
    )  # fmt: skip


def main(out: Path, executor: str, optimizer: str) -> None:
    from d5core.plugins import get_plugin_manager
    from d5core.training.datasets import load_dataset
    from d5core.training.distributed import RankContext, partitioned_sampler

    ctx = RankContext.from_environment()
    assert ctx is not None, "run me under mpiexec with at least 2 ranks"
    size = len(load_dataset("digits", "train"))
    sampler = partitioned_sampler(
        "shuffle", size, BATCH, rank=ctx.rank, world_size=ctx.size, seed=SEED, options={}
    )
    local = get_plugin_manager().load("d5.optimizers", optimizer)(lr=LR)
    wrapped = ctx.wrap_optimizer("allreduce", local, {})
    run = trainer(executor, wrapped, sampler, agree=ctx.agree)
    result = run.run()
    params = {k: np.array(v) for k, v in run.executor.get_parameters().items()}
    np.savez(out / f"rank{ctx.rank}.npz", losses=np.asarray(result.losses), **params)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
