"""Level 1's measurement job: a step of one network on one executor, built in the
measurement worker (the ``net`` kind of the ``d5_worker_jobs`` hook)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from d5core.measure.invocations import PreparedJob

if TYPE_CHECKING:
    from d5core.lv0.timed_accuracy import TimedAccuracy
    from d5core.lv1.runner import NetworkWorkload
    from d5core.measure.audit import OutputSample

__all__ = ["net_job", "step_outputs", "timed_check"]


def net_job(model: str, executor: str, batch: int | None, mode: str, seed: int) -> PreparedJob:
    """What :func:`~d5core.lv1.bench_run.bench_networks` times for one executor: a step
    of ``model`` in ``mode`` on the seeded feeds, with the check that a few timed steps
    return what the untimed ``inference`` does (accuracy while timed). The time
    ``prepare_inference`` or ``prepare_train_step`` took is ``details["prepare_s"]``, beside
    what the executor's ``details()`` says (a ``compile_s`` of its own, for one)."""
    from d5core.lv0.jobs import operator_details
    from d5core.lv0.timed_accuracy import job_check
    from d5core.lv1.runner import executor_by_name, network_workload, prepare_step
    from d5core.measure.engine import synchronizer_of, timed_call

    work = network_workload(model, batch=batch, mode=mode, seed=seed)
    instance = executor_by_name(executor, work.network)
    synchronize = synchronizer_of(instance)
    run, prepare_s = timed_call(lambda: prepare_step(instance, executor, work), synchronize)
    return PreparedJob(
        fn=run,
        synchronize=synchronize,
        details={**operator_details(instance), "prepare_s": prepare_s},
        check=job_check(timed_check(instance, work, run)),
    )


#: Operators whose outputs differ from call to call (Dropout only while training).
_RANDOM = frozenset(
    {"Bernoulli", "Multinomial", "RandomNormal", "RandomNormalLike", "RandomUniform",
     "RandomUniformLike"}
)  # fmt: skip


def step_outputs(result: object) -> object:
    """The graph outputs in what a timed step returned: a training step returns
    ``(outputs by name, gradients)``; an inference step its outputs as they are."""
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], Mapping):
        return result[0]
    return result


def timed_check(
    executor: Any, work: NetworkWorkload, run: Callable[[], object]
) -> Callable[[OutputSample], TimedAccuracy]:
    """The check that the sampled return values of ``run`` hold the graph outputs the
    untimed :meth:`~d5core.levels.networks.GraphExecutor.inference` gives on the same
    feeds (computed after timing). A training step is checked on its outputs against
    an untimed :meth:`~d5core.levels.networks.GraphExecutor.inference_and_backprop`,
    which runs in the same mode (BatchNormalization on the batch's statistics); its
    gradients are compared by ``d5 validate net``."""
    from d5core.lv0.timed_accuracy import TimedAccuracy, check_sampled

    names = [o.name for o in work.network.outputs]
    to_numpy = getattr(run, "to_numpy", None)
    ops = {node.op_type for node in work.network.nodes}
    random_ops = ops & (_RANDOM | ({"Dropout"} if work.mode == "train-step" else set()))

    def check(sample: OutputSample) -> TimedAccuracy:
        sampled = sample.outputs
        if random_ops:
            return TimedAccuracy(
                "unchecked",
                detail=f"the model has random operators ({', '.join(sorted(random_ops))})",
            )
        if work.mode == "train-step":
            expected, _ = executor.inference_and_backprop(work.feeds, work.loss)
        else:
            expected = executor.inference(work.feeds)
        present = names
        steps = [step_outputs(s) for s in sampled]
        if work.mode == "train-step":  # a training step returns the outputs it computed
            first = steps[0] if steps else None
            present = [n for n in names if isinstance(first, Mapping) and n in first]
            if not present:
                return TimedAccuracy("unchecked", detail="the training step returns no output")
        return check_sampled(
            steps, [expected[n] for n in present], names=present,
            to_numpy=to_numpy if callable(to_numpy) else None,
        )  # fmt: skip

    return check
