"""``d5 run RECIPE``: train under a recipe, store the run, check the recipe's thresholds.

Exit codes: 0 when every METRICS threshold holds, 1 naming the first that does not
(a diverged run fails its thresholds like any other), 2 for bad input, which is always
rejected before training starts and before anything is stored (a results database that
cannot be written included).

The run is begun in the store (``running``) once the data is loaded and the model built,
and its samples are stored as they come (:mod:`d5core.training.recording`): a run killed
at any moment reads back ``incomplete`` with what it had measured.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from d5core.cli.options import db_option, json_option
from d5core.cli.output import print_json
from d5core.errors import CheckFailed, D5Error, UsageError

__all__ = ["Prepared", "metric_values", "prepare", "repeat_summary", "run"]


class Prepared:
    """Everything a run needs, built from a recipe before any training or storage."""

    def __init__(
        self,
        recipe: Any,
        seed: int,
        *,
        dist: Any = None,
        scheme: str = "allreduce",
        scheme_options: dict[str, Any] | None = None,
        global_batch: bool = False,
    ) -> None:
        """With ``dist`` (a :class:`d5core.training.distributed.RankContext`), the sampler
        is this rank's partition and the optimizer is wrapped by ``scheme``; each rank
        takes ``batch_size`` examples per step (``batch_size / ranks`` with
        ``global_batch``)."""
        from d5core.bus import MetricBus
        from d5core.plugins import get_plugin_manager
        from d5core.runners.networks import executor_by_name, load_model, with_loss
        from d5core.training.datasets import data_manifest, load_dataset
        from d5core.training.recipes import run_hash
        from d5core.training.samplers import make_sampler
        from d5core.training.trainer import RunClock, StopConditions, Trainer

        s = recipe.settings()
        self.recipe, self.seed, self.settings = recipe, seed, s
        self.dist = dist
        self.batch_size = int(s["batch_size"])
        if dist is not None and global_batch:
            if self.batch_size % dist.size:
                raise UsageError(
                    f"--global-batch: batch_size {self.batch_size} is not a multiple of "
                    f"{dist.size} ranks"
                )
            self.batch_size //= dist.size
        # MLPerf's clock starts at the first touch of data: before the datasets load.
        clock = RunClock.start(s.get("target_accuracy"), bus=MetricBus())
        self.train_set = load_dataset(s["dataset"], "train", **s["dataset_options"])
        test_options = {**s["dataset_options"], **s["test_dataset_options"]}
        self.test_set = load_dataset(s["dataset"], "test", **test_options)
        #: What the run read: a content digest of each split and where it came from.
        self.data = {"train": data_manifest(self.train_set), "test": data_manifest(self.test_set)}
        #: The hash stored with the run: the recipe as it runs, and the data it read.
        self.run_hash = run_hash(recipe.hash, {k: v["sha256"] for k, v in self.data.items()})
        model_options = dict(s["model_options"])
        if not str(s["model"]).endswith(".onnx"):
            model_options.setdefault("input_shape", tuple(self.train_set.input_shape))
            if self.train_set.num_classes is not None:
                model_options.setdefault("classes", int(self.train_set.num_classes))
            model_options.setdefault("seed", seed)
        network = load_model(s["model"], **model_options)
        trained, loss = with_loss(network)
        executor = executor_by_name(s["executor"], trained)
        opt_cls = get_plugin_manager().load("d5.optimizers", s["optimizer"])
        try:
            optimizer = opt_cls(lr=float(s["lr"]), **s["optimizer_options"])
        except TypeError as exc:
            raise UsageError(f"optimizer {s['optimizer']}: bad options: {exc}") from None
        bus = clock.bus
        if dist is None:
            sampler = make_sampler(
                s["sampler"],
                len(self.train_set),
                int(s["batch_size"]),
                seed=seed,
                **s["sampler_options"],
            )
            steps_per_epoch = math.ceil(len(self.train_set) / int(s["batch_size"]))
        else:
            from d5core.bus import MetricBus
            from d5core.training.distributed import partitioned_sampler

            sampler = partitioned_sampler(
                s["sampler"], len(self.train_set), self.batch_size, rank=dist.rank,
                world_size=dist.size, seed=seed, options=s["sampler_options"],
            )  # fmt: skip
            steps_per_epoch = math.ceil(sampler.num_examples() / self.batch_size)
            optimizer = dist.wrap_optimizer(scheme, optimizer, scheme_options or {})
            bus.subscribe("train.step.end", dist.on_step)
            for event in ("train.epoch.end", "test.pass.end", "run.end"):
                bus.subscribe(event, dist.mark_progress)
        schedule = modifiers = transforms = None
        if s.get("schedule") is not None:
            from d5core.training.schedules import make_schedule

            total = s.get("max_steps") or int(s["epochs"]) * steps_per_epoch
            schedule = make_schedule(s["schedule"], total_steps=total)
        if s.get("modifiers") is not None:
            from d5core.training.modifiers import make_modifiers

            modifiers = make_modifiers(s["modifiers"])
        if s.get("transforms") is not None:
            from d5core.training.transforms import make_transforms

            transforms = make_transforms(s["transforms"])
        stop = StopConditions(
            max_epochs=int(s["epochs"]),
            max_steps=s.get("max_steps"),
            time_budget_s=s.get("time_budget"),
            target_accuracy=s.get("target_accuracy"),
            patience=s.get("patience"),
        )
        self.trainer = Trainer(
            executor, loss, optimizer, self.train_set, sampler,
            test_set=self.test_set, test_every=s["test_every"], schedule=schedule,
            modifiers=modifiers, transforms=transforms, stop=stop, seed=seed,
            eval_batch_size=int(s["eval_batch_size"]), clock=clock,
            agree=dist.agree if dist is not None else None,
        )  # fmt: skip


def prepare(
    recipe_path: str | Path, sets: list[str], seed: int | None, **distributed: Any
) -> Prepared:
    """Load, check and override the recipe, then build every component (no training).

    ``distributed`` goes to :class:`Prepared` (``dist``, ``scheme``, ...).

    :raises UsageError: for bad input, a ``seed`` other than one the recipe freezes
        included.
    """
    from d5core.training.recipes import load_recipe

    recipe = load_recipe(recipe_path).with_overrides(sets)
    return Prepared(recipe, recipe.run_seed(seed), **distributed)


def metric_values(result: Any) -> dict[str, float | None]:
    """The scalars a recipe may put thresholds on, from a training result."""
    training = result.metrics.get("training_accuracy", {}).get("value")
    final_loss = result.losses[-1] if result.losses else None
    return {
        "final_test_accuracy": result.final_test_accuracy,
        "best_test_accuracy": result.best_test_accuracy,
        "time_to_accuracy": result.time_to_accuracy,
        "training_accuracy": float(training) if isinstance(training, int | float) else None,
        "final_loss": final_loss,
        "throughput": result.throughput.get("samples_per_s"),
        "wall_time": result.wall_s,
        "steps": float(result.steps),
        "epochs": float(result.epochs),
    }


def _json_safe(value: float | None) -> float | str | None:
    if value is None or math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def _begin(
    store: Any, prep: Prepared, extra: dict[str, Any], environment: dict[str, Any] | None = None
) -> str:
    """Begin the ``train`` run of ``prep`` (status ``running``); ``extra`` joins its config.

    The stored hash is ``prep.run_hash``: the recipe after overrides and the data read.
    ``environment`` is captured now unless given.
    """
    from d5core.environment import capture_environment

    recipe = prep.recipe
    config = {
        "recipe": recipe.path,
        "recipe_form": recipe.form,
        "recipe_hash": recipe.hash,
        "loaded_recipe_hash": recipe.loaded_hash,
        "fixed": recipe.fixed,
        "mutable": recipe.mutable,
        "metrics": recipe.metrics,
        "overrides": recipe.overrides,
        "settings": prep.settings,
        "data": prep.data,
        **extra,
    }
    env = dict(environment or capture_environment(seeds={"recipe": prep.seed}))
    env["recipe_hash"] = prep.run_hash
    run_id = store.begin_run(
        "train", recipe.name, config=config, environment=env, seed=prep.seed,
        recipe_hash=prep.run_hash,
    )  # fmt: skip
    return str(run_id)


def _record(store: Any, run_id: str, result: Any, values: dict[str, float | None]) -> None:
    """Store a result's metrics and curves in the running run ``run_id`` and finish it."""
    from d5core.training.recording import RunRecorder

    RunRecorder(store, run_id).finish(result, values)


