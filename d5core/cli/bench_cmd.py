"""``d5 bench``: measure implementations side by side through the measurement engine.

Every (backend, problem, direction) of ``d5 bench op`` and every executor of ``d5 bench
net`` is measured in several fresh worker processes, one per round, in an order drawn
anew for each round (:func:`d5core.measure.invocations.run_invocations`); the headline
is the median of the process medians with its between-process interval
(``docs/measurement.md``, "Between runs").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.table import Table

from d5core.cli._parse import parse_attributes, parse_list
from d5core.cli.bench_comm_cmd import bench_comm
from d5core.cli.bench_scenario import check_no_scenario_options, scenario_command, scenario_options
from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.cli.tag_option import tag_option
from d5core.errors import CheckFailed, UsageError

if TYPE_CHECKING:
    from d5core.measure.fitness import MachineState, ThreadCount
    from d5core.measure.invocations import Invocations, Job, RoundRecord
    from d5core.measure.noise import NoiseFloor
    from d5core.runners.jobs import Gathered
    from d5core.workloads.problems import Problem

__all__ = ["DEFAULT_PROCESSES", "bench", "measure_options"]

#: Worker processes per (backend, problem) by default: the between-process interval
#: needs at least 3 (``MIN_PROCESSES``), and 5 keeps the cpu-small GEMM suite on two
#: backends under a minute on a 2-core machine (docs/measurement.md, "How many processes").
DEFAULT_PROCESSES = 5

_F = TypeVar("_F", bound=Callable[..., Any])


def sampling_options(*, time_budget: float) -> Callable[[_F], _F]:
    """The measurement engine's options, alike on every ``d5 bench`` command."""

    def decorate(fn: _F) -> _F:
        for option in reversed(
            [
                click.option("--min-samples", default=10, show_default=True),
                click.option("--max-samples", default=1000, show_default=True),
                click.option(
                    "--time-budget",
                    default=time_budget,
                    show_default=True,
                    help="Seconds per measurement, in each process.",
                ),
                click.option(
                    "--rel-ci",
                    default=0.01,
                    show_default=True,
                    help="Stop adding processes once every between-process CI is within ± "
                    "this (after 3); each process also stops sampling at a CI this narrow.",
                ),
                click.option("--warmup", default=3, show_default=True, help="Untimed runs first."),
            ]
        ):
            fn = option(fn)
        return fn

    return decorate


def process_options(fn: _F) -> _F:
    """``--processes`` and ``--cpus``: how many fresh worker processes, and where."""
    fn = click.option(
        "--cpus",
        default=None,
        metavar="LIST",
        help="Pin the worker processes to these CPUs, e.g. 0 or 0,2-3 (recorded).",
    )(fn)
    return click.option(
        "--processes",
        type=click.IntRange(min=1),
        default=DEFAULT_PROCESSES,
        show_default=True,
        help="Fresh worker processes, each measuring everything once in a random order; "
        "1 leaves the between-run variance unknown.",
    )(fn)


@click.group("bench")
def bench() -> None:
    """Benchmark operators across backends, and networks across executors."""


bench.add_command(bench_comm)


def measure_options(
    min_samples: int, max_samples: int, time_budget: float, rel_ci: float, warmup: int
) -> Any:
    """Build engine options from command-line values; bad values are usage errors."""
    from d5core.measure.engine import MeasureOptions

    try:
        return MeasureOptions(
            warmup=warmup,
            min_samples=min_samples,
            max_samples=max_samples,
            time_budget_s=time_budget,
            rel_ci=rel_ci,
        )
    except ValueError as exc:
        raise UsageError(f"bad measurement options: {exc}") from None


def _fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _fmt_ci(low: float | None, high: float | None, fmt: Callable[[float], str]) -> str:
    if low is None or high is None:
        return "-"
    return f"[{fmt(low)}, {fmt(high)}]"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.0f}%"


# -- measuring in worker processes -----------------------------------------------------------


