"""Search spaces: the hyperparameters of a training algorithm and where they may lie.

A search space is a TOML table (an algorithm's ``search_space``, the ``[search_space]``
table of a file, or a whole file) mapping each hyperparameter to a distribution::

    lr = { distribution = "log_uniform", min = 1e-4, max = 1e-1 }
    momentum = { distribution = "uniform", min = 0.8, max = 0.99 }
    warmup = { distribution = "choice", values = [0, 100] }
    layers = { distribution = "int_uniform", min = 1, max = 4 }
    beta2 = 0.999          # a plain value: fixed

:func:`parse_space` checks one (every mistake is a one-line
:class:`~d5core.errors.UsageError` naming the key), :func:`sample` draws a point for
external tuning, :func:`defaults` gives the point self-tuning uses, and
:func:`complete_point` checks a given point against the space and fills in the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import tomllib

from d5core.errors import UsageError

__all__ = [
    "DISTRIBUTIONS",
    "complete_point",
    "defaults",
    "load_space",
    "parse_space",
    "sample",
]

#: Each distribution and the fields its table takes besides ``distribution``.
DISTRIBUTIONS: dict[str, tuple[str, ...]] = {
    "uniform": ("min", "max"),
    "log_uniform": ("min", "max"),
    "int_uniform": ("min", "max"),
    "choice": ("values",),
}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_range(where: str, key: str, kind: str, spec: Mapping[str, Any]) -> None:
    low, high = spec["min"], spec["max"]
    integer = kind == "int_uniform"
    for side, value in (("min", low), ("max", high)):
        ok = isinstance(value, int) if integer else _is_number(value)
        if not ok or isinstance(value, bool) or not math.isfinite(value):
            need = "an integer" if integer else "a finite number"
            raise UsageError(f"{where}: {key}.{side} must be {need}, got {value!r}")
    if low >= high:
        raise UsageError(
            f"{where}: {key} has min {low!r} >= max {high!r}; make min smaller than max "
            "(a single value is written plainly: key = value)"
        )
    if kind == "log_uniform" and low <= 0:
        raise UsageError(
            f"{where}: {key} is log_uniform with min {low!r}; its bounds must be above 0 "
            "(use uniform for a range that includes 0)"
        )


def _check_entry(where: str, key: str, spec: Any) -> None:
    if not isinstance(spec, Mapping):
        if isinstance(spec, list) and not spec:
            raise UsageError(f"{where}: {key} is an empty list; give a value or a distribution")
        return  # a plain value: fixed
    kind = spec.get("distribution")
    if kind is None:
        raise UsageError(
            f"{where}: {key} is a table without 'distribution'; write "
            f'{{ distribution = "uniform", min = ..., max = ... }} or a plain value'
        )
    if kind not in DISTRIBUTIONS:
        raise UsageError(
            f"{where}: {key} has unknown distribution {kind!r}; use one of "
            f"{', '.join(DISTRIBUTIONS)}"
        )
    fields = DISTRIBUTIONS[kind]
    extra = sorted(set(spec) - {"distribution", *fields})
    missing = [f for f in fields if f not in spec]
    if missing or extra:
        what = f"needs {missing[0]!r}" if missing else f"has no field {extra[0]!r}"
        raise UsageError(f"{where}: {key} ({kind}) {what}; its fields: {', '.join(fields)}")
    if kind == "choice":
        values = spec["values"]
        if not isinstance(values, list) or not values:
            raise UsageError(f"{where}: {key}.values must be a non-empty list, got {values!r}")
    else:
        _check_range(where, key, str(kind), spec)


def parse_space(space: Any, where: str = "search space") -> dict[str, Any]:
    """``space`` checked, as a plain dict (hyperparameter -> distribution or value).

    :raises UsageError: for a space that is not a table or is empty, an unknown
        distribution, a missing or unknown field, ``min >= max``, a log_uniform bound at
        or below 0, non-integer int_uniform bounds, or an empty choice.
    """
    if not isinstance(space, Mapping):
        raise UsageError(f"{where} must be a table of hyperparameters, got {space!r}")
    if not space:
        raise UsageError(
            f"{where} is empty; give at least one hyperparameter, e.g. "
            'lr = { distribution = "log_uniform", min = 1e-4, max = 1e-1 }'
        )
    for key, spec in space.items():
        _check_entry(where, str(key), spec)
    return {str(k): (dict(v) if isinstance(v, Mapping) else v) for k, v in space.items()}


def load_space(path: str | Path) -> dict[str, Any]:
    """The search space of the TOML file ``path``: its ``[search_space]`` table when it
    has one, else the whole file, checked by :func:`parse_space`."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"search space {path}: cannot read it ({exc.strerror})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        problem = " ".join(str(exc).split())
        raise UsageError(f"search space {path} does not parse: {problem}") from None
    table = data.get("search_space", data)
    return parse_space(table, where=f"search space {path}")


