"""Level 2: run a recipe: train it, store the run as it trains, check its thresholds.

:func:`run_recipe` is ``d5 run`` in one process, :func:`run_rank` one rank of a
data-parallel run and :func:`launch_ranks` the parent that starts and watches the
ranks. The recipe becomes a trainer in :mod:`d5core.lv2.assembly`; this module
begins the run in the results store (``running``) once the data is loaded and the model
built, streams its samples as they come (:mod:`d5core.lv2.recording`), so a run
killed at any moment reads back ``incomplete`` with what it had measured, and finishes
it. Bad input is refused before anything is stored. Printing is the caller's: each
function hands its finished runs (:class:`TrainedRun`) to a callback.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from d5core.errors import CheckFailed, D5Error, UsageError
from d5core.lv2.assembly import Prepared, prepare
from d5core.trace.capture import traced_block

__all__ = [
    "TrainedRun",
    "WarmUp",
    "begin_run",
    "distributed_config",
    "first_threshold_failure",
    "launch_ranks",
    "metric_values",
    "repeat_summary",
    "run_rank",
    "run_recipe",
    "train_one",
    "warm_up",
]

#: Units of the per-rank metrics rank 0 stores.
_RANK_UNITS = {
    "rank_bytes_sent": "B",
    "rank_bytes_received": "B",
    "rank_comm_time": "s",
    "rank_wall_time": "s",
}


def _finite(value: float | None) -> float | None:
    """``value``, or ``None`` for a missing, NaN or infinite one (strict JSON has none)."""
    return value if value is not None and math.isfinite(value) else None


@dataclass
class TrainedRun:
    """One run that trained to its end and was stored: its thresholds are checked."""

    prep: Prepared
    run_id: str
    #: The trainer's :class:`~d5core.lv2.trainer.TrainResult`.
    result: Any
    #: :func:`metric_values` of the result.
    values: dict[str, float | None]
    #: :func:`~d5core.lv2.recipes.check_thresholds` of the values.
    checks: list[dict[str, Any]]
    #: A data-parallel run's ranks, scheme and per-rank figures (``None``: one process).
    distributed: dict[str, Any] | None = None

    @property
    def passed(self) -> bool:
        """Whether every METRICS threshold holds."""
        return all(c["passed"] for c in self.checks)

    @property
    def metric_results(self) -> dict[str, Any]:
        """The whole result of each metric selected by name (METRICS, ``--metric``): its
        ``unit`` and ``value`` or ``unavailable`` reason, and what else it reports."""
        return {name: self.result.metrics.get(name, {}) for name in self.prep.selected_metrics}

    def to_json(self) -> dict[str, Any]:
        """The run as ``d5 run --json`` shows it; NaN and infinite values are ``None``."""
        row: dict[str, Any] = {
            "run_id": self.run_id,
            "recipe": self.prep.recipe.name,
            "recipe_hash": self.prep.run_hash,
            "seed": self.prep.seed,
            "status": self.result.status,
            "stop_reason": self.result.stop_reason,
            "passed": self.passed,
            "epochs": self.result.epochs,
            "steps": self.result.steps,
            "metrics": {k: _finite(v) for k, v in self.values.items()},
            "checks": [{k: _finite(v) if k == "value" else v for k, v in c.items()}
                       for c in self.checks],
            "metric_results": self.metric_results,
            "time_to_accuracy_parts": dict(getattr(self.result, "time_to_accuracy_parts", {})),
        }  # fmt: skip
        if self.distributed is not None:
            row["distributed"] = self.distributed
        return row


def metric_values(result: Any, selected: Iterable[str] = ()) -> dict[str, float | None]:
    """The scalars a recipe may put thresholds on, from a training result: the run's own
    figures, then the ``value`` of each metric ``selected`` by name (``None`` where it
    has none: an ``unavailable`` result, or a value that is not a finite number)."""
    from d5core.metrics.selection import value_of

    training = result.metrics.get("training_accuracy", {}).get("value")
    final_loss = result.losses[-1] if result.losses else None
    figures: dict[str, float | None] = {
        "final_test_accuracy": result.final_test_accuracy,
        "best_test_accuracy": result.best_test_accuracy,
        "time_to_accuracy": result.time_to_accuracy,
        **_perplexity_figures(result),
        **_loss_figures(result),
        **_target_figures(result),
        "training_accuracy": float(training) if isinstance(training, int | float) else None,
        "final_loss": final_loss,
        "throughput": result.throughput.get("samples_per_s"),
        "wall_time": result.wall_s,
        "steps": float(result.steps),
        "epochs": float(result.epochs),
    }
    return {**figures, **{name: value_of(result.metrics.get(name)) for name in selected}}


def _perplexity_figures(result: Any) -> dict[str, float | None]:
    """A language model's figures (final and best perplexity, time to perplexity), for a
    run whose test passes reported perplexity; none for other runs."""
    curve = getattr(result, "test_curve", [])
    if not any("perplexity" in p for p in curve):
        return {}
    return {
        "final_perplexity": getattr(result, "final_perplexity", None),
        "best_perplexity": getattr(result, "best_perplexity", None),
        "time_to_perplexity": getattr(result, "time_to_perplexity", None),
    }


def _loss_figures(result: Any) -> dict[str, float | None]:
    """The test-loss figures (final and best test loss; time to loss with a target loss),
    for a run with a target loss or with regression targets (whose test passes have no
    accuracy); none for other runs."""
    targets = getattr(result, "targets", {})
    if "loss" not in targets and not getattr(result, "regression", False):
        return {}
    figures = {
        "final_test_loss": getattr(result, "final_test_loss", None),
        "best_test_loss": getattr(result, "best_test_loss", None),
    }
    if "loss" in targets:
        figures["time_to_loss"] = getattr(result, "time_to_loss", None)
    return figures


def _target_figures(result: Any) -> dict[str, float | None]:
    """For a run with a target: its time to target with the test passes left out
    (AlgoPerf's clock; ``None`` when not reached) and the seconds of the test passes
    until then (the whole run's when not reached); none for a run without a target."""
    if not getattr(result, "targets", {}):
        return {}
    return {
        "time_to_target_training": getattr(result, "time_to_target_training", None),
        "eval_time": getattr(result, "eval_time", None),
    }


def _record_selected(store: Any, run_id: str, run: TrainedRun) -> dict[str, Any]:
    """Store the value of each metric selected by name, with its own unit and direction;
    return the config keys that keep their whole results (why one is unavailable, ...)."""
    results = run.metric_results
    for name, metric in run.prep.selected_metrics.items():
        value = run.values.get(name)
        if value is not None:
            unit = str(results[name].get("unit", metric.unit))
            store.add_metric(run_id, name, value, unit=unit, better=metric.better)
    return {"metric_results": results} if results else {}


def _figures(run: TrainedRun) -> dict[str, float | None]:
    """The run's own figures: its values less those of the metrics selected by name."""
    return {k: v for k, v in run.values.items() if k not in run.prep.selected_metrics}


def repeat_summary(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Time to accuracy over repeated runs as MLPerf reports it: every run counts, one
    that never reached the target as infinitely slow; the olympic mean (best and worst
    dropped, from 3 runs on) beside the median and its interval. A figure that falls on
    a run that did not reach the target is ``None`` ("not reached").

    ``rows`` are :meth:`TrainedRun.to_json` of the runs."""
    from d5core.lv2.summaries import range_of, time_to_accuracy_summary

    ttas = [r["metrics"]["time_to_accuracy"] for r in rows]
    tta = time_to_accuracy_summary([t if isinstance(t, int | float) else None for t in ttas])
    summary: dict[str, Any] = {
        "runs": len(rows),
        "reached_target": tta["reached"],
        "time_to_accuracy_olympic_mean": tta["olympic_mean"],
        "time_to_accuracy": {k: _finite(tta[k]) for k in ("median", "ci_low", "ci_high")},
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
    if any("time_to_target_training" in r["metrics"] for r in rows):  # runs with a target
        training = [r["metrics"].get("time_to_target_training") for r in rows]
        ttt = time_to_accuracy_summary(
            [t if isinstance(t, int | float) else None for t in training]
        )
        summary["time_to_target_training_olympic_mean"] = ttt["olympic_mean"]
        summary["time_to_target_training"] = {
            k: _finite(ttt[k]) for k in ("median", "ci_low", "ci_high")
        }
    if any("time_to_loss" in r["metrics"] for r in rows):  # regression, or a target loss
        ttls = [r["metrics"].get("time_to_loss") for r in rows]
        ttl = time_to_accuracy_summary([t if isinstance(t, int | float) else None for t in ttls])
        summary["reached_target_loss"] = ttl["reached"]
        summary["time_to_loss_olympic_mean"] = ttl["olympic_mean"]
        summary["time_to_loss"] = {k: _finite(ttl[k]) for k in ("median", "ci_low", "ci_high")}
        test_losses = [
            float(v)
            for v in (r["metrics"].get("final_test_loss") for r in rows)
            if isinstance(v, int | float)
        ]
        if test_losses:
            summary["final_test_loss"] = {
                k: v for k, v in range_of(test_losses).items() if k in ("median", "min", "max")
            }
    if any("final_perplexity" in r["metrics"] for r in rows):  # language models
        ttps = [r["metrics"].get("time_to_perplexity") for r in rows]
        ttp = time_to_accuracy_summary([t if isinstance(t, int | float) else None for t in ttps])
        summary["reached_target_perplexity"] = ttp["reached"]
        summary["time_to_perplexity_olympic_mean"] = ttp["olympic_mean"]
        summary["time_to_perplexity"] = {
            k: _finite(ttp[k]) for k in ("median", "ci_low", "ci_high")
        }
        ppls = [
            float(p)
            for p in (r["metrics"].get("final_perplexity") for r in rows)
            if isinstance(p, int | float)
        ]
        if ppls:
            summary["final_perplexity"] = {
                k: v for k, v in range_of(ppls).items() if k in ("median", "min", "max")
            }
    return summary


def first_threshold_failure(runs: Sequence[TrainedRun]) -> CheckFailed | None:
    """The error for the first threshold that failed in ``runs`` (``None``: all held)."""
    for run in runs:
        for c in run.checks:
            if not c["passed"]:
                side = "min" if "min" in c else "max"
                op = ">=" if side == "min" else "<="
                shown = "not reached" if c["value"] is None else f"{c['value']:.6g}"
                if c["value"] is None and c["metric"] in run.prep.selected_metrics:
                    why = run.metric_results[c["metric"]].get("unavailable")
                    shown = f"unavailable ({why})" if why else "no value"
                return CheckFailed(
                    f"recipe {run.prep.recipe.name}: {c['metric']} = {shown}, needs {op} "
                    f"{c[side]} (run {run.run_id}, {run.result.status})"
                )
    return None


def begin_run(
    store: Any,
    prep: Prepared,
    extra: dict[str, Any],
    environment: dict[str, Any] | None = None,
    tags: Sequence[str] = (),
) -> str:
    """Begin the ``train`` run of ``prep`` (status ``running``); ``extra`` joins its config.

    The stored hash is ``prep.run_hash``: the recipe after overrides and the data read.
    ``environment`` is captured now unless given; the run carries ``tags`` (``--tag``).
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
        **({"extra_metrics": list(recipe.extra_metrics)} if recipe.extra_metrics else {}),
        **extra,
    }
    env = dict(environment or capture_environment(seeds={"recipe": prep.seed}))
    env["recipe_hash"] = prep.run_hash
    run_id = store.begin_run(
        "train", recipe.name, config=config, environment=env, seed=prep.seed,
        recipe_hash=prep.run_hash, tags=tags,
    )  # fmt: skip
    return str(run_id)


# -- one process ------------------------------------------------------------------------


def _tracer(trace: str | None, process: str, rank: int | None = None) -> Any:
    """The trace recorder of a traced run (``None`` untraced)."""
    if trace is None:
        return None
    from d5core.trace.recorder import TraceRecorder

    return TraceRecorder(trace, process, rank)


def _gather_traces(comm: Any, tracer: Any, prep: Prepared) -> list[dict[str, Any]]:
    """Every rank's trace document, on rank 0 (sent after training, so that none of it
    is counted as the run's traffic); empty elsewhere and untraced."""
    if tracer is None:
        return []
    import json

    import numpy as np

    document = tracer.document(kind="train", subjects=[prep.settings["executor"]],
                               recipe=prep.recipe.name)  # fmt: skip
    data = np.frombuffer(json.dumps(document, separators=(",", ":")).encode(), dtype=np.uint8)
    parts = comm.gather(data, 0)
    return [json.loads(bytes(part)) for part in parts] if parts else []


def _keep_trace(store: Any, run_id: str, tracer: Any, prep: Prepared) -> None:
    if tracer is not None:
        from d5core.trace.capture import store_trace

        store_trace(store, run_id, tracer, kind="train", subjects=[prep.settings["executor"]],
                    recipe=prep.recipe.name)  # fmt: skip


def train_one(
    store: Any,
    recipe: Any,
    seed: int,
    tags: Sequence[str] = (),
    extra: Mapping[str, Any] | None = None,
    trace: str | None = None,
) -> TrainedRun:
    """Prepare, begin, train and finish one run of ``recipe`` (tagged ``tags``; ``extra``
    joins its config), its samples streamed into ``store`` as it goes, and check its
    thresholds. With ``trace`` (a level) the training is traced and the trace kept with
    the run, even when the run fails."""
    from d5core.environment import capture_environment
    from d5core.lv2.assembly import import_before_clock
    from d5core.lv2.recipes import check_thresholds
    from d5core.lv2.recording import RunRecorder

    # the run's framework imported first, so that the environment describes it (its
    # threads, its backends); both before the run's clock starts
    import_before_clock(recipe.settings())
    env = capture_environment(seeds={"recipe": seed})
    prep = Prepared(recipe, seed)
    config = dict(extra or {})
    if trace is not None:
        config["trace"] = trace
    run_id = begin_run(store, prep, config, env, tags)
    recorder = RunRecorder(store, run_id)
    prep.trainer.on_progress = recorder
    tracer = _tracer(trace, "d5 run")
    try:
        with traced_block(tracer, prep.settings["executor"], bus=prep.trainer.bus):
            result = prep.trainer.run()
    except BaseException as exc:
        recorder.abort(prep.trainer.curves, exc)
        _keep_trace(store, run_id, tracer, prep)
        raise
    _keep_trace(store, run_id, tracer, prep)
    values = metric_values(result, prep.selected_metrics)
    run = TrainedRun(prep, run_id, result, values, check_thresholds(prep.recipe, values))
    extra = {"stop_reason": result.stop_reason, "diverged_at": result.diverged_at}
    extra.update(_record_selected(store, run_id, run))
    recorder.finish(result, _figures(run), config=extra)
    return run


@dataclass(frozen=True)
class WarmUp:
    """The unstored run that :func:`run_recipe` trains before measured repeats."""

    seed: int
    #: Wall seconds it took (the one-time costs it paid, and one training).
    seconds: float
    #: Why it failed (``None``: it trained to its end); the repeats run anyway, and the
    #: first one stores the failure where it fails again.
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """What each repeat's config keeps of it, under ``repeat.warm_up``."""
        return {"seed": self.seed, "seconds": self.seconds, "stored": False, "error": self.error}


def warm_up(recipe: Any, seed: int) -> WarmUp:
    """Train ``recipe`` once with ``seed`` and throw the run away: nothing is stored.

    The first run in a process pays its one-time costs (importing the framework, its
    kernels' first compilation and autotuning, caches, the allocator's first growth):
    issue 28 saw torch's first repeat take 19.6 s against 1.9-4.5 s for the others. Run
    before the measured repeats, the warm-up pays them, so that every repeat runs in
    the same, warm process and the repeats are exchangeable. The training is seeded, so
    the warm-up changes no repeat's result. Bad input raises
    :class:`~d5core.errors.UsageError` as the repeats would; an error while training is
    kept, not raised.
    """
    import time

    started = time.perf_counter()
    prep = Prepared(recipe, seed)  # bad input is refused here, before anything is stored
    try:
        prep.trainer.run()
    except Exception as exc:  # the measured repeat stores it, should it fail again
        error = " ".join(str(exc).split()) or type(exc).__name__
        return WarmUp(seed, time.perf_counter() - started, f"{type(exc).__name__}: {error}")
    return WarmUp(seed, time.perf_counter() - started)


def run_recipe(
    recipe_path: str | Path,
    sets: Sequence[str],
    seed: int | None,
    *,
    repeat: int = 1,
    db: str | Path | None = None,
    on_run: Callable[[TrainedRun], None] | None = None,
    metrics: Sequence[str] = (),
    tags: Sequence[str] = (),
    trace: str | None = None,
) -> list[TrainedRun]:
    """Train under the recipe ``repeat`` times in this process, with seeds ``seed``,
    ``seed + 1``, ... (each run keeps a seed the recipe freezes), storing each run.
    ``metrics`` are installed metrics each run also measures, without a threshold
    (``--metric``); every run is tagged ``tags`` (``--tag``) and, with ``trace`` (a
    level), traced.

    With ``repeat`` above 1, one unstored :func:`warm_up` run (the first repeat's seed)
    trains first, so that no repeat carries the process's one-time costs; each repeat
    stores ``repeat`` in its config: its ``index``, the ``count`` and the ``warm_up``
    (:meth:`WarmUp.to_json`). A single run is not warmed up: it is what one ``d5 run``
    costs, and stores no ``repeat``.

    ``on_run`` is called with each run as it finishes. A failed threshold is not an
    error here: see :func:`first_threshold_failure`.

    :raises UsageError: for bad input (the recipe, ``seed``, the database, the data, the
        model), before anything is stored.
    """
    from d5core.lv2.recipes import load_recipe
    from d5core.results.store import ResultsStore

    loaded = load_recipe(recipe_path).with_overrides(list(sets)).with_metrics(metrics)
    first_seed = loaded.run_seed(seed)
    frozen = "seed" in loaded.fixed
    runs: list[TrainedRun] = []
    with ResultsStore.open(db) as store:
        store.require_writable()
        warmed = warm_up(loaded, first_seed) if repeat > 1 else None
        for index in range(repeat):
            extra = {} if warmed is None else {
                "repeat": {"index": index, "count": repeat, "warm_up": warmed.to_json()}
            }  # fmt: skip
            run = train_one(store, loaded, first_seed if frozen else first_seed + index, tags,
                            extra, trace)  # fmt: skip
            runs.append(run)
            if on_run is not None:
                on_run(run)
    return runs


# -- several ranks ----------------------------------------------------------------------


def distributed_config(
    prep: Prepared, size: int, dist_args: Mapping[str, Any], communicator: str
) -> dict[str, Any]:
    """What a data-parallel run stores and shows of its distribution: ranks, the
    ``d5.communication`` entry they use, scheme and batch sizes. ``dist_args``:
    ``scheme``, ``scheme_options`` and ``global_batch``."""
    return {
        "ranks": size,
        "communicator": communicator,
        "scheme": dist_args["scheme"],
        "scheme_options": dist_args["scheme_options"],
        "per_rank_batch_size": prep.batch_size // (size if dist_args["global_batch"] else 1),
        "global_batch_size": prep.batch_size * (1 if dist_args["global_batch"] else size),
    }


def launch_ranks(
    recipe: str | Path,
    sets: Sequence[str],
    seed: int | None,
    ranks: int,
    dist_args: Mapping[str, Any],
    *,
    rank_timeout: float,
    db: str | Path | None,
    rank_argv: Callable[[int, Any], list[str]],
    metrics: Sequence[str] = (),
    tags: Sequence[str] = (),
    communicator: str | None = None,
    trace: str | None = None,
) -> None:
    """Check everything, begin the run (tagged ``tags``; traced at level ``trace`` by
    every rank when given), launch ``ranks`` ranks under the
    launcher of ``communicator`` (see :func:`~d5core.lv3.launch.chosen_communicator`)
    and watch them.

    ``rank_argv(seed, db)`` gives the ``d5`` arguments each rank runs, with the seed the
    recipe resolved and the database: an absolute file path, or a PostgreSQL URL as
    given. The ranks' standard output is passed through. Bad options end with exit 2
    before anything is stored. SIGINT, SIGTERM and SIGHUP stop the launcher and every
    rank, mark the run interrupted and end with
    :class:`~d5core.lv3.launch.RunInterrupted`.
    """
    from d5core.lv3.launch import (
        RankFailed,
        RunInterrupted,
        StopSignals,
        check_rank_options,
        chosen_communicator,
        launch,
        rank_launcher,
    )
    from d5core.results.paths import absolute_db
    from d5core.results.store import ResultsStore

    # bad input fails here, before anything is stored
    prep = prepare(recipe, list(sets), seed, metrics=metrics)
    check_rank_options(prep.settings, len(prep.train_set), ranks, local=prep.trainer.optimizer,
                       communicator=communicator, **dist_args)  # fmt: skip
    db_path = absolute_db(db)
    argv = rank_argv(prep.seed, db_path)
    communicator = str(rank_launcher(chosen_communicator(communicator)).communicator)

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
            extra: dict[str, Any] = {
                "distributed": distributed_config(prep, ranks, dist_args, communicator)
            }
            if trace is not None:
                extra["trace"] = trace
            run_id = begin_run(store, prep, extra, None, tags)
        try:
            outcome = launch(ranks, argv, rank_timeout=rank_timeout, run_id=run_id,
                             on_failure=mark_failed, stop=stop,
                             communicator=communicator)  # fmt: skip
        except BaseException as exc:
            error = " ".join(str(exc).split()) or type(exc).__name__
            mark_failed(run_id, f"the launch failed: {error}")
            raise
        stopped = None
        if outcome.signum is not None:
            what = (
                f"interrupted by {stop.name}; {outcome.launcher} and its {ranks} ranks were stopped"
            )
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


def run_rank(
    ctx: Any,
    recipe: str | Path,
    sets: Sequence[str],
    seed: int | None,
    dist_args: Mapping[str, Any],
    *,
    db: str | Path | None,
    on_run: Callable[[TrainedRun], None],
    metrics: Sequence[str] = (),
    tags: Sequence[str] = (),
    trace: str | None = None,
) -> None:
    """One rank, in place: train this rank's share; rank 0 stores the run (tagged
    ``tags`` when it begins it), calls ``on_run`` with it and raises the first failed
    threshold. With ``trace`` (a level) every rank traces its training and rank 0 keeps
    each rank's trace with the run (``trace.rank<R>.json``; ``d5 trace`` merges them).

    ``ctx`` is the rank's :class:`~d5core.lv3.launch.RankContext`.
    """
    import os

    from d5core.lv2.recipes import check_thresholds
    from d5core.lv2.recording import RunRecorder
    from d5core.lv3.launch import RANK_METRICS, RUN_ID_ENV
    from d5core.results.store import ResultsStore

    ctx.start()
    code, error, run_id = 0, None, None
    try:
        prep = prepare(recipe, list(sets), seed, dist=ctx, metrics=metrics, **dist_args)
        used = ctx.communicator()
        config = distributed_config(
            prep, ctx.size, dist_args, str(getattr(used, "name", "") or ctx.communicator_name)
        )
        if ctx.rank == 0:
            run_id = os.environ.get(RUN_ID_ENV) or None
            if run_id is None:
                with ResultsStore.open(db) as store:
                    extra = {"distributed": config, **({"trace": trace} if trace else {})}
                    run_id = begin_run(store, prep, extra, None, tags)
            ctx.write_run_id(run_id)
        tracer = _tracer(trace, f"rank {ctx.rank}", ctx.rank)
        with traced_block(tracer, prep.settings["executor"], bus=prep.trainer.bus):
            result = prep.trainer.run()
        table = ctx.gather(ctx.rank_values(result))
        traces = _gather_traces(used, tracer, prep)
        if ctx.rank != 0:
            return
        assert run_id is not None
        values = metric_values(result, prep.selected_metrics)
        per_rank = [
            {"rank": r, **{k: _finite(float(v)) for k, v in zip(RANK_METRICS, row, strict=True)}}
            for r, row in enumerate(table)
        ]
        run = TrainedRun(prep, run_id, result, values, check_thresholds(prep.recipe, values),
                         distributed={**config, "per_rank": per_rank})  # fmt: skip
        with ResultsStore.open(db) as store:
            for r, row in enumerate(table):
                for name, value in zip(RANK_METRICS, row, strict=True):
                    if math.isfinite(float(value)):
                        store.add_metric(run_id, name, float(value), labels={"rank": r},
                                         unit=_RANK_UNITS.get(name, ""))  # fmt: skip
            walls = [float(w) for w in table[:, RANK_METRICS.index("rank_wall_time")]]
            samples = float(table[:, RANK_METRICS.index("rank_samples")].sum())
            if max(walls) > 0:
                store.add_metric(run_id, "global_throughput", samples / max(walls),
                                 unit="samples/s")  # fmt: skip
            selected = _record_selected(store, run_id, run)
            RunRecorder(store, run_id).finish(result, _figures(run), config=selected)
            if traces:
                from d5core.trace.capture import keep_document

                for document in traces:
                    keep_document(store, run_id, document)
        on_run(run)
        failure = first_threshold_failure([run])
        if failure is not None:
            raise failure
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