@dataclass
class _Watch:
    """Snapshots of the machine before the first process and after each one, and the
    progress line of each process."""

    cores: int | None
    total: int
    quiet: bool
    states: list[MachineState] = field(default_factory=list)

    def start(self) -> None:
        from d5core.measure.fitness import snapshot

        self.states = [snapshot()]

    def on_process(self, record: RoundRecord) -> None:
        from d5core.measure.fitness import snapshot

        self.states.append(snapshot())
        if not self.quiet:
            failed = f", {len(record.failures)} failed" if record.failures else ""
            click.echo(
                f"d5: process {record.index + 1} of at most {self.total} done in "
                f"{record.elapsed_s:.1f} s ({len(record.runs)} measured{failed})",
                err=True,
            )

    def warnings(self) -> list[str]:
        """What made the machine unfit over the whole run; when nothing did on the
        whole, what did during single processes (a burst of load)."""
        from d5core.measure.fitness import assess

        if len(self.states) < 2:
            return []
        overall = assess(self.states[0], self.states[-1], self.cores)
        if overall:
            return overall
        found: list[str] = []
        for i, (before, after) in enumerate(zip(self.states[:-1], self.states[1:], strict=True)):
            found += [f"process {i + 1}: {w}" for w in assess(before, after, self.cores)]
        return found

    def to_json(self, warnings: Sequence[str]) -> dict[str, Any]:
        return {
            "warnings": list(warnings),
            "before": self.states[0].to_json() if self.states else None,
            "after": self.states[-1].to_json() if self.states else None,
        }


def _noise_floor(store: Any, cpus: list[int] | None) -> NoiseFloor | None:
    """This machine's noise floor (a brief calibration the first time); ``None`` with a
    warning when the calibration failed."""
    from d5core.measure.noise import ensure_noise_floor

    def status(line: str) -> None:
        click.echo(f"d5: {line}", err=True)

    try:
        return ensure_noise_floor(store, cpus=cpus, on_status=status)
    except CheckFailed as exc:
        click.echo(f"d5: warning: no noise floor for this machine: {exc}", err=True)
        return None


def _describe_floor(floor: NoiseFloor | None) -> str:
    if floor is None:
        return "noise floor: unknown (run 'd5 calibrate')"
    if floor.source == "default":
        return f"noise floor: {100 * floor.machine_floor:.1f}% ({floor.warnings[0]})"
    if floor.source != "calibration":
        return f"noise floor: {100 * floor.machine_floor:.1f}% (set by {floor.source})"
    return (
        f"noise floor: {100 * floor.machine_floor:.1f}% (calibration run {floor.run_id}, "
        f"{floor.age_days:.1f} days old)"
    )


@dataclass
class _Measured:
    """What :func:`_measure` ran: the workers' outcome, the thread count each backend or
    executor ran with, and the warning when those counts differ."""

    outcome: Invocations
    threads: dict[str, ThreadCount]
    thread_warning: str | None


def _measure(
    jobs: Sequence[Job],
    *,
    store: Any,
    run_id: str,
    processes: int,
    options: Any,
    seed: int,
    cpus: list[int] | None,
    quiet: bool,
    backends: tuple[str, str],
) -> _Measured:
    """Run ``jobs`` in fresh worker processes; warn of an unfit machine and of backends
    that ran with different thread counts, and record the rounds, their orders, each
    backend's thread count and the warnings in the run's config.

    :param backends: the entry-point group of what the jobs measure and the job argument
        naming it, e.g. ``("d5.operators", "backend")``.
    """
    from d5core.measure.fitness import thread_count_warning
    from d5core.measure.invocations import run_invocations
    from d5core.measure.nested import MIN_PROCESSES
    from d5core.runners.jobs import thread_counts

    watch = _Watch(len(cpus) if cpus else None, processes, quiet)
    watch.start()
    outcome = run_invocations(
        jobs,
        processes=processes,
        options=options,
        seed=seed,
        min_processes=MIN_PROCESSES,
        rel_ci=options.rel_ci,
        cpus=cpus,
        on_process=watch.on_process,
    )
    warnings = watch.warnings() + _fault_warnings(outcome)
    threads = thread_counts(outcome, *backends)
    thread_warning = thread_count_warning(list(threads.values()))
    if thread_warning is not None:
        warnings.append(thread_warning)
    for warning in warnings:
        click.echo(f"d5: warning: {warning}", err=True)
    store.update_config(
        run_id,
        {
            "invocations": {
                "jobs": [job.label for job in jobs],
                "order_seed": outcome.seed,
                "rounds": [r.to_json() for r in outcome.rounds],
                "processes": len(outcome.rounds),
                "stopped_by": outcome.stopped_by,
                "cpus": outcome.cpus,
                "elapsed_s": outcome.elapsed_s,
            },
            "fitness": {
                **watch.to_json(warnings),
                "thread_counts": {name: count.to_json() for name, count in threads.items()},
            },
        },
    )
    return _Measured(outcome, threads, thread_warning)


