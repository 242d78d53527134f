"""The runner of ``d5 bench net``: it checks the executors, owns the run and its store
transaction, measures a step of the network on every executor in fresh worker processes,
times each node in this process when a breakdown is asked for, and stores it all. The
command only parses options and renders what this returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from d5core.lv0.bench_common import (
    DEFAULT_PROCESSES,
    Measured,
    Row,
    mark_threads,
    mark_within_noise,
    measure,
    noise_floor,
    raise_failures,
)
from d5core.lv0.bench_results import store_nested, store_startup
from d5core.lv1.runner import NetworkTiming
from d5core.trace.recorder import check_level

if TYPE_CHECKING:
    from d5core.lv0.bench_results import Gathered
    from d5core.measure.invocations import Invocations, Job
    from d5core.measure.noise import NoiseFloor

__all__ = ["NetworkBench", "bench_networks"]


@dataclass
class NetworkBench:
    """What one ``d5 bench net`` run measured and stored."""

    model: str
    batch: int
    run_id: str
    #: One row per measured executor.
    rows: list[Row]
    #: The same measurements as :class:`~d5core.lv1.runner.NetworkTiming` objects.
    timings: list[NetworkTiming]
    measured: Measured
    floor: NoiseFloor | None

    @property
    def outcome(self) -> Invocations:
        """The rounds of worker processes and each job's samples."""
        return self.measured.outcome


def bench_networks(
    model: str,
    executors: Sequence[str],
    *,
    batch: int | None = None,
    mode: str = "inference",
    seed: int = 0,
    breakdown: bool = False,
    options: Any = None,
    processes: int = DEFAULT_PROCESSES,
    cpus: list[int] | None = None,
    db: str | Path | None = None,
    tags: Sequence[str] = (),
    quiet: bool = True,
    timeout: float | None = None,
    trace: str | None = None,
) -> NetworkBench:
    """Benchmark a step of ``model`` (``mode``: ``inference`` or ``training``) on each of
    ``executors`` in fresh worker processes, stored as one run of kind ``net``.

    :param breakdown: also time every node of each executor in this process, after the
        workers, and store the nodes' times.
    :param timeout: the seconds a worker may spend on one job; a job past it fails with
        "timed out after N s" (``None``: :func:`~d5core.measure.invocations.default_timeout`).
    :param trace: a trace level: after the workers, every executor measured is traced in
        extra, untimed steps in this process, and the trace is kept with the run.
    :raises UsageError: for bad input, one line, before anything is measured.
    :raises CheckFailed: when a job failed in its worker; what was measured is stored.
    """
    from d5core.lv1.runner import network_workload
    from d5core.measure.engine import MeasureOptions
    from d5core.measure.invocations import check_timeout, default_timeout
    from d5core.results.store import ResultsStore

    names = list(executors)
    options = options if options is not None else MeasureOptions()
    limit = check_timeout(timeout) or default_timeout(options)
    workload = network_workload(model, batch=batch, mode=mode, seed=seed)
    instances = _check_executors(names, workload)
    jobs = _net_jobs(model, names, batch, mode, seed)
    config = {
        "model": model,
        "executors": names,
        "batch": workload.batch,
        "mode": mode,
        "measure": options.to_json(),
        "processes": processes,
        "cpus": cpus,
        "timeout_s": limit,
    }
    if trace is not None:
        config["trace"] = check_level(trace)
    with ResultsStore.open(db) as store:
        floor = noise_floor(store, cpus)
        with store.run(
            "net", f"bench {model}", config=config, seed=seed, tags=tuple(tags)
        ) as run_id:
            measured = measure(
                jobs, store=store, run_id=run_id, processes=processes, options=options,
                seed=seed, cpus=cpus, quiet=quiet, backends=("d5.frameworks", "executor"),
                timeout_s=limit,
            )  # fmt: skip
            chosen = instances if breakdown else {}
            rows, timings = _net_results(measured.outcome, workload, chosen, store, run_id)
            if trace is not None:
                measured_names = [t.executor for t in timings]
                _trace_networks(store, run_id, trace, workload, instances, measured_names)
            if floor is not None:
                store.update_config(run_id, {"noise_floor": floor.to_json()})
            raise_failures(measured.outcome)
    mark_within_noise(rows, floor)
    mark_threads(rows, measured)
    return NetworkBench(model, workload.batch, run_id, rows, timings, measured, floor)


