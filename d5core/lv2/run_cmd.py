"""``d5 run RECIPE``: train under a recipe, store the run, check the recipe's thresholds.

Exit codes: 0 when every METRICS threshold holds, 1 naming the first that does not
(a diverged run fails its thresholds like any other), 2 for bad input, which is always
rejected before training starts and before anything is stored (a results database that
cannot be written included).

The command parses its options and renders; :mod:`d5core.lv2.runner` trains,
stores (a run killed at any moment reads back ``incomplete`` with what it had measured)
and checks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from d5core.cli.options import db_option, json_option
from d5core.cli.output import print_json
from d5core.cli.tag_option import tag_option
from d5core.errors import UsageError
from d5core.trace.capture import traced_line
from d5core.trace.options import trace_option

if TYPE_CHECKING:
    from d5core.lv2.runner import TrainedRun

__all__ = ["run"]


class _FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that also refuses NaN and the infinities, as it refuses a word.

    ``FloatRange`` lets ``nan`` through its bounds (no comparison with NaN is true), and
    an infinite time, size or rate is never one a benchmark can honour.
    """

    name = "float range"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if isinstance(number, float) and not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


def _run_document(runs: Sequence[TrainedRun]) -> dict[str, Any]:
    """What ``d5 run --json`` prints, whatever the number of runs or ranks: whether every
    threshold held, each run, and the summary over the runs."""
    from d5core.lv2.runner import repeat_summary

    rows = [r.to_json() for r in runs]
    return {
        "passed": all(r.passed for r in runs),
        "runs": rows,
        "summary": repeat_summary(rows),
    }


def _report(runs: Sequence[TrainedRun], as_json: bool) -> None:
    if as_json:
        print_json(_run_document(runs))
    else:
        for one in runs:
            _echo_run(one)


def _echo_run(run: TrainedRun) -> None:
    """The run's line, and one line per threshold."""
    result, values = run.result, run.values
    acc = values["final_test_accuracy"]
    tta = values["time_to_accuracy"]
    regression = bool(getattr(result, "regression", False))
    # a language model's run has a target perplexity and often no target accuracy, and
    # a regression's run has no accuracy at all
    shows_tta = not regression and (
        tta is not None or not ({"final_perplexity", "time_to_loss"} & set(values))
    )
    click.echo(
        f"run {run.run_id}: {result.status} ({result.stop_reason}) after {result.epochs} "
        f"epochs, {result.steps} steps, {result.wall_s:.2f} s"
        + ("" if regression else f"; final test accuracy {'-' if acc is None else f'{acc:.4f}'}")
        + (
            f"; time to accuracy {'not reached' if tta is None else f'{tta:.2f} s'}"
            if shows_tta
            else ""
        )
        + _perplexity_text(values)
        + _loss_text(values)
    )
    if "time_to_target_training" in values:
        ttt, spent = values["time_to_target_training"], values.get("eval_time")
        click.echo(
            "  time to target without test passes: "
            f"{'not reached' if ttt is None else f'{ttt:.2f} s'}; test passes "
            f"{'-' if spent is None else f'{spent:.2f} s'}"
            + (" until then" if ttt is not None else " in all")
        )
    parts = getattr(result, "time_to_accuracy_parts", {})
    if parts:
        shown = ", ".join(f"{name} {seconds:.3f}" for name, seconds in parts.items())
        click.echo(f"  time to accuracy in seconds: {shown}")
    for c in run.checks:
        side = "min" if "min" in c else "max"
        mark = "ok  " if c["passed"] else "FAIL"
        click.echo(f"  {mark} {c['metric']} = {c['value']} ({side} {c[side]})")
    checked = {c["metric"] for c in run.checks}
    for name, res in run.metric_results.items():
        if name not in checked:  # a metric measured without a threshold
            click.echo(f"       {name} = {_shown(values[name], res)}")


def _perplexity_text(values: dict[str, float | None]) -> str:
    """A language model's part of the run's line: final perplexity, time to perplexity."""
    if "final_perplexity" not in values:
        return ""
    ppl, ttp = values["final_perplexity"], values.get("time_to_perplexity")
    return (
        f"; final perplexity {'-' if ppl is None else f'{ppl:.4f}'}; time to perplexity "
        f"{'not reached' if ttp is None else f'{ttp:.2f} s'}"
    )


def _loss_text(values: dict[str, float | None]) -> str:
    """A regression's (or a target loss's) part of the run's line: final test loss,
    time to loss."""
    if "final_test_loss" not in values:
        return ""
    loss = values["final_test_loss"]
    text = f"; final test loss {'-' if loss is None else f'{loss:.4g}'}"
    if "time_to_loss" in values:  # a run with a target loss
        ttl = values["time_to_loss"]
        text += f"; time to loss {'not reached' if ttl is None else f'{ttl:.2f} s'}"
    return text


