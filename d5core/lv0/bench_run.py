"""The runner of ``d5 bench op``: it plans the jobs (a suite, a shape or a built C++
custom operator), owns the run and its store transaction, measures every job in fresh
worker processes, and stores each timing with its nested summary, its rates and the
roofline's inputs. The command only parses options and renders what this returns; tests
and benchmarks call the same function, so there is one way to benchmark an operator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from d5core.errors import UsageError
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

if TYPE_CHECKING:
    from d5core.lv0.bench_results import Gathered
    from d5core.lv0.runner import OperatorTiming
    from d5core.lv0.workloads.problems import Problem
    from d5core.lv0.workloads.roofline import Peak
    from d5core.measure.invocations import Invocations, Job
    from d5core.measure.noise import NoiseFloor

__all__ = ["OperatorBench", "bench_operators", "operator_problems"]


@dataclass
class OperatorBench:
    """What one ``d5 bench op`` run measured and stored."""

    op: str
    run_id: str
    #: One row per measured (problem, direction, backend), in job order.
    rows: list[Row]
    #: The same measurements as :class:`~d5core.lv0.runner.OperatorTiming` objects.
    timings: list[OperatorTiming]
    measured: Measured
    floor: NoiseFloor | None
    peak: Peak
    peak_rate: float | None

    @property
    def outcome(self) -> Invocations:
        """The rounds of worker processes and each job's samples."""
        return self.measured.outcome


def bench_operators(
    op: str | None,
    problems: Sequence[Problem] | None,
    backends: Sequence[str],
    *,
    directions: Sequence[str] = ("forward",),
    dtype: str = "float32",
    seed: int = 0,
    options: Any = None,
    processes: int = DEFAULT_PROCESSES,
    cpus: list[int] | None = None,
    suite: str | None = None,
    custom: Path | None = None,
    custom_shape: str | None = None,
    custom_attributes: dict[str, Any] | None = None,
    db: str | Path | None = None,
    tags: Sequence[str] = (),
    quiet: bool = True,
    with_noise_floor: bool = True,
    timeout: float | None = None,
    trace: str | None = None,
) -> OperatorBench:
    """Benchmark ``problems`` of operator ``op`` on each of ``backends`` in fresh worker
    processes, stored as one run of kind ``op`` in the store at ``db``.

    With ``custom`` (a C++ source), the operator is built for each framework of
    ``backends`` first (one not installed is skipped with a note) and ``op`` and
    ``problems`` come from it (``custom_shape`` and ``custom_attributes`` override its
    defaults). Everything is checked before any worker starts.

    :param with_noise_floor: read (or, the first time on a machine, calibrate) the noise
        floor that rows within noise of each other are marked by; ``False`` skips it.
    :param timeout: the seconds a worker may spend on one job; a job past it fails with
        "timed out after N s" (``None``: :func:`~d5core.measure.invocations.default_timeout`).
    :param trace: a trace level: after the workers, every job measured is traced in
        extra, untimed calls in this process, and the trace is kept with the run.

    :raises UsageError: for bad input, one line, before anything is measured.
    :raises CheckFailed: when a job failed in its worker; what was measured is stored.
    """
    from d5core.lv0.runner import check_bench_request
    from d5core.lv0.workloads.roofline import cpu_peak
    from d5core.measure.engine import MeasureOptions
    from d5core.measure.invocations import check_timeout, default_timeout
    from d5core.results.store import ResultsStore

    names = list(backends)
    options = options if options is not None else MeasureOptions()
    limit = check_timeout(timeout) or default_timeout(options)
    if custom is not None:
        op, names, problems, devices, jobs, keys = _custom_plan(
            custom, names, custom_shape, custom_attributes or {}, directions, dtype, seed,
            quiet=quiet,
        )  # fmt: skip
        check_bench_request(problems, names, dtype)
    else:
        if op is None or problems is None:
            raise UsageError("give the operator and its problems (or a custom operator)")
        check_bench_request(problems, names, dtype)
        devices = _check_backends(problems, names, dtype)
        jobs, keys = _op_jobs(problems, names, directions, dtype, seed)
    peak = cpu_peak()
    peak_rate = peak.gflops.get(dtype)
    bandwidth = _memory_bandwidth()
    config = {
        "op": op,
        "custom": None if custom is None else str(custom.resolve()),
        "backends": names,
        "suite": suite,
        "problems": [p.label for p in problems],
        "directions": list(directions),
        "dtype": dtype,
        "measure": options.to_json(),
        "processes": processes,
        "cpus": cpus,
        "timeout_s": limit,
        "peak": {"gflops": peak_rate, "cores": peak.cores, "source": peak.source},
    }
    if trace is not None:
        from d5core.trace.recorder import check_level

        config["trace"] = check_level(trace)
    with ResultsStore.open(db) as store:
        floor = noise_floor(store, cpus) if with_noise_floor else None
        title = f"bench {op}"
        with store.run("op", title, config=config, seed=seed, tags=tuple(tags)) as run_id:
            if peak_rate:
                store.add_metric(
                    run_id, "peak_gflops", peak_rate,
                    labels={"dtype": dtype, "source": peak.source}, unit="GFLOP/s",
                )  # fmt: skip
            _store_roofline_inputs(store, run_id, bandwidth, problems, directions, dtype)
            measured = measure(
                jobs, store=store, run_id=run_id, processes=processes, options=options,
                seed=seed, cpus=cpus, quiet=quiet, backends=("d5.operators", "backend"),
                timeout_s=limit,
            )  # fmt: skip
            rows, timings = _op_results(
                measured, keys, devices, _peaks_of_threads(peak, dtype, measured, names), store,
                run_id,
            )  # fmt: skip
            if trace is not None:
                _trace_operators(store, run_id, trace, str(op), measured, keys)
            if floor is not None:
                store.update_config(run_id, {"noise_floor": floor.to_json()})
            raise_failures(measured.outcome)
    mark_within_noise(rows, floor)
    mark_threads(rows, measured)
    return OperatorBench(str(op), run_id, rows, timings, measured, floor, peak, peak_rate)


