"""Inference recipes: a network under an MLPerf LoadGen scenario, run by ``d5 run``.

A TOML recipe with ``kind = "inference"`` at its top describes an inference benchmark
as a training recipe describes a training one. FIXED holds the problem: the model, the
scenario and its load (latency bound, target QPS, samples per query, expected QPS), how
long LoadGen runs; MUTABLE holds the competitor's choices: the executor and its
threads (and the seed, unless FIXED freezes it). METRICS may add thresholds
``{"min": x}`` / ``{"max": x}`` on the run's figures (:data:`INFERENCE_METRICS`)::

    kind = "inference"

    [fixed]
    model = "lenet5"
    scenario = "server"
    latency_bound_ms = 50
    target_qps = 100

    [mutable]
    executor = "numpy"
    threads = 1

The run is stored as ``d5 bench net --scenario`` stores its runs (kind ``inference``),
with the recipe's sections and hash in its config. It fails (exit 1) when LoadGen finds
it INVALID, when a bound d5 checks is missed (the latency bound of single-stream and
multi-stream), or when a METRICS threshold does not hold. Every mistake in the recipe is
a one-line :class:`~d5core.errors.UsageError`, raised before anything runs or is stored.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tomllib

from d5core.errors import CheckFailed, UsageError
from d5core.lv2.recipes import parse_value, threshold_bounds

if TYPE_CHECKING:
    from d5core.loadgen.runner import ExecutorOutcome, ScenarioRequest

__all__ = [
    "INFERENCE_CHOICE_KEYS",
    "INFERENCE_KIND",
    "INFERENCE_METRICS",
    "INFERENCE_PROBLEM_KEYS",
    "InferenceRecipe",
    "InferenceRun",
    "first_failure",
    "is_inference_recipe",
    "load_inference_recipe",
    "run_inference_recipe",
]

#: The value of a recipe's top-level ``kind`` that makes it an inference recipe.
INFERENCE_KIND = "inference"

#: Keys that describe the problem: FIXED only.
INFERENCE_PROBLEM_KEYS: dict[str, str] = {
    "model": "zoo model name or .onnx path",
    "scenario": "single-stream, multi-stream, server or offline",
    "latency_bound_ms": "server: the p99 target latency; single/multi-stream: a bound d5 checks",
    "target_qps": "server: queries per second",
    "samples_per_query": "multi-stream: samples in each query",
    "expected_qps": "offline: samples per second LoadGen sizes its query by",
    "min_duration_s": "seconds of load at least",
    "min_query_count": "queries at least",
    "performance_sample_count": "samples in the query sample library",
    "batch": "the executor's batch (models whose graph fixes none)",
}
#: Keys a competitor chooses: MUTABLE, or FIXED where the recipe freezes them.
INFERENCE_CHOICE_KEYS: dict[str, str] = {
    "executor": "graph executor (numpy, torch, ...)",
    "threads": "BLAS/OpenMP and framework threads of the system under test",
    "seed": "LoadGen's seeds and the seed of the sample inputs (--seed overrides)",
}
_ALLOWED = {**INFERENCE_PROBLEM_KEYS, **INFERENCE_CHOICE_KEYS}
_REQUIRED = ("model", "scenario", "executor")

#: The figures of a run a METRICS threshold may name, with their units.
INFERENCE_METRICS: dict[str, str] = {
    "latency_p50": "s",
    "latency_p90": "s",
    "latency_p95": "s",
    "latency_p97": "s",
    "latency_p99": "s",
    "latency_p99.9": "s",
    "qps": "queries/s, with LoadGen's overhead",
    "qps_without_overhead": "queries/s",
    "metric_value": "the scenario's own metric, in LoadGen's unit",
}


def is_inference_recipe(path: str | Path) -> bool:
    """Whether ``path`` is a TOML recipe whose top-level ``kind`` is ``"inference"``
    (a file that does not parse is left to the recipe loader to report)."""
    path = Path(path)
    if path.suffix != ".toml" or not path.is_file():
        return False
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError):
        return False
    return data.get("kind") == INFERENCE_KIND


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _hash(fixed: Mapping[str, Any], mutable: Mapping[str, Any], metrics: Mapping[str, Any]) -> str:
    """The sha256 of the canonical JSON of the sections (a MUTABLE seed left out, as
    for training recipes) and the kind."""
    choices = {k: v for k, v in mutable.items() if k != "seed"}
    text = _canonical(
        {"kind": INFERENCE_KIND, "FIXED": fixed, "MUTABLE": choices, "METRICS": metrics}
    )
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class InferenceRecipe:
    """A loaded, checked inference recipe (``hash``: after :meth:`with_overrides`)."""

    name: str
    path: str
    fixed: dict[str, Any]
    mutable: dict[str, Any]
    metrics: dict[str, dict[str, float]]
    hash: str
    overrides: dict[str, Any] = field(default_factory=dict)
    loaded_hash: str = ""

    def values(self) -> dict[str, Any]:
        """FIXED, then MUTABLE: every setting the run uses."""
        return {**self.fixed, **self.mutable}

    def settable(self) -> list[str]:
        """Keys ``--set`` may change: the choice keys FIXED does not freeze."""
        return sorted(k for k in INFERENCE_CHOICE_KEYS if k not in self.fixed)

    def with_overrides(self, sets: Sequence[str]) -> InferenceRecipe:
        """A copy with ``key=value`` changes to MUTABLE keys (``--set``).

        :raises UsageError: for a FIXED key, an unknown key or a malformed item.
        """
        mutable = dict(self.mutable)
        changes = dict(self.overrides)
        allowed = ", ".join(self.settable())
        for item in sets:
            key, sep, text = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise UsageError(f"--set wants KEY=VALUE, got {item!r}")
            if key in self.fixed:
                raise UsageError(
                    f"{key} is FIXED in recipe {self.name}; only MUTABLE keys ({allowed}) "
                    "can be set"
                )
            if key not in INFERENCE_CHOICE_KEYS:
                raise UsageError(
                    f"unknown key {key!r} in --set for inference recipe {self.name}; only "
                    f"MUTABLE keys ({allowed}) can be set"
                )
            mutable[key] = changes[key] = parse_value(text.strip())
        _check_values(self.name, {**self.fixed, **mutable})
        return replace(
            self,
            mutable=mutable,
            overrides=changes,
            hash=_hash(self.fixed, mutable, self.metrics),
        )

    def run_seed(self, seed: int | None) -> int:
        """The seed a run uses: ``seed`` (``--seed``) when given, else the recipe's.

        :raises UsageError: when ``seed`` differs from a seed FIXED freezes.
        """
        own = int(self.values().get("seed", 0))
        if seed is None or seed == own:
            return own
        if "seed" in self.fixed:
            raise UsageError(
                f"seed is FIXED in recipe {self.name} (seed = {own}); --seed cannot change it"
            )
        return seed

    def request(self, seed: int) -> ScenarioRequest:
        """The checked request of one run with ``seed`` (model loaded, executor found)."""
        from d5core.loadgen.runner import scenario_request, scenario_settings

        v = self.values()
        settings = scenario_settings(
            str(v["scenario"]),
            target_qps=v.get("target_qps"),
            latency_bound_ms=v.get("latency_bound_ms"),
            samples_per_query=v.get("samples_per_query"),
            expected_qps=v.get("expected_qps"),
            min_duration_s=v.get("min_duration_s"),
            min_query_count=v.get("min_query_count"),
            seed=seed,
            threads=v.get("threads"),
            performance_sample_count=v.get("performance_sample_count"),
        )
        return scenario_request(
            str(v["model"]), [str(v["executor"])], settings, batch=v.get("batch")
        )

    def config(self) -> dict[str, Any]:
        """What the stored run's config records of the recipe."""
        return {
            "recipe": self.path,
            "recipe_kind": INFERENCE_KIND,
            "recipe_hash": self.hash,
            "loaded_recipe_hash": self.loaded_hash,
            "fixed": self.fixed,
            "mutable": self.mutable,
            "metrics": self.metrics,
            "overrides": self.overrides,
        }