def _fault_warnings(outcome: Invocations) -> list[str]:
    """A warning per job whose calls took many page faults (median over processes)."""
    from d5core.allocator import page_fault_warning

    found = []
    for result in outcome.jobs:
        faults = [r.measurement.page_faults_per_call for r in result.runs]
        counted = sorted(f for f in faults if f is not None)
        if not counted or result.summary is None:
            continue
        line = page_fault_warning(
            result.job.label, counted[len(counted) // 2], result.summary.median
        )
        if line is not None:
            found.append(line)
    return found


def _raise_failures(outcome: Invocations) -> None:
    """Refuse the run when a job failed in its worker, naming the first failure."""
    failed = [r for r in outcome.jobs if r.error is not None]
    if not failed:
        return
    first = failed[0]
    error = first.error or ""
    what = f"{len(failed)} of {len(outcome.jobs)} measurements failed; {first.job.label}"
    usage = "UsageError: "
    if all((r.error or "").startswith(usage) for r in failed):
        raise UsageError(f"{what}: {error[len(usage) :]}")
    raise CheckFailed(f"{what}: {error}")


def _note(gathered: Gathered, close: Sequence[str], unstable: bool) -> str:
    from d5core.measure.nested import BETWEEN_UNKNOWN

    notes = []
    if not gathered.between_known:
        notes.append(BETWEEN_UNKNOWN)
    if close:
        notes.append(f"within noise of {', '.join(close)}")
    if unstable:
        notes.append("!")
    return "; ".join(notes)


# -- d5 bench op -----------------------------------------------------------------------------


@bench.command("op")
@click.argument("op", required=False)
@click.option("--backends", required=True, help="Comma-separated backends, e.g. numpy,torch.")
@click.option(
    "--custom",
    "custom",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A C++ custom operator's source: build it and time it in each of --backends.",
)
@click.option("--suite", default=None, help="A shape suite, e.g. cpu-small or deepbench.")
@click.option("--shape", default=None, help="Input shapes instead of a suite, e.g. 64x64,64x64.")
@click.option("--attr", "attrs", multiple=True, metavar="KEY=VALUE", help="Operator attribute.")
@click.option(
    "--direction",
    type=click.Choice(["forward", "backward", "both"]),
    default="forward",
    show_default=True,
)
@click.option("--dtype", default="float32", show_default=True)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the generated inputs and of the order within each process.",
)
@process_options
@sampling_options(time_budget=0.2)
@json_option
@db_option
@tag_option
def bench_op(
    op: str | None,
    backends: str,
    custom: Path | None,
    suite: str | None,
    shape: str | None,
    attrs: tuple[str, ...],
    direction: str,
    dtype: str,
    seed: int,
    processes: int,
    cpus: str | None,
    min_samples: int,
    max_samples: int,
    time_budget: float,
    rel_ci: float,
    warmup: int,
    as_json: bool,
    db: Path | None,
    tags: tuple[str, ...],
) -> None:
    """Time operator OP on each backend, forward and/or backward, side by side.

    Each backend and problem is measured in --processes fresh worker processes (the
    backends in a random order within each), and reported as the median of the
    process medians with its between-process 95% CI. Every sample is stored with its
    process; GEMM, MatMul and convolutions also report (and store) GFLOP/s and the
    fraction of this machine's peak.
    """
    from d5core.measure.invocations import parse_cpus
    from d5core.results.store import ResultsStore
    from d5core.runners.operators import check_bench_request
    from d5core.workloads.roofline import cpu_peak

    names = parse_list(backends, "backends")
    directions = ["forward", "backward"] if direction == "both" else [direction]
    if custom is not None:  # a C++ custom operator, built for each framework
        if op is not None or suite is not None:
            raise UsageError("--custom names the operator itself; leave out OP and --suite")
        op, names, problems, devices, jobs, keys = _custom_plan(
            custom, names, shape, attrs, directions, dtype, seed, quiet=as_json
        )
        check_bench_request(problems, names, dtype)
    elif op is None:
        raise UsageError("give the operator OP (or --custom FILE for a C++ custom operator)")
    else:
        problems = _op_problems(op, suite, shape, parse_attributes(attrs))
        check_bench_request(problems, names, dtype)
        devices = _check_backends(problems, names, dtype)
        jobs, keys = _op_jobs(problems, names, directions, dtype, seed)
    peak = cpu_peak()
    peak_rate = peak.gflops.get(dtype)
    bandwidth = _memory_bandwidth()
    options = measure_options(min_samples, max_samples, time_budget, rel_ci, warmup)
    pinned = None if cpus is None else parse_cpus(cpus)
    config = {
        "op": op,
        "custom": None if custom is None else str(custom.resolve()),
        "backends": names,
        "suite": suite,
        "problems": [p.label for p in problems],
        "directions": directions,
        "dtype": dtype,
        "measure": options.to_json(),
        "processes": processes,
        "cpus": pinned,
    }
    with ResultsStore.open(db) as store:
        floor = _noise_floor(store, pinned)
        with store.run("op", f"bench {op}", config=config, seed=seed, tags=tags) as run_id:
            if peak_rate:
                store.add_metric(
                    run_id, "peak_gflops", peak_rate,
                    labels={"dtype": dtype, "source": peak.source}, unit="GFLOP/s",
                )  # fmt: skip
            _store_roofline_inputs(store, run_id, bandwidth, problems, directions, dtype)
            measured = _measure(
                jobs, store=store, run_id=run_id, processes=processes, options=options,
                seed=seed, cpus=pinned, quiet=as_json, backends=("d5.operators", "backend"),
            )  # fmt: skip
            outcome = measured.outcome
            rows = _op_results(outcome, keys, devices, peak_rate, store, run_id)
            if floor is not None:
                store.update_config(run_id, {"noise_floor": floor.to_json()})
            _raise_failures(outcome)
    _mark_within_noise(rows, floor)
    _mark_threads(rows, measured)
    if as_json:
        print_json(
            [{**r.row, "run_id": run_id, "peak_gflops": peak_rate, "peak_source": peak.source,
              "noise_floor": None if floor is None else floor.machine_floor} for r in rows]
        )  # fmt: skip
        return
    out = console()
    out.print(_op_table(op, dtype, run_id, rows))
    out.print(
        f"peak: {peak_rate:.0f} GFLOP/s ({peak.source})" if peak_rate else f"peak: {peak.source}"
    )
    _print_footer(outcome, floor)