def _run_json(prep: Prepared, run_id: str, result: Any, values: dict[str, float | None],
              checks: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    return {
        "run_id": run_id,
        "recipe": prep.recipe.name,
        "recipe_hash": prep.run_hash,
        "seed": prep.seed,
        "status": result.status,
        "stop_reason": result.stop_reason,
        "passed": all(c["passed"] for c in checks),
        "epochs": result.epochs,
        "steps": result.steps,
        "metrics": {k: _json_safe(v) for k, v in values.items()},
        "checks": [{k: _json_safe(v) if k == "value" else v for k, v in c.items()}
                   for c in checks],
    }  # fmt: skip


def _echo_run(run_id: str, result: Any, values: dict[str, float | None],
              checks: list[dict[str, Any]]) -> None:  # fmt: skip
    acc = values["final_test_accuracy"]
    tta = values["time_to_accuracy"]
    click.echo(
        f"run {run_id}: {result.status} ({result.stop_reason}) after {result.epochs} epochs, "
        f"{result.steps} steps, {result.wall_s:.2f} s; final test accuracy "
        f"{'-' if acc is None else f'{acc:.4f}'}; time to accuracy "
        f"{'not reached' if tta is None else f'{tta:.2f} s'}"
    )
    for c in checks:
        side = "min" if "min" in c else "max"
        mark = "ok  " if c["passed"] else "FAIL"
        click.echo(f"  {mark} {c['metric']} = {c['value']} ({side} {c[side]})")


def repeat_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Time to accuracy over repeated runs as MLPerf reports it: every run counts, one
    that never reached the target as infinitely slow; the olympic mean (best and worst
    dropped, from 3 runs on) beside the median and its interval. A figure that falls on
    a run that did not reach the target is ``None`` ("not reached")."""
    from d5core.results.summaries import range_of, time_to_accuracy_summary

    def finite(value: float | None) -> float | None:
        return value if value is not None and math.isfinite(value) else None

    ttas = [r["metrics"]["time_to_accuracy"] for r in rows]
    tta = time_to_accuracy_summary([t if isinstance(t, int | float) else None for t in ttas])
    summary: dict[str, Any] = {
        "runs": len(rows),
        "reached_target": tta["reached"],
        "time_to_accuracy_olympic_mean": tta["olympic_mean"],
        "time_to_accuracy": {k: finite(tta[k]) for k in ("median", "ci_low", "ci_high")},
    }
    accs = [
        float(a)
        for a in (r["metrics"]["final_test_accuracy"] for r in rows)
        if isinstance(a, int | float)
    ]
    if accs:
        summary["final_test_accuracy"] = {
            k: v for k, v in range_of(accs).items() if k in ("median", "min", "max")
        }
    return summary


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
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run N times with seeds SEED, SEED+1, ... (every run keeps a seed FIXED by the "
    "recipe); each run is stored.",
)
@click.option(
    "--ranks",
    type=click.IntRange(min=1),
    default=None,
    help="Train data-parallel on N ranks (re-launched under mpiexec unless already).",
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
    "--rank-timeout",
    type=click.FloatRange(min=1.0),
    default=30.0,
    show_default=True,
    help="Kill the job when a rank gives no sign of life for this many seconds.",
)
@click.option(
    "--global-batch",
    is_flag=True,
    help="Keep batch_size as the global batch: each rank takes batch_size / N.",
)
@json_option
@db_option
def run(
    recipe: Path,
    sets: tuple[str, ...],
    seed: int | None,
    repeat: int,
    ranks: int | None,
    scheme: str | None,
    scheme_options: tuple[str, ...],
    rank_timeout: float,
    global_batch: bool,
    as_json: bool,
    db: Path | None,
) -> None:
    """Train under RECIPE (.toml or .py), store the run and check its METRICS thresholds.

    Exits 0 when every threshold holds (in every run), 1 when one fails, 2 for bad input
    (checked before anything is stored), 130 when interrupted. The run is stored while it
    trains, so a killed run keeps what it measured. With --ranks N (N > 1) the run is
    data-parallel over N MPI ranks.
    """
    from d5core.training.distributed import (
        DEFAULT_SCHEME,
        RankContext,
        parse_scheme_options,
        scheme_class,
    )

    dist_args: dict[str, Any] = {
        "scheme": scheme or DEFAULT_SCHEME,
        "scheme_options": parse_scheme_options(scheme_options),
        "global_batch": global_batch,
    }
    ctx = RankContext.from_environment() if ranks is None or ranks > 1 else None
    if ctx is not None:
        if ranks is not None and ranks != ctx.size:
            raise UsageError(f"--ranks {ranks} but the launcher started {ctx.size} ranks")
        if repeat > 1:
            raise UsageError("--repeat cannot be combined with several ranks")
        _run_rank(ctx, recipe, list(sets), seed, dist_args, as_json, db)
        return
    if ranks is not None and ranks > 1:
        if repeat > 1:
            raise UsageError("--repeat cannot be combined with --ranks")
        scheme_class(dist_args["scheme"])
        _run_parent(recipe, list(sets), seed, ranks, dist_args, scheme_options, rank_timeout,
                    as_json, db)  # fmt: skip
        return
    if scheme is not None or scheme_options or global_batch:
        raise UsageError("--scheme, --scheme-option and --global-batch need --ranks N with N > 1")
    _run_local(recipe, sets, seed, repeat, as_json, db)


def _dist_config(prep: Prepared, size: int, dist_args: dict[str, Any]) -> dict[str, Any]:
    return {
        "ranks": size,
        "scheme": dist_args["scheme"],
        "scheme_options": dist_args["scheme_options"],
        "per_rank_batch_size": prep.batch_size // (size if dist_args["global_batch"] else 1),
        "global_batch_size": prep.batch_size * (1 if dist_args["global_batch"] else size),
    }


def _run_parent(
    recipe: Path,
    sets: list[str],
    seed: int | None,
    ranks: int,
    dist_args: dict[str, Any],
    scheme_options: tuple[str, ...],
    rank_timeout: float,
    as_json: bool,
    db: Path | None,
) -> None:
    """Check everything, begin the run, launch N ranks under mpiexec and watch them.

    Bad options end with exit 2 before anything is stored. SIGINT, SIGTERM and SIGHUP
    stop mpiexec and every rank, mark the run interrupted and end with
    :class:`~d5core.training.distributed.RunInterrupted`.
    """
    from d5core.results.paths import resolve_db_path
    from d5core.results.store import ResultsStore
    from d5core.training.distributed import (
        RankFailed,
        RunInterrupted,
        StopSignals,
        check_rank_options,
        launch,
    )

    prep = prepare(recipe, sets, seed)  # bad input fails here, before anything is stored
    check_rank_options(prep.settings, len(prep.train_set), ranks, local=prep.trainer.optimizer,
                       **dist_args)  # fmt: skip
    db_path = resolve_db_path(db).absolute()
    argv = ["run", str(recipe), "--seed", str(prep.seed), "--db", str(db_path),
            "--ranks", str(ranks), "--scheme", dist_args["scheme"],
            "--rank-timeout", str(rank_timeout)]  # fmt: skip
    for item in sets:
        argv += ["--set", item]
    for item in scheme_options:
        argv += ["--scheme-option", item]
    argv += ["--json"] if as_json else []
    argv += ["--global-batch"] if dist_args["global_batch"] else []

    def finish(rid: str | None, status: str, message: str) -> str:
        """Finish ``rid`` as ``status`` unless it already ended; its status now."""
        if rid is None:
            return "not begun"
        with ResultsStore.open(db_path) as st:
            if st.get_run(rid).status == "running":
                st.finish_run(rid, status, message)
            return st.get_run(rid).status

    def mark_failed(rid: str | None, message: str) -> None:
        finish(rid, "failed", message)

    with StopSignals() as stop:
        with ResultsStore.open(db_path) as store:
            run_id = _begin(store, prep, {"distributed": _dist_config(prep, ranks, dist_args)})
        try:
            outcome = launch(ranks, argv, rank_timeout=rank_timeout, run_id=run_id,
                             on_failure=mark_failed, stop=stop)  # fmt: skip
        except BaseException as exc:
            error = " ".join(str(exc).split()) or type(exc).__name__
            mark_failed(run_id, f"the launch failed: {error}")
            raise
        stopped = None
        if outcome.signum is not None:
            what = f"interrupted by {stop.name}; mpiexec and its {ranks} ranks were stopped"
            status = finish(run_id, "interrupted", what)
            stopped = RunInterrupted(outcome.signum, f"{what} (run {run_id}: {status})")
    if stopped is not None:
        raise stopped
    if outcome.code == 0:
        return
    message = outcome.message or "the distributed run failed"
    if outcome.code == 2:
        raise UsageError(message)
    if message.startswith("rank "):
        raise RankFailed(f"{message} (run {run_id} marked failed)")
    raise CheckFailed(message)


def _run_rank(
    ctx: Any,
    recipe: Path,
    sets: list[str],
    seed: int | None,
    dist_args: dict[str, Any],
    as_json: bool,
    db: Path | None,
) -> None:
    """One rank, in place: train this rank's share; rank 0 stores the run and checks."""
    import os

    from d5core.results.store import ResultsStore
    from d5core.training.distributed import RANK_METRICS, RUN_ID_ENV
    from d5core.training.recipes import check_thresholds

    ctx.start()
    code, error, run_id = 0, None, None
    try:
        prep = prepare(recipe, sets, seed, dist=ctx, **dist_args)
        if ctx.rank == 0:
            run_id = os.environ.get(RUN_ID_ENV) or None
            if run_id is None:
                with ResultsStore.open(db) as store:
                    run_id = _begin(
                        store, prep, {"distributed": _dist_config(prep, ctx.size, dist_args)}
                    )
            ctx.write_run_id(run_id)
        result = prep.trainer.run()
        table = ctx.gather(ctx.rank_values(result))
        if ctx.rank != 0:
            return
        assert run_id is not None
        values = metric_values(result)
        units = {"rank_bytes_sent": "B", "rank_bytes_received": "B", "rank_comm_time": "s",
                 "rank_wall_time": "s"}  # fmt: skip
        with ResultsStore.open(db) as store:
            for r, row in enumerate(table):
                for name, value in zip(RANK_METRICS, row, strict=True):
                    if math.isfinite(float(value)):
                        store.add_metric(run_id, name, float(value), labels={"rank": r},
                                         unit=units.get(name, ""))  # fmt: skip
            walls = [float(w) for w in table[:, RANK_METRICS.index("rank_wall_time")]]
            samples = float(table[:, RANK_METRICS.index("rank_samples")].sum())
            if max(walls) > 0:
                store.add_metric(run_id, "global_throughput", samples / max(walls),
                                 unit="samples/s")  # fmt: skip
            _record(store, run_id, result, values)
        checks = check_thresholds(prep.recipe, values)
        row_json = _run_json(prep, run_id, result, values, checks)
        row_json["distributed"] = {
            **_dist_config(prep, ctx.size, dist_args),
            "per_rank": [{"rank": r, **{k: _json_safe(float(v)) for k, v in
                                        zip(RANK_METRICS, row, strict=True)}}
                         for r, row in enumerate(table)],
        }  # fmt: skip
        if as_json:
            print_json(row_json)
        else:
            _echo_run(run_id, result, values, checks)
        failed = [c for c in checks if not c["passed"]]
        if failed:
            _raise_check(prep, run_id, failed[0], result)
    except BaseException as exc:
        code = exc.exit_code if isinstance(exc, D5Error) else 1
        error = " ".join(str(exc).split()) or type(exc).__name__
        if not isinstance(exc, D5Error):
            error = f"{type(exc).__name__}: {error}"
        if ctx.rank == 0 and run_id is not None and not isinstance(exc, CheckFailed):
            try:
                with ResultsStore.open(db) as store:
                    if store.get_run(run_id).status == "running":
                        store.finish_run(run_id, "failed", f"rank 0: {error}")
            except D5Error:
                pass
        raise
    finally:
        ctx.finish(code, error)


def _raise_check(prep: Prepared, run_id: str, c: dict[str, Any], result: Any) -> None:
    side = "min" if "min" in c else "max"
    op = ">=" if side == "min" else "<="
    shown = "not reached" if c["value"] is None else f"{c['value']:.6g}"
    raise CheckFailed(
        f"recipe {prep.recipe.name}: {c['metric']} = {shown}, needs {op} {c[side]} "
        f"(run {run_id}, {result.status})"
    )


def _run_local(
    recipe: Path,
    sets: tuple[str, ...],
    seed: int | None,
    repeat: int,
    as_json: bool,
    db: Path | None,
) -> None:
    """The single-process run (the command without --ranks).

    Bad input (the recipe, ``--seed``, the database, the data, the model) fails before
    anything is stored; each run is then begun ``running`` and stored as it goes.
    """
    from d5core.results.store import ResultsStore
    from d5core.training.recipes import check_thresholds, load_recipe

    loaded = load_recipe(recipe).with_overrides(list(sets))
    first_seed = loaded.run_seed(seed)
    frozen = "seed" in loaded.fixed
    rows: list[dict[str, Any]] = []
    failures: list[tuple[str, dict[str, Any], Any]] = []
    first: Prepared | None = None
    with ResultsStore.open(db) as store:
        store.require_writable()
        for index in range(repeat):
            run_seed = first_seed if frozen else first_seed + index
            prep, run_id, result = _train_one(store, loaded, run_seed)
            first = first or prep
            values = metric_values(result)
            checks = check_thresholds(prep.recipe, values)
            rows.append(_run_json(prep, run_id, result, values, checks))
            failures += [(run_id, c, result) for c in checks if not c["passed"]]
            if not as_json:
                _echo_run(run_id, result, values, checks)
    _report_local(rows, repeat, as_json)
    if failures and first is not None:
        run_id, c, result = failures[0]
        _raise_check(first, run_id, c, result)


def _train_one(store: Any, recipe: Any, seed: int) -> tuple[Prepared, str, Any]:
    """Prepare, begin, train and finish one run of ``recipe``; the run streams its
    samples into ``store`` as it goes."""
    from d5core.environment import capture_environment
    from d5core.training.recording import RunRecorder

    env = capture_environment(seeds={"recipe": seed})  # before the run's clock starts
    prep = Prepared(recipe, seed)
    run_id = _begin(store, prep, {}, env)
    recorder = RunRecorder(store, run_id)
    prep.trainer.on_progress = recorder
    try:
        result = prep.trainer.run()
    except BaseException as exc:
        recorder.abort(prep.trainer.curves, exc)
        raise
    values = metric_values(result)
    extra = {"stop_reason": result.stop_reason, "diverged_at": result.diverged_at}
    recorder.finish(result, values, config=extra)
    return prep, run_id, result


def _report_local(rows: list[dict[str, Any]], repeat: int, as_json: bool) -> None:
    """Print the runs' JSON, or the summary line of repeated runs."""
    if as_json:
        if repeat == 1:
            print_json(rows[0])
        else:
            passed = all(r["passed"] for r in rows)
            print_json({"passed": passed, "runs": rows, "summary": repeat_summary(rows)})
    elif repeat > 1:
        summary = repeat_summary(rows)
        olympic = summary["time_to_accuracy_olympic_mean"]
        click.echo(
            f"{repeat} runs, {summary['reached_target']} reached the target; time to accuracy "
            f"olympic mean {'-' if olympic is None else f'{olympic:.3f} s'}"
        )