def _check_values(name: str, merged: Mapping[str, Any]) -> None:
    """Types the settings checks cannot see (the settings check the values)."""
    for key in ("model", "scenario", "executor"):
        if key in merged and not isinstance(merged[key], str):
            raise UsageError(f"recipe {name}: {key} must be a name (string), got {merged[key]!r}")
    for key in ("samples_per_query", "min_query_count", "performance_sample_count", "batch",
                "threads", "seed"):  # fmt: skip
        value = merged.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise UsageError(f"recipe {name}: {key} must be a whole number, got {value!r}")
    for key in ("latency_bound_ms", "target_qps", "expected_qps", "min_duration_s"):
        value = merged.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise UsageError(f"recipe {name}: {key} must be a number, got {value!r}")


def _check_metrics(name: str, metrics: Mapping[str, Any]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for metric, entry in metrics.items():
        if metric not in INFERENCE_METRICS:
            raise UsageError(
                f"recipe {name}: unknown metric {metric!r} in METRICS; an inference recipe "
                f"puts thresholds on {', '.join(INFERENCE_METRICS)}"
            )
        if not isinstance(entry, Mapping) or not entry or set(entry) - {"min", "max"}:
            raise UsageError(
                f'recipe {name}: metric {metric} needs a threshold {{"min": x}} and/or '
                f'{{"max": x}}, got {entry!r}'
            )
        checked = threshold_bounds(name, metric, entry)
        if checked.get("min", -math.inf) > checked.get("max", math.inf):
            raise UsageError(f"recipe {name}: metric {metric} has min above max")
        out[metric] = checked
    return out


def _table(name: str, data: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise UsageError(f"recipe {name}: [{key}] must be a table, got {type(value).__name__}")
    return dict(value)


def load_inference_recipe(path: str | Path) -> InferenceRecipe:
    """Load and check the inference recipe at ``path`` (TOML, ``kind = "inference"``).

    :raises UsageError: one line: a parse error, an unknown table or key, a key in both
        FIXED and MUTABLE, a problem key outside FIXED, a missing required key, a bad
        value or threshold, a bad scenario setting.
    """
    path = Path(path)
    name = path.stem
    if not path.is_file():
        raise UsageError(f"recipe {path} does not exist")
    try:
        data = tomllib.loads(path.read_bytes().decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"recipe {path} is not UTF-8 text; save it as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"recipe {path} does not parse: {' '.join(str(exc).split())}") from None
    if data.get("kind") != INFERENCE_KIND:
        raise UsageError(f'recipe {name}: an inference recipe has kind = "{INFERENCE_KIND}"')
    unknown = sorted(set(data) - {"kind", "name", "fixed", "mutable", "metrics"})
    if unknown:
        raise UsageError(
            f"recipe {name}: unknown table(s) {', '.join(unknown)}; an inference recipe has "
            "kind, [fixed], [mutable] and [metrics]"
        )
    fixed, mutable = _table(name, data, "fixed"), _table(name, data, "mutable")
    for section, values in (("FIXED", fixed), ("MUTABLE", mutable)):
        bad = sorted(set(values) - set(_ALLOWED))
        if bad:
            raise UsageError(
                f"recipe {name}: unknown key(s) {', '.join(bad)} in {section}; an inference "
                f"recipe allows {', '.join(_ALLOWED)}"
            )
    both = sorted(set(fixed) & set(mutable))
    if both:
        raise UsageError(f"recipe {name}: {', '.join(both)} in both FIXED and MUTABLE")
    misplaced = sorted(set(mutable) & set(INFERENCE_PROBLEM_KEYS))
    if misplaced:
        raise UsageError(
            f"recipe {name}: {', '.join(misplaced)} describe the problem and belong in FIXED"
        )
    missing = [k for k in _REQUIRED if k not in {**fixed, **mutable}]
    if missing:
        raise UsageError(f"recipe {name}: missing required key(s) {', '.join(missing)}")
    _check_values(name, {**fixed, **mutable})
    metrics = _check_metrics(name, _table(name, data, "metrics"))
    digest = _hash(fixed, mutable, metrics)
    return InferenceRecipe(name, str(path), fixed, mutable, metrics, digest, loaded_hash=digest)


@dataclass
class InferenceRun:
    """One stored run of an inference recipe, with its checks."""

    recipe: InferenceRecipe
    run_id: str
    seed: int
    outcome: ExecutorOutcome
    #: One object per METRICS threshold: ``metric``, ``min`` or ``max``, ``value``,
    #: ``passed``.
    checks: list[dict[str, Any]]

    @property
    def failures(self) -> list[str]:
        """Why the run fails, one line each (LoadGen's verdict and d5's bounds first)."""
        from d5core.loadgen.runner import failures

        found = failures([self.outcome])
        for c in self.checks:
            if not c["passed"]:
                side = "min" if "min" in c else "max"
                op = ">=" if side == "min" else "<="
                shown = "no value" if c["value"] is None else f"{c['value']:.6g}"
                found.append(f"{c['metric']} = {shown}, needs {op} {c[side]:g}")
        return found

    @property
    def passed(self) -> bool:
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        """The run as ``d5 run --json`` prints it for an inference recipe."""
        from d5core.loadgen.runner import outcome_row

        return {
            "run_id": self.run_id,
            "recipe": self.recipe.name,
            "recipe_hash": self.recipe.hash,
            "seed": self.seed,
            "passed": self.passed,
            "failures": self.failures,
            "checks": self.checks,
            "result": outcome_row(self.run_id, str(self.recipe.values()["model"]), self.outcome),
        }


def _figures(outcome: ExecutorOutcome) -> dict[str, float | None]:
    r = outcome.result
    values: dict[str, float | None] = {
        f"latency_p{key}": r.percentiles_s.get(key)
        for key in ("50", "90", "95", "97", "99", "99.9")
    }
    values["qps"] = r.qps_with_overhead
    values["qps_without_overhead"] = r.qps_without_overhead
    values["metric_value"] = r.metric_value
    return values


def _checks(recipe: InferenceRecipe, outcome: ExecutorOutcome) -> list[dict[str, Any]]:
    values = _figures(outcome)
    checks = []
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


def run_inference_recipe(
    path: str | Path,
    sets: Sequence[str],
    seed: int | None,
    *,
    repeat: int = 1,
    db: str | Path | None = None,
    tags: Sequence[str] = (),
    progress: Callable[[str], None] | None = None,
    on_run: Callable[[InferenceRun], None] | None = None,
) -> list[InferenceRun]:
    """Run the inference recipe at ``path`` ``repeat`` times (seeds ``seed``,
    ``seed + 1``, ... unless FIXED freezes the seed), each run stored.

    A failed run is not an error here: see :func:`first_failure`.

    :param progress: called with each progress line of the runner (``None``: quiet).
    :param on_run: called with each run once it is stored.
    :raises UsageError: for bad input, before anything runs or is stored.
    """
    from d5core.loadgen.runner import run_request

    recipe = load_inference_recipe(path).with_overrides(list(sets))
    first = recipe.run_seed(seed)
    frozen = "seed" in recipe.fixed
    seeds = [first if frozen else first + i for i in range(repeat)]
    requests = [recipe.request(s) for s in seeds]  # every check before the first run
    runs: list[InferenceRun] = []

    def record_checks(store: Any, run_id: str, outcome: ExecutorOutcome) -> None:
        store.update_config(run_id, {"checks": _checks(recipe, outcome)})

    for one_seed, request in zip(seeds, requests, strict=True):
        run_id, (outcome,) = run_request(
            request, db=db, tags=tags, progress=progress, on_executor=record_checks,
            extra_config=recipe.config(), recipe_hash=recipe.hash,
        )  # fmt: skip
        run = InferenceRun(recipe, run_id, one_seed, outcome, _checks(recipe, outcome))
        runs.append(run)
        if on_run is not None:
            on_run(run)
    return runs


def first_failure(runs: Sequence[InferenceRun]) -> CheckFailed | None:
    """The error for the first run that failed (``None``: every run passed)."""
    for run in runs:
        if run.failures:
            return CheckFailed(
                f"recipe {run.recipe.name}: run {run.run_id}: " + " | ".join(run.failures)
            )
    return None