def _custom_plan(
    source: Path,
    names: Sequence[str],
    shape: str | None,
    attrs: tuple[str, ...],
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
    from d5core.customop.runner import bench_plan
    from d5core.workloads.problems import parse_shapes

    plan = bench_plan(
        source, names, shapes=None if shape is None else parse_shapes(shape),
        attributes=parse_attributes(attrs), directions=directions, dtype=dtype, seed=seed,
        on_note=None if quiet else lambda line: click.echo(f"d5: {line}", err=True),
    )  # fmt: skip
    return plan.build.spec.name, plan.names, plan.problems, plan.devices, plan.jobs, plan.keys


def _check_backends(
    problems: Sequence[Problem], names: Sequence[str], dtype: str
) -> dict[str, str]:
    """Refuse, before any worker starts, an unknown backend or one that lacks the
    operator or the dtype; return each backend's device."""
    from d5core.runners.operators import backend_by_name, check_operator

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
    from d5core.measure.invocations import Job
    from d5core.runners.jobs import problem_to_json

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


@dataclass
class _Row:
    """One measured job: what ``--json`` prints, and what the table shows."""

    key: tuple[str, str]
    name: str
    gathered: Gathered
    row: dict[str, Any]
    close: list[str] = field(default_factory=list)
    #: The per-node table of ``d5 bench net --breakdown``.
    breakdown: Table | None = None


def _op_results(
    outcome: Invocations,
    keys: Sequence[tuple[Problem, str, str]],
    devices: dict[str, str],
    peak_rate: float | None,
    store: Any,
    run_id: str,
) -> list[_Row]:
    """Gather, store and describe every job that was measured."""
    from d5core.runners.jobs import gather, nested_fields
    from d5core.runners.operators import timing_of

    rows = []
    for result, (problem, d, name) in zip(outcome.jobs, keys, strict=True):
        if not result.runs:
            continue
        gathered = gather(result)
        timing = timing_of(
            problem, name, d, result.job.args["dtype"], gathered.measurement,
            device=devices[name], peak_gflops=peak_rate,
        )  # fmt: skip
        _store_op_timing(store, run_id, timing, gathered)
        row = {**timing.to_json(), **nested_fields(gathered.nested)}
        rows.append(_Row((problem.label, d), name, gathered, row))
    return rows


def _mark_within_noise(rows: Sequence[_Row], floor: NoiseFloor | None) -> None:
    """Note, in each row, the rows of the same problem whose median is within noise."""
    from d5core.runners.jobs import within_noise

    groups: dict[tuple[str, str], list[_Row]] = {}
    for r in rows:
        groups.setdefault(r.key, []).append(r)
    for group in groups.values():
        medians = {r.name: r.gathered.nested.median for r in group}
        close = within_noise(medians, None if floor is None else floor.machine_floor)
        for r in group:
            r.close = close[r.name]
            r.row["within_noise_of"] = r.close


def _mark_threads(rows: Sequence[_Row], measured: _Measured) -> None:
    """Put in each row the thread count its backend ran with (``threads``, ``null`` when
    unknown), the setting it was read from, and the warning when the compared backends'
    counts differ (``thread_warning``, ``null`` when they agree)."""
    for r in rows:
        count = measured.threads.get(r.name)
        r.row["threads"] = None if count is None else count.threads
        r.row["thread_setting"] = None if count is None else count.setting
        r.row["thread_warning"] = measured.thread_warning


def _threads_cell(row: dict[str, Any]) -> str:
    return "?" if row.get("threads") is None else str(row["threads"])


def _op_table(op: str, dtype: str, run_id: str, rows: Sequence[_Row]) -> Table:
    table = Table(title=f"d5 bench op {op} ({dtype}), run {run_id}", title_justify="left")
    for column in ("problem", "direction", "backend"):
        table.add_column(column, overflow="fold")
    for column in (
        "median",
        "95% CI between processes",
        "95% CI within a process",
        "between share",
        "processes (samples)",
        "GFLOP/s (% peak)",
        "threads",
        "note",
    ):
        table.add_column(column, justify="right" if column != "note" else "left")
    for r in rows:
        n = r.gathered.nested
        rate = "" if r.row["gflops"] is None else f"{r.row['gflops']:.1f}"
        if rate and r.row["peak_fraction"]:
            rate += f" ({100 * r.row['peak_fraction']:.0f}%)"
        table.add_row(
            r.key[0], r.key[1], r.name, _fmt_time(n.median),
            _fmt_ci(n.ci_low, n.ci_high, _fmt_time),
            _fmt_ci(n.within_ci_low, n.within_ci_high, _fmt_time),
            _pct(n.between_share), f"{n.n_processes} ({n.n_samples})", rate,
            _threads_cell(r.row), _note(r.gathered, r.close, r.row["stability"] != "stable"),
        )  # fmt: skip
    return table


def _print_footer(outcome: Invocations, floor: NoiseFloor | None) -> None:
    out = console()
    out.print(
        f"{len(outcome.rounds)} processes (stopped by {outcome.stopped_by}; order seed "
        f"{outcome.seed}); {_describe_floor(floor)}"
    )
    out.print(
        "median: of the process medians; between: Student-t CI from their spread; within: "
        "the CI one process would report; between share: of the variance of the samples"
    )
    out.print("! marks a measurement whose IQR exceeds 10% of its median (unstable)")
    out.print(
        "threads: the threads one operator ran on in the workers (torch.get_num_threads(), "
        "TensorFlow's and ONNX Runtime's intra-op pool, the native kernels' OpenMP threads, "
        "else OMP_NUM_THREADS); ? = not reported"
    )


def _op_problems(
    op: str, suite: str | None, shape: str | None, attributes: dict[str, Any]
) -> list[Problem]:
    """The problems ``d5 bench op`` runs: a suite's, or one given by ``--shape``."""
    from d5core.runners.operators import problem_for
    from d5core.workloads.problems import parse_shapes
    from d5core.workloads.problems import suite as suite_problems

    if suite and shape is not None:
        raise UsageError("give either --suite or --shape, not both")
    if suite:
        return suite_problems(suite, op)
    shapes = parse_shapes(shape) if shape is not None else None
    return [problem_for(op, shapes=shapes, attributes=attributes)]


def _store_nested(
    store: Any,
    run_id: str,
    metric: str,
    values: Any,
    gathered: Gathered,
    labels: dict[str, Any],
    unit: str,
    rate_of: float | None = None,
) -> None:
    """Store ``values`` (the gathered measurement, or rates derived one to one from its
    samples as ``rate_of / t``) with the process of each sample and its nested summary
    (for rates, the times' own median and intervals, inverted: :func:`rate_headline`)."""
    from d5core.runners.jobs import by_process, headline, rate_headline, stored_summary

    samples = values.samples if hasattr(values, "samples") else list(values)
    if rate_of is not None:
        summary, nested = rate_headline(gathered, rate_of, samples)
    else:
        confidence = gathered.nested.confidence
        summary, nested = headline(by_process(samples, gathered.processes), confidence)
    store.add_measurement(
        run_id, metric, values, labels=labels, unit=unit,
        summary=stored_summary(summary, nested), processes=gathered.processes,
    )  # fmt: skip


def _store_op_timing(store: Any, run_id: str, timing: Any, gathered: Gathered) -> None:
    """Store a timing's samples, and its GFLOP/s and peak fraction where counted."""
    labels = {
        "backend": timing.backend,
        "problem": timing.problem.label,
        "direction": timing.direction,
        "dtype": timing.dtype,
    }
    _store_nested(store, run_id, "time", timing.measurement, gathered, labels, "s")
    rates = timing.gflops_samples()
    if rates:
        _store_nested(
            store, run_id, "gflops", rates, gathered, labels, "GFLOP/s",
            rate_of=timing.flops / 1e9,
        )  # fmt: skip
    if timing.peak_fraction:
        store.add_metric(run_id, "peak_fraction", timing.peak_fraction, labels=labels)


def _memory_bandwidth() -> Any:
    """This machine's memory bandwidth, the roofline's memory roof (measured once per
    machine; a malformed ``D5_PEAK_BANDWIDTH`` is a usage error before anything runs)."""
    from d5core.workloads.bandwidth import memory_bandwidth

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
    from d5core.runners.operators import flops_of
    from d5core.workloads.bandwidth import compulsory_bytes

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


# -- d5 bench net ----------------------------------------------------------------------------


@bench.command("net")
@click.argument("model")
@click.option("--executors", required=True, help="Comma-separated executors, e.g. numpy,torch.")
@click.option(
    "--batch",
    type=int,
    default=None,
    help="Samples per step [default: 32, or the model's own batch where its graph fixes it].",
)
@click.option(
    "--mode",
    type=click.Choice(["inference", "train-step"]),
    default="inference",
    show_default=True,
)
@click.option(
    "--breakdown",
    is_flag=True,
    help="Also time every node (a separate run, in this process after the workers).",
)
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the generated feeds and of the order within each process.",
)
@process_options
@sampling_options(time_budget=0.5)
@scenario_options
@json_option
@db_option
@tag_option
def bench_net(
    model: str,
    executors: str,
    batch: int | None,
    mode: str,
    breakdown: bool,
    seed: int,
    processes: int,
    cpus: str | None,
    min_samples: int,
    max_samples: int,
    time_budget: float,
    rel_ci: float,
    warmup: int,
    as_json: bool,
    db: Path | None,
    tags: tuple[str, ...],
    **scenario: Any,
) -> None:
    """Time a network on each executor: inference or a training step, with throughput.

    MODEL is a zoo name, a light model shipped with onnx, or a path to an .onnx file.
    A model whose graph fixes its batch runs that batch only. Each executor is measured
    in --processes fresh worker processes (in a random order within each), reported as
    the median of the process medians with its between-process 95% CI. With
    --breakdown, every node's time is stored too (measured in this process), and
    checked against the measured step. With --scenario, the network runs under MLPerf
    LoadGen instead (docs/inference.md).
    """
    from d5core.measure.invocations import parse_cpus
    from d5core.results.store import ResultsStore
    from d5core.runners.networks import network_workload

    names = parse_list(executors, "executors")
    if scenario["scenario"] is not None:
        return scenario_command(
            click.get_current_context(), model=model, executors=names, batch=batch,
            mode=mode, seed=seed, as_json=as_json, db=db, tags=tags, options=scenario,
        )  # fmt: skip
    check_no_scenario_options(scenario)
    options = measure_options(min_samples, max_samples, time_budget, rel_ci, warmup)
    workload = network_workload(model, batch=batch, mode=mode, seed=seed)
    instances = _check_executors(names, workload)
    pinned = None if cpus is None else parse_cpus(cpus)
    jobs = _net_jobs(model, names, batch, mode, seed)
    config = {
        "model": model,
        "executors": names,
        "batch": workload.batch,
        "mode": mode,
        "measure": options.to_json(),
        "processes": processes,
        "cpus": pinned,
    }
    with ResultsStore.open(db) as store:
        floor = _noise_floor(store, pinned)
        with store.run("net", f"bench {model}", config=config, seed=seed, tags=tags) as run_id:
            measured = _measure(
                jobs, store=store, run_id=run_id, processes=processes, options=options,
                seed=seed, cpus=pinned, quiet=as_json, backends=("d5.frameworks", "executor"),
            )  # fmt: skip
            outcome = measured.outcome
            rows = _net_results(outcome, workload, instances if breakdown else {}, store, run_id)
            if floor is not None:
                store.update_config(run_id, {"noise_floor": floor.to_json()})
            _raise_failures(outcome)
    _mark_within_noise(rows, floor)
    _mark_threads(rows, measured)
    if as_json:
        print_json([{**r.row, "run_id": run_id} for r in rows])
        return
    out = console()
    out.print(_net_table(model, mode, workload.batch, run_id, rows))
    _print_footer(outcome, floor)
    for r in rows:
        if r.breakdown is not None:
            out.print(r.breakdown)