def operator_problems(
    op: str, suite: str | None, shape: str | None, attributes: dict[str, Any]
) -> list[Problem]:
    """The problems ``d5 bench op`` runs: a suite's, or one given by ``shape`` (with
    ``attributes``)."""
    from d5core.lv0.runner import problem_for
    from d5core.lv0.workloads.problems import parse_shapes
    from d5core.lv0.workloads.problems import suite as suite_problems

    if suite and shape is not None:
        raise UsageError("give either --suite or --shape, not both")
    if suite:
        return suite_problems(suite, op)
    shapes = parse_shapes(shape) if shape is not None else None
    return [problem_for(op, shapes=shapes, attributes=attributes)]


def _custom_plan(
    source: Path,
    names: Sequence[str],
    shape: str | None,
    attributes: dict[str, Any],
    directions: Sequence[str],
    dtype: str,
    seed: int,
    *,
    quiet: bool,
) -> tuple[
    str, list[str], list[Problem], dict[str, str], list[Job], list[tuple[Problem, str, str]]
]:
    """``--custom``: build the operator for each framework of ``names`` (one not
    installed is skipped with a note) and lay out its jobs, as ``d5 bench op`` does."""
    from d5core.lv0.customop.runner import bench_plan
    from d5core.lv0.workloads.problems import parse_shapes

    plan = bench_plan(
        source, names, shapes=None if shape is None else parse_shapes(shape),
        attributes=attributes, directions=directions, dtype=dtype, seed=seed,
        on_note=None if quiet else _note_line,
    )  # fmt: skip
    return plan.build.spec.name, plan.names, plan.problems, plan.devices, plan.jobs, plan.keys


def _trace_operators(
    store: Any, run_id: str, level: str, op: str, measured: Measured,
    keys: Sequence[tuple[Problem, str, str]],
) -> None:
    """Trace extra calls of every job that was measured (untimed, after the workers) and
    keep the trace with the run."""
    from d5core.trace.capture import store_trace, trace_job
    from d5core.trace.recorder import TraceRecorder

    recorder = TraceRecorder(level, "d5 bench op")
    subjects = []
    for result, (problem, direction, name) in zip(measured.outcome.jobs, keys, strict=True):
        if result.runs:
            trace_job(recorder, result.job, name, problem=problem.label, direction=direction)
            subjects.append(name)
    store_trace(store, run_id, recorder, kind="op", op=op,
                subjects=list(dict.fromkeys(subjects)))  # fmt: skip


def _check_backends(
    problems: Sequence[Problem], names: Sequence[str], dtype: str
) -> dict[str, str]:
    """Refuse, before any worker starts, an unknown backend or one that lacks the
    operator or the dtype; return each backend's device."""
    from d5core.lv0.runner import backend_by_name, check_operator

    devices = {}
    for name in names:
        backend = backend_by_name(name)
        for problem in problems:
            check_operator(backend, problem, dtype)
        devices[name] = str(getattr(backend, "device", "cpu"))
    return devices


def _op_jobs(
    problems: Sequence[Problem],
    names: Sequence[str],
    directions: Sequence[str],
    dtype: str,
    seed: int,
) -> tuple[list[Job], list[tuple[Problem, str, str]]]:
    """One job per (problem, direction, backend), and what each one measures."""
    from d5core.lv0.jobs import problem_to_json
    from d5core.measure.invocations import Job

    jobs, keys = [], []
    for problem in problems:
        data = problem_to_json(problem)
        for d in directions:
            for name in names:
                args = {"problem": data, "backend": name, "dtype": dtype, "direction": d,
                        "seed": seed}  # fmt: skip
                jobs.append(Job("op", args, name=f"{name} {problem.label} {d}"))
                keys.append((problem, d, name))
    return jobs, keys


