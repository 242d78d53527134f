"""Recipes: what a training benchmark fixes, what competitors choose, and what must hold.

A recipe has three sections. FIXED describes the problem (model, dataset, epochs, test
cadence, target): nobody may change it. MUTABLE holds each competitor's choices
(executor, optimizer, learning rate, batch size, ...). METRICS maps a metric name to a
threshold ``{"min": x}`` (the value must be at least x) and/or ``{"max": x}``. The name
is one of the run's own figures (:data:`METRIC_NAMES`) or any metric installed in
``d5.metrics``; an installed metric is attached to the run, built with the entry's
``options`` table as keyword arguments (``{"max": 2e9, "options": {"device": "cpu"}}``),
and its result's ``value`` is checked. An entry with ``options`` and no threshold only
measures and stores (:mod:`d5core.metrics.selection`).

Two forms: a TOML file with ``[fixed]``, ``[mutable]`` and ``[metrics]`` tables (no code
runs; preferred), or a Python file defining ``FIXED``, ``MUTABLE`` and ``METRICS`` dicts
(as in Deep500). A Python recipe runs in a child process of its own: its code cannot
change d5 (monkeypatch a class, call ``sys.exit``), only hand back the three sections as
plain data. Every mistake is a one-line :class:`~d5core.errors.UsageError`, raised
before any work starts.
"""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tomllib

from d5core.errors import UsageError
from d5core.levels.training import CHOICE_KEYS, PROBLEM_KEYS, RECIPE_KEYS

__all__ = [
    "CHOICE_KEYS",
    "DEFAULTS",
    "FRACTION_METRICS",
    "LOSSES",
    "METRIC_NAMES",
    "PROBLEM_KEYS",
    "REQUIRED_KEYS",
    "Recipe",
    "check_thresholds",
    "load_recipe",
    "parse_value",
    "run_hash",
    "sections_hash",
    "threshold_bounds",
]

ALLOWED_KEYS = RECIPE_KEYS
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
#: The run's own figures, which every run reports, with what they are. A recipe may put
#: thresholds on these and on every metric installed in ``d5.metrics``; a name in both
#: means the figure.
METRIC_NAMES: dict[str, str] = {
    "final_test_accuracy": "accuracy of the last test pass (fraction)",
    "best_test_accuracy": "best test-pass accuracy (fraction)",
    "time_to_accuracy": "seconds until target_accuracy is first reached",
    "final_perplexity": "validation perplexity of the last test pass (language models)",
    "best_perplexity": "lowest validation perplexity of any test pass (language models)",
    "time_to_perplexity": "seconds until target_perplexity is first reached",
    "final_test_loss": "mean test loss of the last test pass (regression, or a target_loss)",
    "best_test_loss": "lowest mean test loss of any test pass (regression, or a target_loss)",
    "time_to_loss": "seconds until target_loss is first reached",
    "time_to_target_training": "seconds until the run's target is first reached, the test "
    "passes left out (AlgoPerf's clock; runs with a target)",
    "eval_time": "seconds of test passes until the target was reached, or in the whole run "
    "when it was not (runs with a target)",
    "training_accuracy": "last epoch's accuracy on training batches (fraction)",
    "final_loss": "last training loss",
    "throughput": "training samples per second",
    "wall_time": "seconds of the whole run",
    "steps": "optimisation steps run",
    "epochs": "epochs run",
}
_SECTIONS = ("FIXED", "MUTABLE", "METRICS")
#: The values of the ``loss`` key: the loss kinds of a network
#: (:meth:`d5core.onnx.network.Network.add_loss`).
LOSSES = ("cross_entropy", "mse")
#: The FIXED keys that set a target.
_TARGETS = ("target_accuracy", "target_perplexity", "target_loss")


#: Metrics whose values are fractions: their thresholds must lie in [0, 1].
FRACTION_METRICS = ("final_test_accuracy", "best_test_accuracy", "training_accuracy")


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def sections_hash(
    fixed: Mapping[str, Any], mutable: Mapping[str, Any], metrics: Mapping[str, Any]
) -> str:
    """The sha256 of the canonical JSON of the three sections, a MUTABLE ``seed`` left out.

    A seed the recipe leaves to the competitor is recorded with each run instead, so
    that repeated runs with different seeds share the hash; a seed frozen in FIXED is
    part of the problem and of the hash.

    :raises UsageError: when a section holds something other than plain data.
    """
    choices = {k: v for k, v in mutable.items() if k != "seed"}
    try:
        canonical = _canonical({"FIXED": fixed, "MUTABLE": choices, "METRICS": metrics})
    except (TypeError, ValueError) as exc:
        raise UsageError(f"recipe sections must hold plain data only ({exc})") from None
    return hashlib.sha256(canonical.encode()).hexdigest()