def _check_executors(names: Sequence[str], workload: Any) -> dict[str, Any]:
    """Refuse, before any worker starts, an unknown executor or a training step on one
    that runs inference only; return the executors (used for ``--breakdown``)."""
    from d5core.runners.networks import check_trains, executor_by_name

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
) -> list[_Row]:
    """Gather, store and describe every executor that was measured; with executors in
    ``breakdown``, time their nodes here, in this process."""
    from d5core.runners.jobs import gather, nested_fields
    from d5core.runners.networks import NetworkTiming

    rows = []
    for result in outcome.jobs:
        if not result.runs:
            continue
        name = str(result.job.args["executor"])
        gathered = gather(result)
        timing = NetworkTiming(
            workload.model, name, workload.mode, workload.batch, gathered.measurement
        )
        if name in breakdown:
            from d5core.runners.networks import fallback_nodes

            timing.per_node = _breakdown(breakdown[name], name, workload, gathered)
            timing.fallback = fallback_nodes(breakdown[name])
        _store_net_timing(store, run_id, timing, gathered)
        row = {**timing.to_json(), **nested_fields(gathered.nested)}
        nodes = timing.per_node is not None and timing.per_node.nodes
        table = _breakdown_table(timing) if nodes else None
        rows.append(_Row((workload.model, workload.mode), name, gathered, row, breakdown=table))
    return rows


