"""What ``d5 bench op`` and ``d5 bench net`` share: their sampling and process options,
the measuring of jobs in fresh worker processes under the machine's watch, and the
rows, marks and footer of their tables.

Every (backend, problem, direction) of ``d5 bench op`` and every executor of ``d5 bench
net`` is measured in several fresh worker processes, one per round, in an order drawn
anew for each round (:func:`d5core.measure.invocations.run_invocations`); the headline
is the median of the process medians with its between-process interval
(``docs/measurement.md``, "Between runs").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.table import Table

from d5core.cli.output import console
from d5core.errors import CheckFailed, UsageError

if TYPE_CHECKING:
    from d5core.lv0.bench_results import Gathered
    from d5core.measure.fitness import MachineState, ThreadCount
    from d5core.measure.invocations import Invocations, Job, RoundRecord
    from d5core.measure.noise import NoiseFloor

__all__ = [
    "DEFAULT_PROCESSES",
    "Measured",
    "Row",
    "Watch",
    "describe_floor",
    "fault_warnings",
    "fmt_ci",
    "fmt_time",
    "mark_threads",
    "mark_within_noise",
    "measure",
    "measure_options",
    "noise_floor",
    "note",
    "pct",
    "print_footer",
    "process_options",
    "raise_failures",
    "sampling_options",
    "threads_cell",
    "timeout_option",
]

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
                    type=click.FloatRange(min=0, max=86_400),
                    default=time_budget,
                    show_default=True,
                    help="Seconds per measurement, in each process (at most a day).",
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


def timeout_option(fn: _F) -> _F:
    """``--timeout``: the seconds a worker process may spend on one job (recorded)."""
    return click.option(
        "--timeout",
        "timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="Kill a worker process that spends longer on one job (building and timing "
        "it; counted from the worker's start), and fail that job [default: 300 plus twice "
        "--time-budget].",
    )(fn)


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


def fmt_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_ci(low: float | None, high: float | None, fmt: Callable[[float], str]) -> str:
    if low is None or high is None:
        return "-"
    return f"[{fmt(low)}, {fmt(high)}]"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100.0 * value:.0f}%"


# -- measuring in worker processes -----------------------------------------------------------


@dataclass
class Watch:
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


def noise_floor(store: Any, cpus: list[int] | None) -> NoiseFloor | None:
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


def describe_floor(floor: NoiseFloor | None) -> str:
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
class Measured:
    """What :func:`measure` ran: the workers' outcome, the thread count each backend or
    executor ran with, and the warning when those counts differ."""

    outcome: Invocations
    threads: dict[str, ThreadCount]
    thread_warning: str | None


def measure(
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
    timeout_s: float | None = None,
) -> Measured:
    """Run ``jobs`` in fresh worker processes; warn of an unfit machine and of backends
    that ran with different thread counts, and record the rounds, their orders, each
    backend's thread count and the warnings in the run's config.

    :param backends: the entry-point group of what the jobs measure and the job argument
        naming it, e.g. ``("d5.operators", "backend")``.
    :param timeout_s: the seconds a worker may spend on one job (``None``: no limit).
    """
    from d5core.lv0.bench_results import thread_counts
    from d5core.measure.fitness import thread_count_warning
    from d5core.measure.invocations import run_invocations
    from d5core.measure.nested import MIN_PROCESSES

    watch = Watch(len(cpus) if cpus else None, processes, quiet)
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
        timeout_s=timeout_s,
    )
    warnings = watch.warnings() + fault_warnings(outcome)
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
                "timeout_s": timeout_s,
            },
            "fitness": {
                **watch.to_json(warnings),
                "thread_counts": {name: count.to_json() for name, count in threads.items()},
            },
        },
    )
    return Measured(outcome, threads, thread_warning)


def fault_warnings(outcome: Invocations) -> list[str]:
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


def raise_failures(outcome: Invocations) -> None:
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


def note(gathered: Gathered, close: Sequence[str], unstable: bool) -> str:
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


@dataclass
class Row:
    """One measured job: what ``--json`` prints, and what the table shows."""

    key: tuple[str, str]
    name: str
    gathered: Gathered
    row: dict[str, Any]
    close: list[str] = field(default_factory=list)
    #: The per-node table of ``d5 bench net --breakdown``.
    breakdown: Table | None = None


def mark_within_noise(rows: Sequence[Row], floor: NoiseFloor | None) -> None:
    """Note, in each row, the rows of the same problem whose median is within noise."""
    from d5core.lv0.bench_results import within_noise

    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault(r.key, []).append(r)
    for group in groups.values():
        medians = {r.name: r.gathered.nested.median for r in group}
        close = within_noise(medians, None if floor is None else floor.machine_floor)
        for r in group:
            r.close = close[r.name]
            r.row["within_noise_of"] = r.close


def mark_threads(rows: Sequence[Row], measured: Measured) -> None:
    """Put in each row the thread count its backend ran with (``threads``, ``null`` when
    unknown), the setting it was read from, and the warning when the compared backends'
    counts differ (``thread_warning``, ``null`` when they agree)."""
    for r in rows:
        count = measured.threads.get(r.name)
        r.row["threads"] = None if count is None else count.threads
        r.row["thread_setting"] = None if count is None else count.setting
        r.row["thread_warning"] = measured.thread_warning


def threads_cell(row: dict[str, Any]) -> str:
    return "?" if row.get("threads") is None else str(row["threads"])


def print_footer(outcome: Invocations, floor: NoiseFloor | None) -> None:
    out = console()
    out.print(
        f"{len(outcome.rounds)} processes (stopped by {outcome.stopped_by}; order seed "
        f"{outcome.seed}); {describe_floor(floor)}"
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