def run_hash(recipe_hash: str, data: Mapping[str, str | None]) -> str:
    """The hash stored with a run: its recipe's :func:`sections_hash` (after overrides)
    combined with the content digest of each data split it read (``{"train": sha256,
    "test": sha256}``), so that the same recipe on other data gets another hash."""
    canonical = _canonical({"recipe": recipe_hash, "data": dict(data)})
    return hashlib.sha256(canonical.encode()).hexdigest()


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

    ``hash`` is the :func:`sections_hash` of the sections as they are: after
    :meth:`with_overrides`, of the configuration that runs (the changes are listed in
    ``overrides``, and ``loaded_hash`` keeps the hash of the file as loaded).
    """

    name: str
    path: str
    form: str
    fixed: dict[str, Any]
    mutable: dict[str, Any]
    #: METRICS: each metric's ``min`` and/or ``max``, and the ``options`` of an installed
    #: metric when the recipe gives some.
    metrics: dict[str, dict[str, Any]]
    hash: str
    overrides: dict[str, Any] = field(default_factory=dict)
    #: The hash of the recipe as loaded, before any override.
    loaded_hash: str = ""
    #: Installed metrics attached without a threshold (``d5 run --metric``); they are
    #: observations, not part of the problem, so they leave ``hash`` alone.
    extra_metrics: tuple[str, ...] = ()

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
        mutable = _with_algorithm(self.name, self.fixed, mutable, changes)
        _check_settings(self.name, {**self.fixed, **mutable})
        digest = sections_hash(self.fixed, mutable, self.metrics)
        return replace(self, mutable=mutable, overrides=changes, hash=digest)

    def with_metrics(self, names: Sequence[str]) -> Recipe:
        """A copy that also measures the installed metrics ``names`` (``--metric``),
        without a threshold and with their default options.

        :raises UsageError: for a name that is neither a figure of the run nor an
            installed metric, listing both.
        """
        extra = list(self.extra_metrics)
        installed: list[str] | None = None
        for name in names:
            if name not in METRIC_NAMES:
                installed = _installed() if installed is None else installed
                if name not in installed:
                    raise UsageError(f"--metric: unknown metric {name!r}; {_unknown(installed)}")
            if name not in extra:
                extra.append(name)
        return replace(self, extra_metrics=tuple(extra))

    def selected_metrics(self) -> dict[str, dict[str, Any]]:
        """The installed metrics this run attaches on top of its own figures: those of
        METRICS that are not a figure (:data:`METRIC_NAMES`), then those of
        :meth:`with_metrics`; each with the options to build it with."""
        chosen = {
            name: dict(entry.get("options", {}))
            for name, entry in self.metrics.items()
            if name not in METRIC_NAMES
        }
        for name in self.extra_metrics:
            if name not in METRIC_NAMES:
                chosen.setdefault(name, {})
        return chosen

    def run_seed(self, seed: int | None) -> int:
        """The seed a run uses: ``seed`` (``--seed``) when given, else the recipe's.

        :raises UsageError: when ``seed`` differs from a seed frozen in FIXED.
        """
        own = int(self.settings()["seed"])
        if seed is None or seed == own:
            return own
        if "seed" in self.fixed:
            raise UsageError(
                f"seed is FIXED in recipe {self.name} (seed = {own}); --seed cannot change "
                "it: drop --seed, or use a recipe that leaves the seed MUTABLE"
            )
        return seed


def _with_algorithm(
    name: str, fixed: dict[str, Any], mutable: dict[str, Any], changes: Mapping[str, Any]
) -> dict[str, Any]:
    """MUTABLE with the choices of the recipe's ``algorithm``, if it names one
    (:mod:`d5core.lv2.algorithms.apply`); ``changes`` are the ``--set`` keys so far."""
    from d5core.lv2.algorithms.apply import apply_algorithm

    explicit = {str(key).partition(".")[0] for key in changes}
    return apply_algorithm(name, fixed, mutable, explicit)


def _owned(merged: Mapping[str, Any]) -> tuple[str, ...]:
    """The required keys that the recipe's ``algorithm`` provides (none without one)."""
    from d5core.lv2.algorithms.apply import owned_keys

    return owned_keys(merged)


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
    for key in ("lr", "time_budget", "target_accuracy", "target_perplexity", "target_loss"):
        number(key)
    budget_clock = merged.get("budget_clock")
    if budget_clock is not None and budget_clock not in ("wall", "training"):
        raise UsageError(
            f'recipe {name}: budget_clock must be "wall" (time_budget counts every second) or '
            f'"training" (test passes left out), got {budget_clock!r}'
        )
    goal = merged.get("target_perplexity")
    if goal is not None and goal <= 1:
        raise UsageError(
            f"recipe {name}: target_perplexity must be above 1 (a perfect model scores 1), "
            f"got {goal!r}"
        )
    target = merged.get("target_accuracy")
    if target is not None and target > 1:
        raise UsageError(
            f"recipe {name}: target_accuracy is a fraction of the test set in (0, 1], "
            f"got {target!r}; write 0.9 for 90%"
        )
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
    if merged.get("loss", "cross_entropy") not in LOSSES:
        raise UsageError(
            f"recipe {name}: loss {merged['loss']!r} is not supported; use cross_entropy "
            "(classes) or mse (regression targets)"
        )
    if merged.get("loss") == "mse" and (
        merged.get("target_accuracy") is not None or merged.get("target_perplexity") is not None
    ):
        raise UsageError(
            f"recipe {name}: loss mse trains regression targets, where accuracy and perplexity "
            "mean nothing; set target_loss instead of target_accuracy/target_perplexity"
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
    _check_optimizer_options(name, merged.get("optimizer_options") or {})


#: The ranges of the optimizer options d5's optimizers share (as torch.optim checks
#: them): ``name -> (low, high, high included)``; every option must be finite anyway.
_OPTIMIZER_RANGES: dict[str, tuple[float, float, bool]] = {
    "beta1": (0.0, 1.0, False),
    "beta2": (0.0, 1.0, False),
    "alpha": (0.0, 1.0, False),
    "momentum": (0.0, math.inf, False),
    "dampening": (0.0, 1.0, True),
    "eps": (0.0, math.inf, False),
    "weight_decay": (0.0, math.inf, False),
    "initial_accumulator": (0.0, math.inf, False),
    "lr_decay": (0.0, math.inf, False),
}


def _check_optimizer_options(name: str, options: Mapping[str, Any]) -> None:
    """Refuse an optimizer option that is not finite, or outside its range: such a value
    is a typo, not a setting to benchmark (a beta of 1.5 makes Adam's bias correction
    the root of a negative number)."""
    for key, value in options.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue  # the optimizer says what it takes
        if not math.isfinite(value):
            raise UsageError(
                f"recipe {name}: optimizer_options.{key} must be a finite number, got {value!r}"
            )
        bounds = _OPTIMIZER_RANGES.get(str(key))
        if bounds is None:
            continue
        low, high, closed = bounds
        if value < low or value > high or (value == high and not closed):
            shown = f"[{low:g}, {high:g}{']' if closed else ')'}"
            raise UsageError(
                f"recipe {name}: optimizer_options.{key} must be in {shown}, got {value!r}"
            )


def _installed() -> list[str]:
    from d5core.metrics.selection import installed_metrics

    return installed_metrics()


def _unknown(installed: Sequence[str]) -> str:
    """Why a metric name is refused: the names that can be selected instead."""
    others = [n for n in installed if n not in METRIC_NAMES]
    return (
        f"the run's own figures: {', '.join(METRIC_NAMES)}; other installed metrics "
        f"(d5.metrics): {', '.join(others) or 'none'} ('d5 list-plugins' lists them all)"
    )


def _check_options(name: str, metric: str, options: Any) -> dict[str, Any]:
    """The ``options`` of an installed metric in METRICS, checked by building the metric
    once with them (this imports the metric's module; the run builds its own)."""
    from d5core.metrics.selection import make_metric

    where = f"recipe {name}: metric {metric}"
    if metric in METRIC_NAMES:
        raise UsageError(
            f"{where} is one of the run's own figures and takes no options; drop its options table"
        )
    if not isinstance(options, Mapping):
        raise UsageError(f"{where}: options must be a table of keyword arguments, got {options!r}")
    checked = dict(options)
    make_metric(metric, checked, where)
    return checked


def threshold_bounds(name: str, metric: str, bound: Mapping[str, Any]) -> dict[str, float]:
    """A METRICS entry's ``min``/``max`` as floats (recipe ``name``, metric ``metric``).

    :raises UsageError: naming the threshold that is not a finite number.
    """
    checked: dict[str, float] = {}
    for side, value in bound.items():
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
        ):
            raise UsageError(
                f"recipe {name}: threshold {metric}.{side} must be a finite number, got {value!r}"
            )
        checked[side] = float(value)
    return checked