def _breakdown(executor: Any, name: str, workload: Any, gathered: Gathered) -> Any:
    from d5core.runners.networks import layer_breakdown, node_runs, prepare_step

    run = prepare_step(executor, name, workload)
    runs = node_runs(executor, run, workload)
    return layer_breakdown(runs, float(gathered.nested.median), executor=name, mode=workload.mode)


def _net_table(model: str, mode: str, batch: int, run_id: str, rows: Sequence[_Row]) -> Table:
    table = Table(
        title=f"d5 bench net {model} ({mode}, batch {batch}), run {run_id}",
        title_justify="left",
    )
    for column in (
        "executor",
        "median per step",
        "95% CI between processes",
        "95% CI within a process",
        "between share",
        "processes (samples)",
        "samples/s [95% CI]",
        "threads",
        "note",
    ):
        table.add_column(column, justify="left" if column == "note" else "right")
    for r in rows:
        n, row = r.gathered.nested, r.row
        table.add_row(
            r.name, _fmt_time(n.median), _fmt_ci(n.ci_low, n.ci_high, _fmt_time),
            _fmt_ci(n.within_ci_low, n.within_ci_high, _fmt_time), _pct(n.between_share),
            f"{n.n_processes} ({n.n_samples})",
            f"{row['throughput']:.1f} [{row['throughput_ci_low']:.1f}, "
            f"{row['throughput_ci_high']:.1f}]", _threads_cell(row),
            _note(r.gathered, r.close, row["stability"] != "stable"),
        )  # fmt: skip
    return table


def _store_net_timing(store: Any, run_id: str, timing: Any, gathered: Gathered) -> None:
    """Store a step's times and throughput, and its per-node times when broken down."""
    labels = {"executor": timing.executor, "mode": timing.mode, "batch": timing.batch}
    _store_nested(store, run_id, "time", timing.measurement, gathered, labels, "s")
    _store_nested(
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


def _breakdown_table(timing: Any) -> Table:
    per_node = timing.per_node
    title = (
        f"per-node time on {timing.executor} (top {min(15, len(per_node.nodes))} of "
        f"{len(per_node.nodes)}; they add up "
        f"to {_fmt_time(per_node.node_sum)}, the step takes {_fmt_time(per_node.step)})"
    )
    layers = Table(title=title, title_justify="left")
    for column in ("node", "op", "direction", "median", "share"):
        layers.add_column(column)
    for node in per_node.nodes[:15]:
        fallback = " (fallback)" if node.node in timing.fallback else ""
        layers.add_row(
            node.node, node.op_type + fallback, node.direction, _fmt_time(node.median),
            f"{100 * node.share:.1f}%",
        )  # fmt: skip
    return layers
