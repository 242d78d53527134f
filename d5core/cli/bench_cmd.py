"""``d5 bench``: measure implementations side by side through the measurement engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from rich.table import Table

from d5core.cli._parse import parse_attributes, parse_list
from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.errors import UsageError

if TYPE_CHECKING:
    from d5core.workloads.problems import Problem

__all__ = ["bench", "measure_options"]


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
                    help="Seconds per measurement.",
                ),
                click.option(
                    "--rel-ci", default=0.01, show_default=True, help="Stop at CI within ± this."
                ),
                click.option("--warmup", default=3, show_default=True, help="Untimed runs first."),
            ]
        ):
            fn = option(fn)
        return fn

    return decorate


@click.group("bench")
def bench() -> None:
    """Benchmark operators across backends, and networks across executors."""


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


@bench.command("op")
@click.argument("op")
@click.option("--backends", required=True, help="Comma-separated backends, e.g. numpy,torch.")
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
    help="Seed of the generated inputs.",
)
@sampling_options(time_budget=5.0)
@json_option
@db_option
def bench_op(
    op: str,
    backends: str,
    suite: str | None,
    shape: str | None,
    attrs: tuple[str, ...],
    direction: str,
    dtype: str,
    seed: int,
    min_samples: int,
    max_samples: int,
    time_budget: float,
    rel_ci: float,
    warmup: int,
    as_json: bool,
    db: Path | None,
) -> None:
    """Time operator OP on each backend, forward and/or backward, side by side.

    Every sample is stored in the results store; GEMM, MatMul and convolutions also
    report (and store) GFLOP/s and the fraction of this machine's peak.
    """
    from d5core.results.store import ResultsStore
    from d5core.runners.operators import bench_ops, check_bench_request
    from d5core.workloads.roofline import cpu_peak

    names = parse_list(backends, "backends")
    problems = _op_problems(op, suite, shape, parse_attributes(attrs))
    check_bench_request(problems, names, dtype)
    peak = cpu_peak()
    peak_rate = peak.gflops.get(dtype)
    options = measure_options(min_samples, max_samples, time_budget, rel_ci, warmup)
    directions = ["forward", "backward"] if direction == "both" else [direction]
    config = {
        "op": op,
        "backends": names,
        "suite": suite,
        "problems": [p.label for p in problems],
        "directions": directions,
        "dtype": dtype,
        "measure": options.to_json(),
    }
    with (
        ResultsStore.open(db) as store,
        store.run("op", f"bench {op}", config=config, seed=seed) as run_id,
    ):
        if peak_rate:
            store.add_metric(
                run_id, "peak_gflops", peak_rate, labels={"dtype": dtype, "source": peak.source},
                unit="GFLOP/s",
            )  # fmt: skip

        def keep(timing: Any) -> None:
            _store_op_timing(store, run_id, timing)
            if not as_json:
                s = timing.measurement.summary
                console(stderr=True).print(
                    f"  {timing.backend:>8} {timing.direction:<8} {timing.problem.label}: "
                    f"{_fmt_time(s.median)} (n={s.n})"
                )

        timings = bench_ops(
                problems, names, directions=directions, dtype=dtype, options=options,
                seed=seed, on_result=keep, peak=peak,
            )  # fmt: skip
    rows = [
        {**t.to_json(), "run_id": run_id, "peak_gflops": peak_rate, "peak_source": peak.source}
        for t in timings
    ]
    if as_json:
        print_json(rows)
        return
    table = Table(title=f"d5 bench op {op} ({dtype}), run {run_id}", title_justify="left")
    table.add_column("problem", overflow="fold")
    table.add_column("direction")
    for name in names:
        table.add_column(f"{name} median [95% CI]", justify="right")
        table.add_column(f"{name} GFLOP/s (% peak)", justify="right")
    by_key = {(t.problem.label, t.direction, t.backend): t for t in timings}
    for problem in problems:
        for d in directions:
            cells: list[str] = []
            for name in names:
                t = by_key[(problem.label, d, name)]
                s = t.measurement.summary
                warn = " !" if s.stability != "stable" else ""
                cells.append(
                    f"{_fmt_time(s.median)} [{_fmt_time(s.ci_low)}, {_fmt_time(s.ci_high)}]{warn}"
                )
                if t.gflops is None:
                    cells.append("")
                else:
                    frac = f" ({100 * t.peak_fraction:.0f}%)" if t.peak_fraction else ""
                    cells.append(f"{t.gflops:.1f}{frac}")
            table.add_row(problem.label, d, *cells)
    out = console()
    out.print(table)
    out.print(
        f"peak: {peak_rate:.0f} GFLOP/s ({peak.source})" if peak_rate else f"peak: {peak.source}"
    )
    out.print("! marks a measurement whose IQR exceeds 10% of its median (unstable)")


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


def _store_op_timing(store: Any, run_id: str, timing: Any) -> None:
    """Store a timing's samples, and its GFLOP/s and peak fraction where counted."""
    labels = {
        "backend": timing.backend,
        "problem": timing.problem.label,
        "direction": timing.direction,
        "dtype": timing.dtype,
    }
    store.add_measurement(run_id, "time", timing.measurement, labels=labels)
    rates = timing.gflops_samples()
    if rates:
        store.add_measurement(run_id, "gflops", rates, labels=labels, unit="GFLOP/s")
    if timing.peak_fraction:
        store.add_metric(run_id, "peak_fraction", timing.peak_fraction, labels=labels)


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
@click.option("--breakdown", is_flag=True, help="Also time every node (a separate run).")
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Seed of the generated feeds.",
)
@sampling_options(time_budget=10.0)
@json_option
@db_option
def bench_net(
    model: str,
    executors: str,
    batch: int | None,
    mode: str,
    breakdown: bool,
    seed: int,
    min_samples: int,
    max_samples: int,
    time_budget: float,
    rel_ci: float,
    warmup: int,
    as_json: bool,
    db: Path | None,
) -> None:
    """Time a network on each executor: inference or a training step, with throughput.

    MODEL is a zoo name, a light model shipped with onnx, or a path to an .onnx file.
    A model whose graph fixes its batch runs that batch only. With --breakdown, every
    node's time is stored too, and checked against the measured step.
    """
    from d5core.results.store import ResultsStore
    from d5core.runners.networks import bench_networks, network_workload

    names = parse_list(executors, "executors")
    options = measure_options(min_samples, max_samples, time_budget, rel_ci, warmup)
    workload = network_workload(model, batch=batch, mode=mode, seed=seed)
    config = {
        "model": model,
        "executors": names,
        "batch": workload.batch,
        "mode": mode,
        "measure": options.to_json(),
    }
    with (
        ResultsStore.open(db) as store,
        store.run("net", f"bench {model}", config=config, seed=seed) as run_id,
    ):

        def keep(timing: Any) -> None:
            _store_net_timing(store, run_id, timing)

        timings = bench_networks(
            model, names, options=options, breakdown=breakdown, on_result=keep,
            workload=workload,
        )  # fmt: skip
    rows = [{**t.to_json(), "run_id": run_id} for t in timings]
    if as_json:
        print_json(rows)
        return
    out = console()
    table = Table(
        title=f"d5 bench net {model} ({mode}, batch {workload.batch}), run {run_id}",
        title_justify="left",
    )
    for column in ("executor", "median [95% CI] per step", "samples/s [95% CI]", "n"):
        table.add_column(column, justify="right")
    for row, t in zip(rows, timings, strict=True):
        s = t.measurement.summary
        warn = " !" if s.stability != "stable" else ""
        table.add_row(
            t.executor,
            f"{_fmt_time(s.median)} [{_fmt_time(s.ci_low)}, {_fmt_time(s.ci_high)}]{warn}",
            f"{row['throughput']:.1f} [{row['throughput_ci_low']:.1f}, "
            f"{row['throughput_ci_high']:.1f}]",
            str(s.n),
        )
    out.print(table)
    for t in timings:
        if t.per_node is not None and t.per_node.nodes:
            out.print(_breakdown_table(t))


def _store_net_timing(store: Any, run_id: str, timing: Any) -> None:
    """Store a step's times and throughput, and its per-node times when broken down."""
    labels = {"executor": timing.executor, "mode": timing.mode, "batch": timing.batch}
    store.add_measurement(run_id, "time", timing.measurement, labels=labels)
    store.add_measurement(
        run_id, "throughput", timing.throughput_samples(), labels=labels, unit="samples/s"
    )
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
        layers.add_row(
            node.node, node.op_type, node.direction, _fmt_time(node.median),
            f"{100 * node.share:.1f}%",
        )  # fmt: skip
    return layers
