"""Assemble a training run from a recipe: metrics, data, model, executor, optimizer,
sampler, schedule and trainer, before any training or storage.

:func:`prepare` loads a recipe file and builds a :class:`Prepared`; ``d5 run``
(:mod:`d5core.lv2.runner`) trains it and stores the run. Everything that can be
wrong with a recipe or its data is refused here, as a :class:`~d5core.errors.UsageError`,
so nothing is stored for bad input.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from d5core.errors import UsageError

__all__ = [
    "ASSEMBLY_MODULES",
    "OPTIONAL_MODULES",
    "Prepared",
    "import_before_clock",
    "prepare",
    "run_metrics",
]


def run_metrics(recipe: Any) -> tuple[list[Any], dict[str, Any]]:
    """The metrics a run of ``recipe`` attaches, and those it selected by name.

    Every run measures :func:`~d5core.lv2.trainer.default_metrics`. A metric that
    METRICS or ``--metric`` selects (:meth:`~d5core.lv2.recipes.Recipe.selected_metrics`)
    is built with its options and attached too; one that every run measures already is
    reused when it has no options, and replaced by the configured one when it has.

    :return: the metrics to attach, and the selected ones by name.
    :raises UsageError: naming the metric and the option, for options its constructor
        refuses or a metric that does not load.
    """
    from d5core.lv2.trainer import default_metrics
    from d5core.metrics.selection import make_metric

    settings = recipe.settings()
    metrics = default_metrics(
        settings.get("target_accuracy"),
        settings.get("target_perplexity"),
        target_loss=settings.get("target_loss"),
    )
    selected: dict[str, Any] = {}
    for name, options in recipe.selected_metrics().items():
        where = (
            f"recipe {recipe.name}: metric {name}" if name in recipe.metrics else f"--metric {name}"
        )
        index = next((i for i, m in enumerate(metrics) if m.name == name), None)
        if index is not None and not options:
            selected[name] = metrics[index]
            continue
        metric = make_metric(name, options, where)
        if index is None:
            metrics.append(metric)
        else:
            metrics[index] = metric
        selected[name] = metric
    return metrics, selected


#: d5's modules that :meth:`Prepared._assemble` imports where it uses them (so that
#: commands which never train do not load them), imported before the clock by
#: :func:`import_before_clock`: importing ``d5core.lv1.runner`` and
#: ``d5core.lv2.samplers`` inside the clock cost 8-12 ms of every run's time to accuracy
#: (issue 30). ``tests/integration/test_imports_before_clock.py`` fails when a module of
#: d5 is still imported after the clock starts.
ASSEMBLY_MODULES: tuple[str, ...] = (
    "d5core.lv1.runner",
    "d5core.lv2.algorithms.apply",
    "d5core.lv2.datasets",
    "d5core.lv2.recipes",
    "d5core.lv2.samplers",
    "d5core.lv2.trainer",
)
#: The modules of the recipe keys that name optional parts, imported before the clock
#: when the run sets the key.
OPTIONAL_MODULES: dict[str, str] = {
    "schedule": "d5core.lv2.schedules",
    "modifiers": "d5core.lv2.modifiers",
    "transforms": "d5core.lv2.transforms",
}


def import_before_clock(settings: dict[str, Any]) -> None:
    """Import the code a run of ``settings`` needs, before its clock starts.

    A script written by hand imports its framework, its data reader and its model code
    at its top, and starts timing at the first touch of data; d5 does the same
    (``docs/training.md``, "Where time to accuracy starts and ends"): the executor's and
    the optimizer's plugin modules, the dataset reader with what it declares to preload
    (:func:`~d5core.levels.training.preloads`), the model builders and onnx's operator
    schemas (loaded on first use), and d5's own modules that the assembly imports where
    it needs them (:data:`ASSEMBLY_MODULES`, and :data:`OPTIONAL_MODULES` for the parts
    the run sets). A name that does not load is left for the assembly to report, in its
    one-line message.
    """
    import importlib

    from d5core.levels.training import preload_dataset
    from d5core.plugins import get_plugin_manager

    for module in ASSEMBLY_MODULES:
        importlib.import_module(module)
    for key, module in OPTIONAL_MODULES.items():
        if settings.get(key) is not None:
            importlib.import_module(module)
    preload_dataset(str(settings["dataset"]))
    manager = get_plugin_manager()
    for group, key in (("d5.frameworks", "executor"), ("d5.optimizers", "optimizer")):
        try:
            manager.load(group, str(settings[key]))
        except Exception:  # reported where the assembly loads it
            continue
    if not str(settings["model"]).endswith(".onnx"):
        from d5core.lv1 import zoo

        zoo.model_names()  # the zoo's builders, contributed through the d5_model_zoo hook
    import onnx.defs

    onnx.defs.get_schema("Relu")  # onnx loads its operator schemas, read by the checker, once


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
        """With ``dist`` (a :class:`d5core.lv3.launch.RankContext`), the sampler
        is this rank's partition and the optimizer is wrapped by ``scheme``; each rank
        takes ``batch_size`` examples per step (``batch_size / ranks`` with
        ``global_batch``)."""
        from d5core.bus import MetricBus
        from d5core.lv2.trainer import RunClock

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
        metrics, selected = run_metrics(recipe)
        #: The metrics selected by name (METRICS, ``--metric``), attached to the run.
        self.selected_metrics: dict[str, Any] = selected
        from d5core.lv2.datasets._common import check_data_dir

        check_data_dir()  # a bad D5_DATA_DIR is refused even for a dataset without files
        import_before_clock(s)
        # MLPerf's clock starts at the first touch of data: before the datasets load.
        clock = RunClock.start(s.get("target_accuracy"), bus=MetricBus(), metrics=metrics)
        try:
            self._assemble(clock, dist, scheme, scheme_options)
        except BaseException:  # nothing will train: the clock's metrics and freeze end here
            clock.stop()
            raise

    def _assemble(
        self, clock: Any, dist: Any, scheme: str, scheme_options: dict[str, Any] | None
    ) -> None:
        """Load the data, build the model, executor, optimizer, sampler and trainer, with
        ``clock`` running."""
        from d5core.lv1.runner import executor_by_name, load_model, with_loss
        from d5core.lv2.algorithms.apply import trainer_hooks
        from d5core.lv2.datasets import data_manifest, load_dataset
        from d5core.lv2.recipes import run_hash
        from d5core.lv2.samplers import make_sampler
        from d5core.lv2.trainer import StopConditions, Trainer
        from d5core.plugins import get_plugin_manager

        recipe, seed, s = self.recipe, self.seed, self.settings
        self.train_set = load_dataset(s["dataset"], "train", **s["dataset_options"])
        test_options = {**s["dataset_options"], **s["test_dataset_options"]}
        self.test_set = load_dataset(s["dataset"], "test", **test_options)
        if self.batch_size > len(self.train_set):
            raise UsageError(
                f"recipe {recipe.name}: batch_size {self.batch_size} is larger than the "
                f"{len(self.train_set)} examples of {s['dataset']}'s training set; use at "
                f"most {len(self.train_set)}"
            )
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
        trained, loss = with_loss(network, kind=str(s.get("loss", "cross_entropy")))
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
            from d5core.lv3.launch import partitioned_sampler

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
            from d5core.lv2.schedules import make_schedule

            total = s.get("max_steps") or int(s["epochs"]) * steps_per_epoch
            schedule = make_schedule(s["schedule"], total_steps=total)
        if s.get("modifiers") is not None:
            from d5core.lv2.modifiers import make_modifiers

            modifiers = make_modifiers(s["modifiers"])
        if s.get("transforms") is not None:
            from d5core.lv2.transforms import make_transforms

            transforms = make_transforms(s["transforms"])
        stop = StopConditions(
            max_epochs=int(s["epochs"]),
            max_steps=s.get("max_steps"),
            time_budget_s=s.get("time_budget"),
            target_accuracy=s.get("target_accuracy"),
            patience=s.get("patience"),
            target_perplexity=s.get("target_perplexity"),
            target_loss=s.get("target_loss"),
            budget_clock=str(s.get("budget_clock", "wall")),
        )
        self.trainer = Trainer(
            executor, loss, optimizer, self.train_set, sampler,
            test_set=self.test_set, test_every=s["test_every"], schedule=schedule,
            modifiers=modifiers, transforms=transforms, stop=stop, seed=seed,
            eval_batch_size=int(s["eval_batch_size"]), clock=clock,
            agree=dist.agree if dist is not None else None, **trainer_hooks(s, Trainer),
        )  # fmt: skip


def prepare(
    recipe_path: str | Path,
    sets: list[str],
    seed: int | None,
    *,
    metrics: Sequence[str] = (),
    **distributed: Any,
) -> Prepared:
    """Load, check and override the recipe, then build every component (no training).

    ``metrics`` are installed metrics to measure without a threshold (``--metric``);
    ``distributed`` goes to :class:`Prepared` (``dist``, ``scheme``, ...).

    :raises UsageError: for bad input, a ``seed`` other than one the recipe freezes
        included.
    """
    from d5core.lv2.recipes import load_recipe

    recipe = load_recipe(recipe_path).with_overrides(sets).with_metrics(metrics)
    return Prepared(recipe, recipe.run_seed(seed), **distributed)