def _shown(value: float | None, result: dict[str, Any]) -> str:
    """A selected metric's value with its unit, or why it has none."""
    if value is None:
        return f"unavailable ({result['unavailable']})" if "unavailable" in result else "no value"
    return f"{value:.6g} {result.get('unit', '')}".rstrip()


#: Under the summary of repeated runs: why their first is as fast as the others.
_WARMED = (
    "(one unstored warm-up run trained first, so that no repeat pays the process's "
    "one-time costs: imports, compilation, caches)"
)


def _echo_summary(runs: Sequence[TrainedRun]) -> None:
    """The summary line of repeated runs."""
    from d5core.lv2.runner import repeat_summary

    summary = repeat_summary([r.to_json() for r in runs])
    if "reached_target_loss" in summary:  # a regression's runs, or a target loss
        olympic = summary["time_to_loss_olympic_mean"]
        click.echo(
            f"{len(runs)} runs, {summary['reached_target_loss']} reached the target loss; "
            f"time to loss olympic mean {'-' if olympic is None else f'{olympic:.3f} s'}"
        )
        click.echo(_WARMED)
        return
    if "reached_target_perplexity" in summary:  # a language model's runs
        olympic = summary["time_to_perplexity_olympic_mean"]
        click.echo(
            f"{len(runs)} runs, {summary['reached_target_perplexity']} reached the target "
            f"perplexity; time to perplexity olympic mean "
            f"{'-' if olympic is None else f'{olympic:.3f} s'}"
        )
        click.echo(_WARMED)
        return
    olympic = summary["time_to_accuracy_olympic_mean"]
    click.echo(
        f"{len(runs)} runs, {summary['reached_target']} reached the target; time to accuracy "
        f"olympic mean {'-' if olympic is None else f'{olympic:.3f} s'}"
    )
    click.echo(_WARMED)


def _check_communicator_variable() -> None:
    """Refuse a ``D5_DISTRIBUTED_COMMUNICATOR`` that names no installed communicator:
    set by the user, it chooses the communicator (and with it the launcher) of a run on
    several ranks, so a bad name would make the run something other than was asked for."""
    import os

    from d5core.lv3.launch import COMMUNICATOR_ENV
    from d5core.plugins import get_plugin_manager

    name = os.environ.get(COMMUNICATOR_ENV, "")
    if not name:
        return
    installed = sorted(get_plugin_manager().names("d5.communication"))
    if name not in installed:
        raise UsageError(
            f"{COMMUNICATOR_ENV}={name!r} names no installed communicator (d5.communication: "
            f"{', '.join(installed) or 'none'}); set it to one of them, or unset it"
        )


def _rank_argv(
    recipe: Path,
    sets: Sequence[str],
    ranks: int,
    dist_args: dict[str, Any],
    scheme_options: Sequence[str],
    rank_timeout: float,
    as_json: bool,
    metrics: Sequence[str] = (),
    tags: Sequence[str] = (),
    trace: str | None = None,
) -> Callable[[int, Path], list[str]]:
    """The arguments each rank's ``d5`` runs, given the resolved seed and database."""

    def argv(seed: int, db_path: Path | str) -> list[str]:
        args = ["run", str(recipe), "--seed", str(seed), "--db", str(db_path),
                "--ranks", str(ranks), "--scheme", dist_args["scheme"],
                "--rank-timeout", str(rank_timeout)]  # fmt: skip
        for item in sets:
            args += ["--set", item]
        for item in scheme_options:
            args += ["--scheme-option", item]
        for name in metrics:
            args += ["--metric", name]
        for tag in tags:
            args += ["--tag", tag]
        args += ["--trace", trace] if trace is not None else []
        args += ["--json"] if as_json else []
        args += ["--global-batch"] if dist_args["global_batch"] else []
        return args

    return argv