def _check_metrics(name: str, metrics: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    installed: list[str] | None = None
    for metric, entry in metrics.items():
        if metric not in METRIC_NAMES:
            installed = _installed() if installed is None else installed
            if metric not in installed:
                raise UsageError(
                    f"recipe {name}: unknown metric {metric!r} in METRICS; {_unknown(installed)}"
                )
        if not isinstance(entry, Mapping) or not entry or set(entry) - {"min", "max", "options"}:
            raise UsageError(
                f'recipe {name}: metric {metric} needs a threshold {{"min": x}} and/or '
                f'{{"max": x}} (an installed metric may add {{"options": {{...}}}}), '
                f"got {entry!r}"
            )
        bound = {side: value for side, value in entry.items() if side != "options"}
        checked: dict[str, Any] = threshold_bounds(name, metric, bound)
        if metric in FRACTION_METRICS and any(not 0 <= v <= 1 for v in checked.values()):
            raise UsageError(
                f"recipe {name}: {metric} is a fraction in [0, 1], so a threshold "
                f"{dict(bound)!r} outside it is a mistake; write 0.9 for 90%"
            )
        if "min" in checked and "max" in checked and checked["min"] > checked["max"]:
            raise UsageError(
                f"recipe {name}: metric {metric} has min {checked['min']} "
                f"above max {checked['max']}"
            )
        if "options" in entry:
            checked["options"] = _check_options(name, metric, entry["options"])
        out[metric] = checked
    return out


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    name = path.name
    if not path.is_file():
        raise UsageError(f"recipe {path} does not exist")
    if path.suffix == ".toml":
        try:
            data = tomllib.loads(path.read_bytes().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise UsageError(
                f"recipe {path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
                f"{exc.start}); save it as UTF-8, as TOML requires"
            ) from None
        except tomllib.TOMLDecodeError as exc:
            raise UsageError(
                f"recipe {path} does not parse: {' '.join(str(exc).split())}"
            ) from None
        if data.get("kind", "training") != "training":
            raise UsageError(
                f"recipe {name} has kind = {data['kind']!r}; a training recipe has none (or "
                '"training"); run an inference recipe with d5 run (docs/inference.md)'
            )
        unknown = set(data) - {"fixed", "mutable", "metrics", "name", "kind"}
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
        namespace = _run_python_recipe(path)
        missing = [s for s in _SECTIONS if s not in namespace]
        if missing:
            raise UsageError(
                f"recipe {name} defines no {', '.join(missing)}; a Python recipe "
                "defines FIXED, MUTABLE and METRICS dicts"
            )
        return "python", {s: namespace[s] for s in _SECTIONS}
    raise UsageError(f"recipe {path}: use a .toml or .py file")


#: Runs a Python recipe in a child process and writes what it defined, as JSON, to the
#: file named by argv[2]: {"sections": {...}} or {"problem": "one line"}.
_CHILD = """
import json, runpy, sys
path, out, paths = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
sys.path[:] = paths
def done(doc):
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f)
def line(exc):
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
try:
    ns = runpy.run_path(path)
except SystemExit as exc:
    done({"problem": f"called sys.exit({exc.code!r}) while loading; a recipe only "
          "defines FIXED, MUTABLE and METRICS"})
except SyntaxError as exc:
    done({"problem": f"does not parse: line {exc.lineno}: {exc.msg}"})
except BaseException as exc:
    done({"problem": f"failed to run: {line(exc)}"})
else:
    found = {k: ns[k] for k in ("FIXED", "MUTABLE", "METRICS") if k in ns}
    try:
        done({"sections": json.loads(json.dumps(found))})
    except (TypeError, ValueError) as exc:
        done({"problem": f"sections must hold plain data only ({exc})"})
"""


def _run_python_recipe(path: Path) -> dict[str, Any]:
    """The sections a Python recipe defines, from a child process that runs it.

    The recipe's code never runs in d5's process, so it cannot patch d5 (let an
    override of a FIXED key through, change a hash) or take over its exit code.
    Anything it prints goes to stderr.
    """
    import click

    with tempfile.TemporaryDirectory(prefix="d5-recipe-") as tmp:
        out = Path(tmp) / "sections.json"
        paths = json.dumps([p for p in sys.path if p])
        child = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path), str(out), paths],
            capture_output=True,
            text=True,
            errors="replace",
            check=False,
        )
        for text in (child.stdout, child.stderr):
            if text.strip():
                click.echo(text.rstrip("\n"), err=True)
        doc = json.loads(out.read_text(encoding="utf-8")) if out.is_file() else None
    if doc is None:
        raise UsageError(
            f"recipe {path} ended its process with exit code {child.returncode} while "
            "loading; a recipe only defines FIXED, MUTABLE and METRICS"
        )
    if "problem" in doc:
        raise UsageError(f"recipe {path} {doc['problem']}")
    sections: dict[str, Any] = doc["sections"]
    return sections


