"""``d5 run RECIPE``: train under a recipe, store the run, check the recipe's thresholds.

Exit codes: 0 when every METRICS threshold holds, 1 naming the first that does not
(a diverged run fails its thresholds like any other), 2 for bad input, which is always
rejected before training starts and before anything is stored.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import click

from d5core.cli.options import db_option, json_option
from d5core.cli.output import print_json
from d5core.errors import CheckFailed, UsageError

__all__ = ["Prepared", "metric_values", "prepare", "repeat_summary", "run"]


class Prepared:
    """Everything a run needs, built from a recipe before any training or storage."""

    def __init__(self, recipe: Any, seed: int) -> None:
        from d5core.plugins import get_plugin_manager
        from d5core.runners.networks import executor_by_name, load_model, with_loss
        from d5core.training.datasets import load_dataset
        from d5core.training.samplers import make_sampler
        from d5core.training.trainer import StopConditions, Trainer

        s = recipe.settings()
        self.recipe, self.seed, self.settings = recipe, seed, s
        self.train_set = load_dataset(s["dataset"], "train", **s["dataset_options"])
        test_options = {**s["dataset_options"], **s["test_dataset_options"]}
        self.test_set = load_dataset(s["dataset"], "test", **test_options)
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
        sampler = make_sampler(
            s["sampler"],
            len(self.train_set),
            int(s["batch_size"]),
            seed=seed,
            **s["sampler_options"],
        )
        steps_per_epoch = math.ceil(len(self.train_set) / int(s["batch_size"]))
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
            eval_batch_size=int(s["eval_batch_size"]),
        )  # fmt: skip


def prepare(recipe_path: str | Path, sets: list[str], seed: int | None) -> Prepared:
    """Load, check and override the recipe, then build every component (no training)."""
    from d5core.training.recipes import load_recipe

    recipe = load_recipe(recipe_path).with_overrides(sets)
    return Prepared(recipe, recipe.settings()["seed"] if seed is None else seed)


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


def _store(db: Path | None, prep: Prepared, result: Any, values: dict[str, float | None]) -> str:
    from d5core.environment import capture_environment
    from d5core.results.store import ResultsStore

    recipe = prep.recipe
    config = {
        "recipe": recipe.path,
        "recipe_form": recipe.form,
        "fixed": recipe.fixed,
        "mutable": recipe.mutable,
        "metrics": recipe.metrics,
        "overrides": recipe.overrides,
        "settings": prep.settings,
        "stop_reason": result.stop_reason,
        "diverged_at": result.diverged_at,
    }
    env = capture_environment(seeds={"recipe": prep.seed})
    with ResultsStore.open(db) as store:
        run_id = store.begin_run(
            "train", recipe.name, config=config, environment=env, seed=prep.seed,
            recipe_hash=recipe.hash,
        )  # fmt: skip
        units = {"time_to_accuracy": "s", "throughput": "samples/s", "wall_time": "s"}
        for name, value in values.items():
            if value is not None and math.isfinite(value):
                store.add_metric(run_id, name, value, unit=units.get(name, ""))
        losses = [v if math.isfinite(v) else math.nan for v in result.losses]
        finite = [v for v in losses if math.isfinite(v)]
        if finite:
            store.add_measurement(run_id, "loss", finite, unit="loss")
        if result.step_times_s:
            store.add_measurement(run_id, "step_time", result.step_times_s, unit="s")
        rates = [r for r in result.throughput_samples_s if math.isfinite(r)]
        if rates:
            store.add_measurement(run_id, "throughput", rates, unit="samples/s")
        accs = [float(t["accuracy"]) for t in result.test_curve]
        if accs:
            store.add_measurement(run_id, "test_accuracy", accs, unit="fraction")
        error = None
        if result.status == "diverged":
            error = f"loss became {result.losses[-1]} at step {result.diverged_at['step']}"
        store.finish_run(run_id, result.status, error)
    return run_id


def _run_json(prep: Prepared, run_id: str, result: Any, values: dict[str, float | None],
              checks: list[dict[str, Any]]) -> dict[str, Any]:  # fmt: skip
    return {
        "run_id": run_id,
        "recipe": prep.recipe.name,
        "recipe_hash": prep.recipe.hash,
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
    """Time to accuracy over repeated runs as MLPerf reports it: the olympic mean (best
    and worst dropped, from 3 runs on) beside the median and its interval; a run that
    never reached the target counts as infinitely slow."""
    from d5core.measure.stats import summarize

    ttas = [r["metrics"]["time_to_accuracy"] for r in rows]
    reached = sorted(float(t) for t in ttas if isinstance(t, int | float))
    ordered = reached + [math.inf] * (len(ttas) - len(reached))
    kept = ordered[1:-1] if len(ordered) >= 3 else ordered
    olympic = sum(kept) / len(kept) if kept and all(math.isfinite(t) for t in kept) else None
    summary: dict[str, Any] = {
        "runs": len(rows),
        "reached_target": len(reached),
        "time_to_accuracy_olympic_mean": olympic,
    }
    if len(reached) == len(ttas) and reached:
        s = summarize(reached)
        summary["time_to_accuracy"] = {"median": s.median, "ci_low": s.ci_low, "ci_high": s.ci_high}
    accs = [float(r["metrics"]["final_test_accuracy"]) for r in rows
            if isinstance(r["metrics"]["final_test_accuracy"], int | float)]  # fmt: skip
    if accs:
        summary["final_test_accuracy"] = {"median": float(sorted(accs)[len(accs) // 2]),
                                          "min": min(accs), "max": max(accs)}  # fmt: skip
    return summary


@click.command("run")
@click.argument("recipe", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Change a MUTABLE key.")
@click.option("--seed", type=click.IntRange(min=0), default=None, help="Override the seed.")
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Run N times with seeds SEED, SEED+1, ...; each run is stored.",
)
@json_option
@db_option
def run(
    recipe: Path,
    sets: tuple[str, ...],
    seed: int | None,
    repeat: int,
    as_json: bool,
    db: Path | None,
) -> None:
    """Train under RECIPE (.toml or .py), store the run and check its METRICS thresholds.

    Exits 0 when every threshold holds (in every run), 1 when one fails, 2 for bad input.
    """
    from d5core.training.recipes import check_thresholds

    first = prepare(recipe, list(sets), seed)
    rows: list[dict[str, Any]] = []
    failures: list[tuple[str, dict[str, Any], Any]] = []
    for index in range(repeat):
        prep = first if index == 0 else prepare(recipe, list(sets), first.seed + index)
        result = prep.trainer.run()
        values = metric_values(result)
        run_id = _store(db, prep, result, values)
        checks = check_thresholds(prep.recipe, values)
        rows.append(_run_json(prep, run_id, result, values, checks))
        failures += [(run_id, c, result) for c in checks if not c["passed"]]
        if not as_json:
            _echo_run(run_id, result, values, checks)
    if as_json:
        if repeat == 1:
            print_json(rows[0])
        else:
            print_json({"passed": not failures, "runs": rows, "summary": repeat_summary(rows)})
    elif repeat > 1:
        summary = repeat_summary(rows)
        olympic = summary["time_to_accuracy_olympic_mean"]
        click.echo(
            f"{repeat} runs, {summary['reached_target']} reached the target; time to accuracy "
            f"olympic mean {'-' if olympic is None else f'{olympic:.3f} s'}"
        )
    if failures:
        run_id, c, result = failures[0]
        side = "min" if "min" in c else "max"
        op = ">=" if side == "min" else "<="
        shown = "not reached" if c["value"] is None else f"{c['value']:.6g}"
        raise CheckFailed(
            f"recipe {first.recipe.name}: {c['metric']} = {shown}, needs {op} {c[side]} "
            f"(run {run_id}, {result.status})"
        )
