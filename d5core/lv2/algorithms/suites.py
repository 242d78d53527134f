"""Workload suites: named sets of FIXED recipes, each with a target and a training budget.

A suite is a TOML file (``suites/cpu.toml`` in d5's repository)::

    name = "cpu"
    description = "what the suite is for"

    [[workload]]
    name = "digits-mlp"
    recipe = "../recipes/digits-mlp.toml"   # relative to the suite file
    target = { accuracy = 0.93 }             # or { perplexity = 8.0 } or { loss = 0.05 }
    budget_s = 20                            # training seconds (evaluation excluded)
    [workload.provenance]                    # how the target was set
    method = "..."

The runner (:mod:`.campaign`) trains each workload's recipe with the suite's target and
budget in place of the recipe's own. :func:`load_suite` checks everything before any
training starts, one line per mistake. :func:`toml_document` writes the plain data of a
suite or a recipe back as TOML (the standard library reads TOML but does not write it).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomllib

from d5core.errors import UsageError

__all__ = [
    "SUITE_DIRS",
    "TARGET_KEYS",
    "Suite",
    "Workload",
    "find_suite",
    "load_suite",
    "suite_names",
    "toml_document",
]

#: A suite's target kinds and the FIXED recipe key each one sets.
TARGET_KEYS: dict[str, str] = {
    "accuracy": "target_accuracy",
    "perplexity": "target_perplexity",
    "loss": "target_loss",
}
#: Where a suite named without a path is looked for, in order: ``suites/`` under the
#: current directory, then d5's repository's own.
SUITE_DIRS: tuple[Path, ...] = (
    Path("suites"),
    Path(__file__).resolve().parents[3] / "suites",
)
_SUITE_KEYS = {"name", "description", "workload"}
_WORKLOAD_KEYS = {"name", "recipe", "target", "budget_s", "provenance", "description"}


@dataclass(frozen=True)
class Workload:
    """One workload of a suite: a recipe, the target to reach and the training budget."""

    name: str
    #: The recipe file, absolute.
    recipe: Path
    #: The target's kind (a key of :data:`TARGET_KEYS`) and value.
    target_kind: str
    target_value: float
    #: Training seconds at most (evaluation excluded).
    budget_s: float
    #: The :func:`~d5core.lv2.recipes.sections_hash` of the recipe as loaded.
    recipe_hash: str
    #: The recipe's own executor (what a trial trains on when no executor is chosen).
    executor: str
    #: How the target was set (free-form; ``benchmarks/set_suite_targets.py`` writes it).
    provenance: dict[str, Any] = field(default_factory=dict)
    description: str = ""

    @property
    def target(self) -> dict[str, float]:
        """The target as a trial record holds it: ``{"accuracy": 0.93}``."""
        return {self.target_kind: self.target_value}


@dataclass(frozen=True)
class Suite:
    """A loaded, checked suite."""

    name: str
    path: Path
    description: str
    workloads: tuple[Workload, ...]

    @property
    def hash(self) -> str:
        """The sha256 of what decides a trial's outcome: each workload's name, recipe
        content, target and budget (descriptions and provenance left out)."""
        content = [
            {"name": w.name, "recipe_hash": w.recipe_hash, "target": w.target,
             "budget_s": w.budget_s}
            for w in self.workloads
        ]  # fmt: skip
        text = json.dumps({"suite": self.name, "workloads": content}, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()

    def workload(self, name: str) -> Workload:
        """The workload called ``name``.

        :raises UsageError: naming the suite's workloads.
        """
        for one in self.workloads:
            if one.name == name:
                return one
        names = ", ".join(w.name for w in self.workloads)
        raise UsageError(f"suite {self.name} has no workload {name!r}; it has {names}")


def suite_names() -> list[str]:
    """The names of the suites found in :data:`SUITE_DIRS`, sorted, each once."""
    found: set[str] = set()
    for folder in SUITE_DIRS:
        if folder.is_dir():
            found.update(p.stem for p in folder.glob("*.toml"))
    return sorted(found)


def find_suite(name_or_path: str | Path) -> Path:
    """The file of the suite ``name_or_path``: a path to a ``.toml`` file, or the name
    of a suite in :data:`SUITE_DIRS`.

    :raises UsageError: naming the places looked in and the suites found there.
    """
    text = str(name_or_path).strip()
    if not text:
        raise UsageError("give a suite: a name such as 'cpu' or the path to a suite's .toml file")
    path = Path(text)
    if path.suffix == ".toml" or len(path.parts) > 1:
        if not path.is_file():
            raise UsageError(f"suite file {path} does not exist")
        return path
    for folder in SUITE_DIRS:
        candidate = folder / f"{text}.toml"
        if candidate.is_file():
            return candidate
    known = ", ".join(suite_names()) or "none"
    raise UsageError(
        f"unknown suite {text!r}; known suites: {known} (give a suite's name, or the path "
        "to its .toml file)"
    )


def _positive(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{where}: {key} must be a positive number of seconds, got {value!r}")
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{where}: {key} must be a positive number of seconds, got {value!r}")
    return float(value)


def _target(where: str, value: Any) -> tuple[str, float]:
    kinds = ", ".join(TARGET_KEYS)
    if not isinstance(value, Mapping) or len(value) != 1:
        raise UsageError(
            f"{where}: target must be a table with one of {kinds}, e.g. "
            f"target = {{ accuracy = 0.9 }}; got {value!r}"
        )
    ((kind, number),) = value.items()
    if kind not in TARGET_KEYS:
        raise UsageError(f"{where}: unknown target {kind!r}; use one of {kinds}")
    bad = isinstance(number, bool) or not isinstance(number, int | float)
    if bad or not math.isfinite(number):
        raise UsageError(f"{where}: target {kind} must be a finite number, got {number!r}")
    number = float(number)
    if kind == "accuracy" and not 0 < number <= 1:
        raise UsageError(
            f"{where}: target accuracy is a fraction in (0, 1], got {number!r}; write 0.9 for 90%"
        )
    if kind == "perplexity" and number <= 1:
        raise UsageError(
            f"{where}: target perplexity must be above 1 (a perfect model scores 1), got {number!r}"
        )
    if kind == "loss" and number <= 0:
        raise UsageError(f"{where}: target loss must be above 0, got {number!r}")
    return kind, number


def _workload(suite: str, base: Path, index: int, raw: Any, seen: set[str]) -> Workload:
    from d5core.lv2.recipes import load_recipe

    where = f"suite {suite}: workload {index + 1}"
    if not isinstance(raw, Mapping):
        raise UsageError(f"{where} must be a table ([[workload]]), got {raw!r}")
    name = raw.get("name")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise UsageError(
            f"{where}: name must be a word of letters, digits, '.', '_' or '-', got {name!r}"
        )
    where = f"suite {suite}: workload {name}"
    if name in seen:
        raise UsageError(f"{where} appears twice; give each workload its own name")
    seen.add(name)
    unknown = sorted(set(raw) - _WORKLOAD_KEYS)
    if unknown:
        raise UsageError(
            f"{where}: unknown key(s) {', '.join(unknown)}; a workload has "
            f"{', '.join(sorted(_WORKLOAD_KEYS))}"
        )
    for key in ("recipe", "target", "budget_s"):
        if key not in raw:
            raise UsageError(f"{where}: missing {key}")
    if not isinstance(raw["recipe"], str) or not raw["recipe"].strip():
        raise UsageError(f"{where}: recipe must be a path (relative to the suite file)")
    recipe_path = (base / raw["recipe"]).resolve()
    if not recipe_path.is_file():
        raise UsageError(f"{where}: recipe {raw['recipe']} not found (looked at {recipe_path})")
    kind, value = _target(where, raw["target"])
    budget = _positive(where, "budget_s", raw["budget_s"])
    provenance = raw.get("provenance", {})
    if not isinstance(provenance, Mapping):
        raise UsageError(f"{where}: provenance must be a table, got {provenance!r}")
    description = raw.get("description", "")
    if not isinstance(description, str):
        raise UsageError(f"{where}: description must be text, got {description!r}")
    try:
        recipe = load_recipe(recipe_path)
    except UsageError as exc:
        raise UsageError(f"{where}: {exc}") from None
    return Workload(
        name=name,
        recipe=recipe_path,
        target_kind=kind,
        target_value=value,
        budget_s=budget,
        recipe_hash=recipe.hash,
        executor=str(recipe.settings().get("executor", "")),
        provenance=dict(provenance),
        description=description,
    )


def load_suite(name_or_path: str | Path) -> Suite:
    """Load and check the suite ``name_or_path`` (see :func:`find_suite`).

    Every workload's recipe is loaded and checked too.

    :raises UsageError: one line naming the problem: an unknown suite, a file that does
        not parse, an unknown key, a missing or bad recipe, a bad target, a budget that
        is not a positive number, two workloads of one name, a suite without workloads.
    """
    path = find_suite(name_or_path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"suite {path} is not UTF-8 text; save it as UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"suite {path} does not parse: {' '.join(str(exc).split())}") from None
    name = data.get("name", path.stem)
    if not isinstance(name, str) or not name.strip():
        raise UsageError(f"suite {path}: name must be text, got {name!r}")
    unknown = sorted(set(data) - _SUITE_KEYS)
    if unknown:
        raise UsageError(
            f"suite {name}: unknown key(s) {', '.join(unknown)}; a suite has name, "
            "description and [[workload]] tables"
        )
    description = data.get("description", "")
    if not isinstance(description, str):
        raise UsageError(f"suite {name}: description must be text, got {description!r}")
    raw = data.get("workload", [])
    if not isinstance(raw, list) or not raw:
        raise UsageError(f"suite {name} has no workloads; add [[workload]] tables")
    seen: set[str] = set()
    base = path.resolve().parent
    workloads = tuple(_workload(name, base, i, w, seen) for i, w in enumerate(raw))
    return Suite(name=name, path=path.resolve(), description=description, workloads=workloads)


# -- writing TOML -------------------------------------------------------------------------

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else json.dumps(key)


def _value(value: Any) -> str:
    """One TOML value, inline (tables as inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, Mapping):
        items = ", ".join(f"{_key(str(k))} = {_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"{type(value).__name__} cannot be written as TOML")


def toml_document(data: Mapping[str, Any]) -> str:
    """``data`` as a TOML document: plain values first, then each table as a
    ``[table]`` (its own tables inline), and each list of tables as ``[[name]]`` blocks
    whose nested tables are ``[name.sub]`` sections. Enough for recipes and suites;
    what :mod:`tomllib` reads back is ``data``."""
    lines: list[str] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    arrays: list[tuple[str, list[Mapping[str, Any]]]] = []
    for key, value in data.items():
        if isinstance(value, Mapping):
            tables.append((key, value))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            arrays.append((key, value))
        else:
            lines.append(f"{_key(key)} = {_value(value)}")
    for key, table in tables:
        lines += ["", f"[{_key(key)}]"]
        lines += [f"{_key(str(k))} = {_value(v)}" for k, v in table.items()]
    for key, items in arrays:
        for item in items:
            lines += ["", f"[[{_key(key)}]]"]
            subtables = []
            for k, v in item.items():
                if isinstance(v, Mapping) and len(v) > 3:
                    subtables.append((k, v))
                else:
                    lines.append(f"{_key(str(k))} = {_value(v)}")
            for k, v in subtables:
                lines.append(f"[{_key(key)}.{_key(str(k))}]")
                lines += [f"{_key(str(kk))} = {_value(vv)}" for kk, vv in v.items()]
    return "\n".join(lines).lstrip("\n") + "\n"