def _plain(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (points are stored as JSON)."""
    return value.item() if isinstance(value, np.generic) else value


def sample(space: Mapping[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """One point of ``space`` drawn with ``rng``, in the space's key order (the same
    ``rng`` state gives the same point); fixed values are taken as they are."""
    point: dict[str, Any] = {}
    for key, spec in parse_space(space).items():
        if not isinstance(spec, dict):
            point[key] = spec
            continue
        kind = spec["distribution"]
        if kind == "choice":
            point[key] = spec["values"][int(rng.integers(len(spec["values"])))]
        elif kind == "int_uniform":
            point[key] = int(rng.integers(spec["min"], spec["max"] + 1))
        elif kind == "log_uniform":
            low, high = math.log(spec["min"]), math.log(spec["max"])
            drawn = float(math.exp(rng.uniform(low, high)))  # kept inside despite rounding
            point[key] = float(min(max(drawn, spec["min"]), spec["max"]))
        else:
            point[key] = float(rng.uniform(spec["min"], spec["max"]))
        point[key] = _plain(point[key])
    return point


def _rounded(value: float) -> float:
    """``value`` to 12 significant digits: a middle stored as 0.9, not 0.8999999999999999."""
    return float(f"{value:.12g}")


def defaults(space: Mapping[str, Any]) -> dict[str, Any]:
    """The point self-tuning uses: the geometric middle of a log_uniform range, the
    middle of a uniform one (rounded down for int_uniform), the first choice, and each
    fixed value; a middle is kept to 12 significant digits."""
    point: dict[str, Any] = {}
    for key, spec in parse_space(space).items():
        if not isinstance(spec, dict):
            point[key] = spec
        elif spec["distribution"] == "choice":
            point[key] = spec["values"][0]
        elif spec["distribution"] == "int_uniform":
            point[key] = (spec["min"] + spec["max"]) // 2
        elif spec["distribution"] == "log_uniform":
            point[key] = _rounded(math.sqrt(spec["min"] * spec["max"]))
        else:
            point[key] = _rounded((spec["min"] + spec["max"]) / 2)
    return point


def _outside(spec: Any, value: Any) -> str | None:
    """Why ``value`` is not a point of the entry ``spec``, or ``None``."""
    if not isinstance(spec, dict):
        return None if value == spec else f"is fixed at {spec!r}"
    kind = spec["distribution"]
    if kind == "choice":
        return None if value in spec["values"] else f"must be one of {spec['values']!r}"
    integer = kind == "int_uniform"
    if not (isinstance(value, int) if integer else _is_number(value)) or isinstance(value, bool):
        return "must be an integer" if integer else "must be a number"
    if not spec["min"] <= value <= spec["max"]:
        return f"must lie in [{spec['min']!r}, {spec['max']!r}]"
    return None


def complete_point(
    space: Mapping[str, Any], given: Mapping[str, Any], where: str = "hyperparameters"
) -> dict[str, Any]:
    """``given`` checked against ``space``, the :func:`defaults` filling what it leaves
    out, in the space's key order.

    :raises UsageError: for a name the space lacks (listing its names) or a value outside
        its distribution (naming the range or choices).
    """
    checked = parse_space(space)
    unknown = sorted(set(given) - set(checked))
    if unknown:
        raise UsageError(
            f"{where} has no hyperparameter {unknown[0]!r}; its search space: {', '.join(checked)}"
        )
    for key, value in given.items():
        why = _outside(checked[key], value)
        if why is not None:
            raise UsageError(f"{where}: hyperparameter {key} = {value!r} {why}")
    return {**defaults(checked), **{k: given[k] for k in checked if k in given}}