def load_recipe(path: str | Path) -> Recipe:
    """Load and check the recipe at ``path`` (``.toml`` or ``.py``).

    The plugins' ``d5_recipe_loaded`` hook sees the checked recipe before it is
    returned.

    :raises UsageError: one line naming the problem: a parse error (with its line), an
        unknown key, a key in both FIXED and MUTABLE, a problem key outside FIXED, a
        missing required key, a bad value or threshold, or a plugin's refusal.
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
    missing = [k for k in REQUIRED_KEYS if k not in merged and k not in _owned(merged)]
    if missing:
        raise UsageError(f"recipe {name}: missing required key(s) {', '.join(missing)}")
    _check_settings(name, merged)
    checked = _check_metrics(name, metrics)
    if "time_to_accuracy" in checked and "target_accuracy" not in fixed:
        raise UsageError(f"recipe {name}: time_to_accuracy needs target_accuracy in FIXED")
    if "time_to_perplexity" in checked and "target_perplexity" not in fixed:
        raise UsageError(f"recipe {name}: time_to_perplexity needs target_perplexity in FIXED")
    if "time_to_loss" in checked and "target_loss" not in fixed:
        raise UsageError(f"recipe {name}: time_to_loss needs target_loss in FIXED")
    if "time_to_target_training" in checked and not any(k in fixed for k in _TARGETS):
        raise UsageError(
            f"recipe {name}: time_to_target_training needs a target in FIXED "
            f"({', '.join(_TARGETS)})"
        )
    try:
        digest = sections_hash(fixed, mutable, checked)
    except UsageError as exc:
        raise UsageError(f"recipe {name}: {exc}") from None
    recipe = Recipe(name, str(path), form, fixed, mutable, checked, digest, loaded_hash=digest)
    _announce(recipe)
    return recipe


def _announce(recipe: Recipe) -> None:
    """Show the plugins the loaded recipe (``d5_recipe_loaded``) as a copy, read-only at
    the top: a plugin may refuse the recipe by raising, never change it."""
    from types import MappingProxyType

    from d5core.plugins import get_plugin_manager

    view = json.loads(
        json.dumps(
            {
                "name": recipe.name,
                "path": recipe.path,
                "form": recipe.form,
                "fixed": recipe.fixed,
                "mutable": recipe.mutable,
                "metrics": recipe.metrics,
                "hash": recipe.hash,
            }
        )
    )
    get_plugin_manager().hook.d5_recipe_loaded(recipe=MappingProxyType(view))


def check_thresholds(recipe: Recipe, values: Mapping[str, float | None]) -> list[dict[str, Any]]:
    """Check every METRICS threshold against ``values``; one dict per threshold.

    A missing value (a target never reached, a metric that could not measure) fails its
    threshold. An entry with options and no threshold checks nothing.
    """
    checks: list[dict[str, Any]] = []
    for metric, bound in recipe.metrics.items():
        value = values.get(metric)
        for side, limit in bound.items():
            if side == "options":
                continue
            ok = (
                value is not None
                and math.isfinite(value)
                and (value >= limit if side == "min" else value <= limit)
            )
            checks.append({"metric": metric, side: limit, "value": value, "passed": bool(ok)})
    return checks
