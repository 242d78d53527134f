"""Level 1's measurement job: a step of one network on one executor, built in the
measurement worker (the ``net`` kind of the ``d5_worker_jobs`` hook)."""

from __future__ import annotations

from d5core.measure.invocations import PreparedJob

__all__ = ["net_job"]


def net_job(model: str, executor: str, batch: int | None, mode: str, seed: int) -> PreparedJob:
    """What :func:`~d5core.lv1.bench_run.bench_networks` times for one executor: a step
    of ``model`` in ``mode`` on the seeded feeds."""
    from d5core.lv1.runner import executor_by_name, network_workload, prepare_step
    from d5core.measure.engine import synchronizer_of

    work = network_workload(model, batch=batch, mode=mode, seed=seed)
    instance = executor_by_name(executor, work.network)
    run = prepare_step(instance, executor, work)
    return PreparedJob(fn=run, synchronize=synchronizer_of(instance))
