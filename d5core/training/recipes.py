"""Recipes: what a training benchmark fixes, what competitors choose, and what must hold.

A recipe has three sections. FIXED describes the problem (model, dataset, epochs, test
cadence, target): nobody may change it. MUTABLE holds each competitor's choices
(executor, optimizer, learning rate, batch size, ...). METRICS maps a metric name to a
threshold ``{"min": x}`` (the value must be at least x) and/or ``{"max": x}``.

Two forms: a TOML file with ``[fixed]``, ``[mutable]`` and ``[metrics]`` tables (no code
runs; preferred), or a Python file defining ``FIXED``, ``MUTABLE`` and ``METRICS`` dicts
(as in Deep500). Every mistake is a one-line :class:`~d5core.errors.UsageError`, raised
before any work starts.
"""

from __future__ import annotations

import hashlib
import json
import math
import runpy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomllib

from d5core.errors import UsageError

__all__ = [
    "CHOICE_KEYS",
    "DEFAULTS",
    "METRIC_NAMES",
    "PROBLEM_KEYS",
    "REQUIRED_KEYS",
    "Recipe",
    "check_thresholds",
    "load_recipe",
    "parse_value",
]

#: Keys that describe the problem: they belong in FIXED and nowhere else.
PROBLEM_KEYS: dict[str, str] = {
    "model": "zoo model name or .onnx path",
    "model_options": "options of the zoo builder (hidden sizes, depth, ...)",
    "dataset": "dataset name (digits, synthetic_images, cifar10, ...)",
    "dataset_options": "options of the dataset (root, samples, shape, ...)",
    "test_dataset_options": "options of the test split, added to dataset_options",
    "sampler": "sampler name (shuffle, sequential, ...)",
    "sampler_options": "options of the sampler",
    "epochs": "epochs at most",
    "max_steps": "optimisation steps at most",
    "time_budget": "wall-clock seconds at most",
    "loss": "the loss function (cross_entropy)",
    "test_every": '"epoch" or a number of steps',
    "target_accuracy": "test accuracy that ends training and stops time-to-accuracy",
    "patience": "test passes without improvement before stopping",
}
#: Keys a competitor chooses: in MUTABLE, or in FIXED where the recipe freezes them.
CHOICE_KEYS: dict[str, str] = {
    "executor": "graph executor (numpy, torch, ...)",
    "optimizer": "optimizer name in d5.optimizers",
    "lr": "learning rate",
    "optimizer_options": "optimizer hyperparameters (momentum, betas, weight_decay, ...)",
    "schedule": "learning-rate schedule spec",
    "batch_size": "training batch size",
    "eval_batch_size": "test batch size",
    "modifiers": "gradient modifiers spec (clipping, weight decay)",
    "transforms": "training-batch transforms spec",
    "seed": "the one seed every randomness derives from (--seed overrides)",
}
ALLOWED_KEYS = {**PROBLEM_KEYS, **CHOICE_KEYS}
REQUIRED_KEYS = ("model", "dataset", "epochs", "executor", "optimizer", "lr", "batch_size")
DEFAULTS: dict[str, Any] = {
    "model_options": {},
    "dataset_options": {},
    "test_dataset_options": {},
    "sampler": "shuffle",
    "sampler_options": {},
    "loss": "cross_entropy",
    "test_every": "epoch",
    "optimizer_options": {},
    "eval_batch_size": 256,
    "seed": 0,
}
#: Metrics a recipe may put thresholds on, with what they are.
METRIC_NAMES: dict[str, str] = {
    "final_test_accuracy": "accuracy of the last test pass (fraction)",
    "best_test_accuracy": "best test-pass accuracy (fraction)",
    "time_to_accuracy": "seconds until target_accuracy is first reached",
    "training_accuracy": "last epoch's accuracy on training batches (fraction)",
    "final_loss": "last training loss",
    "throughput": "training samples per second",
    "wall_time": "seconds of the whole run",
    "steps": "optimisation steps run",
    "epochs": "epochs run",
}
_SECTIONS = ("FIXED", "MUTABLE", "METRICS")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def parse_value(text: str) -> Any:
    """A ``--set`` value as a TOML scalar or array, else JSON, else the plain string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        pass
    try:
        return json.loads(text)
    except ValueError:
        return text


@dataclass(frozen=True)
class Recipe:
    """A loaded, checked recipe.

    ``hash`` is the sha256 of the canonical JSON of the three sections as loaded;
    :meth:`with_overrides` keeps it and lists the changes in ``overrides``.
    """

    name: str
    path: str
    form: str
    fixed: dict[str, Any]
    mutable: dict[str, Any]
    metrics: dict[str, dict[str, float]]
    hash: str
    overrides: dict[str, Any] = field(default_factory=dict)

    def settings(self) -> dict[str, Any]:
        """Defaults, then FIXED, then MUTABLE: every setting the run uses."""
        merged = {k: (dict(v) if isinstance(v, dict) else v) for k, v in DEFAULTS.items()}
        merged.update(self.fixed)
        merged.update(self.mutable)
        return merged

    def settable(self) -> list[str]:
        """Keys ``--set`` may change: the choice keys that FIXED does not freeze."""
        return sorted(k for k in CHOICE_KEYS if k not in self.fixed)

    def with_overrides(self, sets: Sequence[str]) -> Recipe:
        """A copy with ``key=value`` (or ``key.option=value``) changes to MUTABLE keys.

        :raises UsageError: for a FIXED key, an unknown key, or a malformed item.
        """
        mutable = json.loads(json.dumps(self.mutable))
        changes: dict[str, Any] = dict(self.overrides)
        allowed = ", ".join(self.settable())
        for item in sets:
            key, sep, text = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise UsageError(f"--set wants KEY=VALUE, got {item!r}")
            top, _, sub = key.partition(".")
            if top in self.fixed:
                raise UsageError(
                    f"{top} is FIXED in recipe {self.name}; only MUTABLE keys ({allowed}) "
                    "can be set"
                )
            if top not in CHOICE_KEYS:
                raise UsageError(
                    f"unknown key {top!r} in --set for recipe {self.name}; only MUTABLE keys "
                    f"({allowed}) can be set"
                )
            value = parse_value(text.strip())
            if sub:
                current = mutable.get(top, DEFAULTS.get(top, {}))
                if not isinstance(current, dict):
                    raise UsageError(f"{top} is not a table, so {key} cannot be set")
                current = dict(current)
                current[sub] = value
                mutable[top] = current
            else:
                mutable[top] = value
            changes[key] = value
        _check_settings(self.name, {**self.fixed, **mutable})
        return replace(self, mutable=mutable, overrides=changes)


def _check_section(name: str, section: str, value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(
            f"recipe {name}: {section} must be a table/dict, got {type(value).__name__}"
        )
    return dict(value)


def _check_settings(name: str, merged: Mapping[str, Any]) -> None:
    def number(key: str, *, integer: bool = False, positive: bool = True) -> None:
        value = merged.get(key)
        if value is None:
            return
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if ok and integer:
            ok = isinstance(value, int)
        if ok and positive:
            ok = value > 0 and math.isfinite(value)
        if not ok:
            kind = "a positive integer" if integer else "a positive number"
            raise UsageError(f"recipe {name}: {key} must be {kind}, got {value!r}")

    for key in ("epochs", "max_steps", "batch_size", "eval_batch_size", "patience"):
        number(key, integer=True)
    for key in ("lr", "time_budget", "target_accuracy"):
        number(key)
    seed = merged.get("seed")
    if seed is not None and (not isinstance(seed, int) or isinstance(seed, bool) or seed < 0):
        raise UsageError(f"recipe {name}: seed must be a non-negative integer, got {seed!r}")
    every = merged.get("test_every")
    if (
        every is not None
        and every != "epoch"
        and not (isinstance(every, int) and not isinstance(every, bool) and every > 0)
    ):
        raise UsageError(
            f'recipe {name}: test_every must be "epoch" or a step count, got {every!r}'
        )
    if merged.get("loss", "cross_entropy") != "cross_entropy":
        raise UsageError(
            f"recipe {name}: loss {merged['loss']!r} is not supported; use cross_entropy"
        )
    for key in ("model", "dataset", "executor", "optimizer", "sampler"):
        if key in merged and not isinstance(merged[key], str):
            raise UsageError(f"recipe {name}: {key} must be a name (string), got {merged[key]!r}")
    for key in (
        "model_options",
        "dataset_options",
        "test_dataset_options",
        "sampler_options",
        "optimizer_options",
    ):
        if key in merged and not isinstance(merged[key], Mapping):
            raise UsageError(f"recipe {name}: {key} must be a table/dict, got {merged[key]!r}")


def _check_metrics(name: str, metrics: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for metric, bound in metrics.items():
        if metric not in METRIC_NAMES:
            raise UsageError(
                f"recipe {name}: unknown metric {metric!r} in METRICS; known: "
                f"{', '.join(METRIC_NAMES)}"
            )
        if not isinstance(bound, Mapping) or not bound or set(bound) - {"min", "max"}:
            raise UsageError(
                f'recipe {name}: metric {metric} needs a threshold {{"min": x}} and/or '
                f'{{"max": x}}, got {bound!r}'
            )
        checked: dict[str, float] = {}
        for side, value in bound.items():
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
            ):
                raise UsageError(
                    f"recipe {name}: threshold {metric}.{side} must be a finite number, "
                    f"got {value!r}"
                )
            checked[side] = float(value)
        if "min" in checked and "max" in checked and checked["min"] > checked["max"]:
            raise UsageError(
                f"recipe {name}: metric {metric} has min {checked['min']} "
                f"above max {checked['max']}"
            )
        out[metric] = checked
    return out


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    name = path.name
    if not path.is_file():
        raise UsageError(f"recipe {path} does not exist")
    if path.suffix == ".toml":
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(
                f"recipe {path} does not parse: {' '.join(str(exc).split())}"
            ) from None
        unknown = set(data) - {"fixed", "mutable", "metrics", "name"}
        if unknown:
            raise UsageError(
                f"recipe {name}: unknown table(s) {', '.join(sorted(unknown))}; a TOML recipe "
                "has [fixed], [mutable] and [metrics]"
            )
        return "toml", {
            "FIXED": data.get("fixed"),
            "MUTABLE": data.get("mutable"),
            "METRICS": data.get("metrics"),
        }
    if path.suffix == ".py":
        try:
            namespace = runpy.run_path(str(path))
        except SyntaxError as exc:
            raise UsageError(
                f"recipe {path} does not parse: line {exc.lineno}: {exc.msg}"
            ) from None
        except Exception as exc:  # a recipe's own code failing is bad input
            raise UsageError(f"recipe {path} failed to run: {type(exc).__name__}: {exc}") from None
        missing = [s for s in _SECTIONS if s not in namespace]
        if missing:
            raise UsageError(
                f"recipe {name} defines no {', '.join(missing)}; a Python recipe "
                "defines FIXED, MUTABLE and METRICS dicts"
            )
        return "python", {s: namespace[s] for s in _SECTIONS}
    raise UsageError(f"recipe {path}: use a .toml or .py file")


def load_recipe(path: str | Path) -> Recipe:
    """Load and check the recipe at ``path`` (``.toml`` or ``.py``).

    :raises UsageError: one line naming the problem: a parse error (with its line), an
        unknown key, a key in both FIXED and MUTABLE, a problem key outside FIXED, a
        missing required key, a bad value or threshold.
    """
    path = Path(path)
    form, raw = _read(path)
    name = path.stem
    fixed = _check_section(name, "FIXED", raw["FIXED"])
    mutable = _check_section(name, "MUTABLE", raw["MUTABLE"])
    metrics = _check_section(name, "METRICS", raw["METRICS"])
    allowed = ", ".join(ALLOWED_KEYS)
    for section, values in (("FIXED", fixed), ("MUTABLE", mutable)):
        unknown = sorted(set(values) - set(ALLOWED_KEYS))
        if unknown:
            raise UsageError(
                f"recipe {name}: unknown key(s) {', '.join(unknown)} in {section}; "
                f"allowed: {allowed}"
            )
    both = sorted(set(fixed) & set(mutable))
    if both:
        raise UsageError(
            f"recipe {name}: {', '.join(both)} in both FIXED and MUTABLE; keep each in one"
        )
    misplaced = sorted(set(mutable) & set(PROBLEM_KEYS))
    if misplaced:
        raise UsageError(
            f"recipe {name}: {', '.join(misplaced)} describe the problem and belong in FIXED, "
            "not MUTABLE"
        )
    merged = {**fixed, **mutable}
    missing = [k for k in REQUIRED_KEYS if k not in merged]
    if missing:
        raise UsageError(f"recipe {name}: missing required key(s) {', '.join(missing)}")
    _check_settings(name, merged)
    checked = _check_metrics(name, metrics)
    if "time_to_accuracy" in checked and "target_accuracy" not in fixed:
        raise UsageError(f"recipe {name}: time_to_accuracy needs target_accuracy in FIXED")
    try:
        canonical = _canonical({"FIXED": fixed, "MUTABLE": mutable, "METRICS": metrics})
    except (TypeError, ValueError) as exc:
        raise UsageError(f"recipe {name}: sections must hold plain data only ({exc})") from None
    digest = hashlib.sha256(canonical.encode()).hexdigest()
    return Recipe(name, str(path), form, fixed, mutable, checked, digest)


def check_thresholds(recipe: Recipe, values: Mapping[str, float | None]) -> list[dict[str, Any]]:
    """Check every METRICS threshold against ``values``; one dict per threshold.

    A missing value (a target never reached) fails its threshold.
    """
    checks: list[dict[str, Any]] = []
    for metric, bound in recipe.metrics.items():
        value = values.get(metric)
        for side, limit in bound.items():
            ok = (
                value is not None
                and math.isfinite(value)
                and (value >= limit if side == "min" else value <= limit)
            )
            checks.append({"metric": metric, side: limit, "value": value, "passed": bool(ok)})
    return checks