def _peaks_of_threads(
    peak: Peak, dtype: str, measured: Measured, names: Sequence[str]
) -> dict[str, tuple[float | None, int]]:
    """Per backend, the peak its GFLOP/s is a fraction of, and the cores that peak
    counts: the per-core peak times the threads it ran on (at most every core the peak
    was measured on), or the whole peak where its threads are not known. A backend on 1
    thread of a 2-core machine is thus judged against what 1 core can do."""
    found = {}
    for name in names:
        count = measured.threads.get(name)
        threads = None if count is None else count.threads
        cores = min(threads, peak.cores) if threads else peak.cores
        found[name] = (peak.of_threads(dtype, threads), cores)
    return found


def _op_results(
    measured: Measured,
    keys: Sequence[tuple[Problem, str, str]],
    devices: dict[str, str],
    peaks: dict[str, tuple[float | None, int]],
    store: Any,
    run_id: str,
) -> tuple[list[Row], list[OperatorTiming]]:
    """Gather, store and describe every job that was measured; ``peaks`` is each
    backend's peak and its cores (:func:`_peaks_of_threads`)."""
    from d5core.lv0.bench_results import gather, nested_fields
    from d5core.lv0.runner import timing_of

    rows, timings = [], []
    for result, (problem, d, name) in zip(measured.outcome.jobs, keys, strict=True):
        if not result.runs:
            continue
        gathered = gather(result)
        rate, cores = peaks[name]
        timing = timing_of(
            problem, name, d, result.job.args["dtype"], gathered.measurement,
            device=devices[name], peak_gflops=rate, peak_cores=cores,
        )  # fmt: skip
        _store_op_timing(store, run_id, timing, gathered)
        timings.append(timing)
        row = {**timing.to_json(), **nested_fields(gathered.nested)}
        rows.append(Row((problem.label, d), name, gathered, row))
    return rows, timings


def _store_op_timing(store: Any, run_id: str, timing: Any, gathered: Gathered) -> None:
    """Store a timing's samples, its start-up costs, and its GFLOP/s, peak fraction and
    the peak that is of, where counted."""
    labels = {
        "backend": timing.backend,
        "problem": timing.problem.label,
        "direction": timing.direction,
        "dtype": timing.dtype,
    }
    store_nested(store, run_id, "time", timing.measurement, gathered, labels, "s")
    store_startup(store, run_id, timing.measurement, labels)
    rates = timing.gflops_samples()
    if rates:
        store_nested(
            store, run_id, "gflops", rates, gathered, labels, "GFLOP/s",
            rate_of=timing.flops / 1e9,
        )  # fmt: skip
    if timing.peak_fraction and timing.peak_gflops:
        store.add_metric(run_id, "peak_fraction", timing.peak_fraction, labels=labels)
        # what it was divided by, so that tables made later use the same denominator
        of = {**labels, "cores": timing.peak_cores}
        store.add_metric(run_id, "peak_gflops", timing.peak_gflops, labels=of, unit="GFLOP/s")


def _memory_bandwidth() -> Any:
    """This machine's memory bandwidth, the roofline's memory roof (measured once per
    machine; a malformed ``D5_PEAK_BANDWIDTH`` is a usage error before anything runs)."""
    from d5core.lv0.workloads.bandwidth import memory_bandwidth

    return memory_bandwidth()


def _store_roofline_inputs(
    store: Any,
    run_id: str,
    bandwidth: Any,
    problems: Sequence[Problem],
    directions: Sequence[str],
    dtype: str,
) -> None:
    """Store what a roofline of the run needs besides its rates: the memory bandwidth
    (``peak_bandwidth``, GB/s) and, per problem and direction, its FLOPs
    (``problem_flops``) and compulsory traffic (``problem_bytes``)."""
    from d5core.lv0.runner import flops_of
    from d5core.lv0.workloads.bandwidth import compulsory_bytes

    store.add_metric(
        run_id, "peak_bandwidth", bandwidth.gbps, labels={"source": bandwidth.source},
        unit="GB/s",
    )  # fmt: skip
    seen = set()
    for problem in problems:
        for d in directions:
            if (problem.label, d) in seen:
                continue
            seen.add((problem.label, d))
            labels = {"problem": problem.label, "direction": d, "dtype": dtype}
            flops = flops_of(problem, d)
            store.add_metric(run_id, "problem_flops", flops, labels=labels, unit="FLOP")
            nbytes = compulsory_bytes(problem, dtype, d)
            store.add_metric(run_id, "problem_bytes", nbytes, labels=labels, unit="B")


def _note_line(line: str) -> None:
    click.echo(f"d5: {line}", err=True)
