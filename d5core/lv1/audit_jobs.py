"""The measurement job of ``d5 audit net``'s caching check: one network step timed call
by call, each on a callable prepared just before it, on fresh feeds every call or on the
same feed arrays every call (see :mod:`d5core.lv0.audit_jobs`, which does the same for
an operator)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from d5core.measure.invocations import PreparedJob

if TYPE_CHECKING:
    from d5core.lv0.timed_accuracy import TimedAccuracy
    from d5core.measure.audit import OutputSample

__all__ = ["audit_net_job"]


def audit_net_job(
    model: str, executor: str, batch: int | None, mode: str, seed: int, inputs: str
) -> PreparedJob:
    """One step of ``model`` on ``executor`` timed call by call, on fresh feeds
    (``inputs="fresh"``) or the same feeds (``"same"``) every call."""
    from d5core.lv0.audit_jobs import FRESH_SEED_OFFSET, Rotation
    from d5core.lv0.timed_accuracy import TimedAccuracy, check_sampled, job_check
    from d5core.lv1.jobs import step_outputs
    from d5core.lv1.runner import executor_by_name, make_feeds, network_workload, prepare_step
    from d5core.measure.engine import synchronizer_of

    work = network_workload(model, batch=batch, mode=mode, seed=seed)
    instance = executor_by_name(executor, work.network)
    size = next(iter(work.feeds.values())).shape[0] if work.feeds else 1
    batch_of = size if work.network.inputs and work.network.inputs[0].shape else work.batch

    def make(k: int) -> Any:
        if k == 0:
            return work.feeds
        return make_feeds(work.network, batch_of, seed + FRESH_SEED_OFFSET + k)

    rotation = Rotation(
        inputs, make, lambda feeds: prepare_step(instance, executor, replace(work, feeds=feeds))
    )
    names = [o.name for o in work.network.outputs]

    def check(sample: OutputSample) -> TimedAccuracy:
        found = TimedAccuracy("unchecked", detail="no timed output was sampled")
        for k, (position, value) in enumerate(
            zip(sorted(sample.positions), sample.outputs, strict=False)
        ):
            expected = instance.inference(rotation.inputs_of(position))
            out = step_outputs(value)
            present = names
            if mode == "train-step" and isinstance(out, dict):
                present = [n for n in names if n in out]
            found = check_sampled([out], [expected[n] for n in present], names=present)
            if found.status != "pass":
                return found
            found.checked = k + 1
        return found

    return PreparedJob(
        fn=rotation.fn,
        setup=rotation.setup,
        synchronize=synchronizer_of(instance),
        details={"audit_mode": inputs},
        check=job_check(check),
    )
