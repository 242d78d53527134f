"""``d5 bench``: measure implementations side by side through the measurement engine."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.table import Table

from d5core.cli._parse import parse_attributes, parse_list
from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.errors import UsageError

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
    """Benchmark operators (and, later, networks) across backends."""


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
@click.option("--seed", default=0, show_default=True, help="Seed of the generated inputs.")
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

    Every sample is stored in the results store; GEMM and convolution also report
    GFLOP/s and the fraction of this machine's peak.
    """
    from d5core.results.store import ResultsStore
    from d5core.runners.operators import bench_ops, problem_for
    from d5core.workloads.problems import parse_shapes
    from d5core.workloads.problems import suite as suite_problems
    from d5core.workloads.roofline import cpu_peak

    if suite and shape:
        raise UsageError("give either --suite or --shape, not both")
    names = parse_list(backends, "backends")
    attributes = parse_attributes(attrs)
    if suite:
        problems = suite_problems(suite, op)
    else:
        problems = [
            problem_for(op, shapes=parse_shapes(shape) if shape else None, attributes=attributes)
        ]
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

        def keep(timing: Any) -> None:
            labels = {
                "backend": timing.backend,
                "problem": timing.problem.label,
                "direction": timing.direction,
                "dtype": timing.dtype,
            }
            store.add_measurement(run_id, "time", timing.measurement, labels=labels)
            if not as_json:
                s = timing.measurement.summary
                console(stderr=True).print(
                    f"  {timing.backend:>8} {timing.direction:<8} {timing.problem.label}: "
                    f"{_fmt_time(s.median)} (n={s.n})"
                )

        timings = bench_ops(
                problems, names, directions=directions, dtype=dtype, options=options,
                seed=seed, on_result=keep,
            )  # fmt: skip
    rows = [{**t.to_json(), "run_id": run_id} for t in timings]
    if as_json:
        print_json(rows)
        return
    peak = cpu_peak()
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
    peak_line = peak.gflops.get(dtype)
    out.print(
        f"peak: {peak_line:.0f} GFLOP/s ({peak.source})" if peak_line else f"peak: {peak.source}"
    )
    out.print("! marks a measurement whose IQR exceeds 10% of its median (unstable)")


@bench.command("net")
@click.argument("model")
@click.option("--executors", required=True, help="Comma-separated executors, e.g. numpy,torch.")
@click.option("--batch", default=32, show_default=True, help="Samples per step.")
@click.option(
    "--mode",
    type=click.Choice(["inference", "train-step"]),
    default="inference",
    show_default=True,
)
@click.option("--breakdown", is_flag=True, help="Also time every node (a separate run).")
@click.option("--seed", default=0, show_default=True, help="Seed of the generated feeds.")
@sampling_options(time_budget=10.0)
@json_option
@db_option
def bench_net(
    model: str,
    executors: str,
    batch: int,
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
    """
    from d5core.results.store import ResultsStore
    from d5core.runners.networks import bench_networks

    if batch <= 0:
        raise UsageError(f"--batch must be positive, got {batch}")
    names = parse_list(executors, "executors")
    options = measure_options(min_samples, max_samples, time_budget, rel_ci, warmup)
    config = {
        "model": model,
        "executors": names,
        "batch": batch,
        "mode": mode,
        "measure": options.to_json(),
    }
    with (
        ResultsStore.open(db) as store,
        store.run("net", f"bench {model}", config=config, seed=seed) as run_id,
    ):

        def keep(timing: Any) -> None:
            labels = {"executor": timing.executor, "mode": timing.mode, "batch": timing.batch}
            store.add_measurement(run_id, "time", timing.measurement, labels=labels)
            rates = [timing.batch / s for s in timing.measurement.samples if s > 0]
            store.add_measurement(run_id, "throughput", rates, labels=labels, unit="samples/s")

        timings = bench_networks(
            model, names, batch=batch, mode=mode, options=options, seed=seed,
            breakdown=breakdown, on_result=keep,
        )  # fmt: skip
    rows = [{**t.to_json(), "run_id": run_id} for t in timings]
    if as_json:
        print_json(rows)
        return
    out = console()
    table = Table(title=f"d5 bench net {model} ({mode}, batch {batch}), run {run_id}",
                  title_justify="left")  # fmt: skip
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
        if not t.breakdown:
            continue
        layers = Table(title=f"per-node time on {t.executor} (top 15)", title_justify="left")
        for column in ("node", "op", "median", "share"):
            layers.add_column(column)
        for layer in t.breakdown[:15]:
            layers.add_row(
                layer["node"], layer["op_type"], _fmt_time(layer["median"]),
                f"{100 * layer['share']:.1f}%",
            )  # fmt: skip
        out.print(layers)