def _trace_networks(
    store: Any, run_id: str, level: str, workload: Any, instances: dict[str, Any],
    names: Sequence[str],
) -> None:
    """Trace extra steps of each executor in ``names`` (untimed, after the workers) and
    keep the trace with the run."""
    from functools import partial

    from d5core.lv1.runner import prepare_step
    from d5core.trace.capture import store_trace, trace_steps
    from d5core.trace.recorder import TraceRecorder

    recorder = TraceRecorder(level, "d5 bench net")
    for name in names:
        executor = instances[name]
        trace_steps(
            recorder, name, executor, partial(prepare_step, executor, name, workload),
            model=workload.model, mode=workload.mode,
        )  # fmt: skip
    store_trace(store, run_id, recorder, kind="net", subjects=list(names),
                model=workload.model, mode=workload.mode)  # fmt: skip


def _check_executors(names: Sequence[str], workload: Any) -> dict[str, Any]:
    """Refuse, before any worker starts, an unknown executor or a training step on one
    that runs inference only; return the executors (used for ``--breakdown``)."""
    from d5core.lv1.runner import check_trains, executor_by_name

    instances = {}
    for name in names:
        executor = executor_by_name(name, workload.network)
        check_trains(executor, name, workload.mode)
        instances[name] = executor
    return instances


def _net_jobs(
    model: str, names: Sequence[str], batch: int | None, mode: str, seed: int
) -> list[Job]:
    from d5core.measure.invocations import Job

    return [
        Job(
            "net",
            {"model": model, "executor": name, "batch": batch, "mode": mode, "seed": seed},
            name=f"{name} {model} {mode}",
        )
        for name in names
    ]


def _net_results(
    outcome: Invocations, workload: Any, breakdown: dict[str, Any], store: Any, run_id: str
) -> tuple[list[Row], list[NetworkTiming]]:
    """Gather, store and describe every executor that was measured; with executors in
    ``breakdown``, time their nodes here, in this process."""
    from d5core.lv0.bench_results import gather, nested_fields

    rows, timings = [], []
    for result in outcome.jobs:
        if not result.runs:
            continue
        name = str(result.job.args["executor"])
        gathered = gather(result)
        timing = NetworkTiming(
            workload.model, name, workload.mode, workload.batch, gathered.measurement
        )
        if name in breakdown:
            from d5core.lv1.runner import fallback_nodes

            timing.per_node = _breakdown(breakdown[name], name, workload, gathered)
            timing.fallback = fallback_nodes(breakdown[name])
        _store_net_timing(store, run_id, timing, gathered)
        row = {**timing.to_json(), **nested_fields(gathered.nested)}
        rows.append(Row((workload.model, workload.mode), name, gathered, row))
        timings.append(timing)
    return rows, timings


def _breakdown(executor: Any, name: str, workload: Any, gathered: Gathered) -> Any:
    from d5core.lv1.runner import layer_breakdown, node_runs, prepare_step

    run = prepare_step(executor, name, workload)
    runs = node_runs(executor, run, workload)
    return layer_breakdown(runs, float(gathered.nested.median), executor=name, mode=workload.mode)


def _store_net_timing(store: Any, run_id: str, timing: Any, gathered: Gathered) -> None:
    """Store a step's times, start-up costs and throughput, and its per-node times when
    broken down."""
    labels = {"executor": timing.executor, "mode": timing.mode, "batch": timing.batch}
    store_nested(store, run_id, "time", timing.measurement, gathered, labels, "s")
    store_startup(store, run_id, timing.measurement, labels)
    store_nested(
        store, run_id, "throughput", timing.throughput_samples(), gathered, labels, "samples/s",
        rate_of=float(timing.batch),
    )  # fmt: skip
    per_node = timing.per_node
    if per_node is None:
        return
    if per_node.note:
        click.echo(f"d5: warning: {per_node.note}", err=True)
    if not per_node.nodes:
        return
    for node in per_node.nodes:
        node_labels = {
            **labels, "node": node.node, "op_type": node.op_type, "direction": node.direction,
        }  # fmt: skip
        if node.node in timing.fallback:  # run by the executor's fallback engine
            node_labels["fallback"] = "yes"
        store.add_measurement(run_id, "node_time", node.samples, labels=node_labels)
    store.add_metric(run_id, "node_time_sum", per_node.node_sum, labels=labels, unit="s")