@click.command("run")
@click.argument("recipe", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Change a MUTABLE key.")
@click.option(
    "--seed",
    type=click.IntRange(min=0),
    default=None,
    help="Override the seed (refused when the recipe freezes it in FIXED).",
)
@click.option(
    "--repeat",
    type=click.IntRange(min=1, max=10_000),
    default=1,
    show_default=True,
    help="Run N times with seeds SEED, SEED+1, ... (every run keeps a seed FIXED by the "
    "recipe); each run is stored.",
)
@click.option(
    "--ranks",
    type=click.IntRange(min=1),
    default=None,
    help="Train data-parallel on N ranks (re-launched under the communication plugin's "
    "launcher unless already under one).",
)
@click.option(
    "--scheme",
    default=None,
    metavar="NAME",
    help="Distribution scheme with --ranks (default: allreduce).",
)
@click.option(
    "--scheme-option",
    "scheme_options",
    multiple=True,
    metavar="KEY=VALUE",
    help="An option of the scheme (repeatable).",
)
@click.option(
    "--communicator",
    default=None,
    metavar="NAME",
    help="With --ranks: the d5.communication entry the ranks use, started by the launcher "
    "its plugin offers (default: mpi's mpiexec; gloo: torchrun); under an outside "
    "launcher, the one this rank uses.",
)
@click.option(
    "--rank-timeout",
    type=_FiniteFloatRange(min=1.0),
    default=30.0,
    show_default=True,
    help="Kill the job when a rank gives no sign of life for this many seconds.",
)
@click.option(
    "--global-batch",
    is_flag=True,
    help="Keep batch_size as the global batch: each rank takes batch_size / N.",
)
@click.option(
    "--metric",
    "metrics",
    multiple=True,
    metavar="NAME",
    help="Also measure this installed metric (d5.metrics), without a threshold (repeatable).",
)
@trace_option
@json_option
@db_option
@tag_option
def run(
    recipe: Path,
    sets: tuple[str, ...],
    seed: int | None,
    repeat: int,
    ranks: int | None,
    scheme: str | None,
    scheme_options: tuple[str, ...],
    communicator: str | None,
    rank_timeout: float,
    global_batch: bool,
    metrics: tuple[str, ...],
    as_json: bool,
    db: str | Path | None,
    tags: tuple[str, ...],
    trace: str | None,
) -> None:
    """Train under RECIPE (.toml or .py), store the run and check its METRICS thresholds.

    Exits 0 when every threshold holds (in every run), 1 when one fails, 2 for bad input
    (checked before anything is stored), 130 when interrupted. The run is stored while it
    trains, so a killed run keeps what it measured. With --ranks N (N > 1) the run is
    data-parallel over N ranks (MPI unless --communicator names another). Every run
    stored carries the --tag names. A recipe with kind = "inference" runs a network under
    MLPerf LoadGen (docs/inference.md).
    """
    from d5core.loadgen.recipe import is_inference_recipe

    _check_communicator_variable()
    if is_inference_recipe(recipe):
        from d5core.loadgen.scenario_cmd import run_inference_command

        refused = {"--ranks": ranks is not None, "--scheme": scheme is not None,
                   "--communicator": communicator is not None,
                   "--scheme-option": bool(scheme_options), "--global-batch": global_batch,
                   "--metric": bool(metrics), "--trace": trace is not None}  # fmt: skip
        run_inference_command(recipe, sets=sets, seed=seed, repeat=repeat, as_json=as_json,
                              db=db, tags=tags, refused=refused)  # fmt: skip
        return
    from d5core.lv2.runner import (
        first_threshold_failure,
        launch_ranks,
        run_rank,
        run_recipe,
    )
    from d5core.lv3.launch import (
        DEFAULT_SCHEME,
        RankContext,
        check_communicator_name,
        parse_scheme_options,
        scheme_class,
    )

    if communicator is not None:
        check_communicator_name(communicator)
    dist_args: dict[str, Any] = {
        "scheme": scheme or DEFAULT_SCHEME,
        "scheme_options": parse_scheme_options(scheme_options),
        "global_batch": global_batch,
    }
    ctx = RankContext.from_environment() if ranks is None or ranks > 1 else None
    if communicator is not None and (ctx is None and (ranks is None or ranks < 2)):
        raise UsageError(
            "--communicator needs --ranks N with N > 1, or a launcher that started this "
            "process as one of several ranks"
        )
    if ctx is not None:
        if ranks is not None and ranks != ctx.size:
            raise UsageError(f"--ranks {ranks} but the launcher started {ctx.size} ranks")
        if repeat > 1:
            raise UsageError("--repeat cannot be combined with several ranks")
        if communicator is not None:
            ctx.communicator_name = communicator
        run_rank(ctx, recipe, sets, seed, dist_args, db=db,
                 on_run=lambda one: _report([one], as_json), metrics=metrics,
                 tags=tags, trace=trace)  # fmt: skip
        return
    if ranks is not None and ranks > 1:
        if repeat > 1:
            raise UsageError("--repeat cannot be combined with --ranks")
        scheme_class(dist_args["scheme"])
        argv = _rank_argv(recipe, sets, ranks, dist_args, scheme_options, rank_timeout, as_json,
                          metrics, tags, trace)  # fmt: skip
        launch_ranks(recipe, sets, seed, ranks, dist_args, rank_timeout=rank_timeout, db=db,
                     rank_argv=argv, metrics=metrics, tags=tags,
                     communicator=communicator, trace=trace)  # fmt: skip
        return
    if scheme is not None or scheme_options or global_batch:
        raise UsageError("--scheme, --scheme-option and --global-batch need --ranks N with N > 1")
    runs = run_recipe(recipe, sets, seed, repeat=repeat, db=db,
                      on_run=None if as_json else _echo_run, metrics=metrics,
                      tags=tags, trace=trace)  # fmt: skip
    if as_json:
        print_json(_run_document(runs))
    elif repeat > 1:
        _echo_summary(runs)
    if trace is not None and not as_json:
        for one in runs:
            click.echo(traced_line(one.run_id, trace))
    failure = first_threshold_failure(runs)
    if failure is not None:
        raise failure
