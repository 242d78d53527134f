"""docs/json.md read as a schema, to check what a ``d5 ... --json`` command prints.

Each ``## d5 COMMAND`` section of the page names its schema (``Schema: `d5.x/1```) and
has a table of paths (``data[].run_id``), types (``string or null``, ``optional``) and
meanings. :func:`check` compares one command's ``data`` with its table: every listed
key that is not optional is there, with one of its types; an object whose keys are
listed has no other key; and a run's id is named ``run_id`` (an ``id`` key only in a
record that also has ``run_id``). Imported by the JSON tests of tests/core and
tests/integration (``tests/`` is on ``sys.path`` through tests/conftest.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DOC = Path(__file__).resolve().parents[1] / "docs" / "json.md"
TYPES = {"string", "integer", "number", "boolean", "object", "array", "null"}
_MISSING = object()


@dataclass(frozen=True)
class Key:
    """One row of a command's table."""

    path: str
    types: frozenset[str]
    optional: bool


@dataclass(frozen=True)
class Section:
    """One command's part of the page."""

    command: str
    schema: str
    keys: tuple[Key, ...]


def _key(row: str) -> Key | None:
    cells = [c.strip() for c in row.strip().strip("|").split(" | ")]
    if len(cells) < 3 or not cells[0].startswith("`data"):
        return None
    kind, _, flag = cells[1].partition(",")
    types = frozenset(t.strip() for t in kind.split(" or "))
    unknown = types - TYPES
    if unknown or flag.strip() not in ("", "optional"):
        raise ValueError(f"docs/json.md: bad type {cells[1]!r} for {cells[0]}")
    return Key(cells[0].strip("`"), types, flag.strip() == "optional")


def sections(text: str | None = None) -> dict[str, Section]:
    """The commands documented in docs/json.md, by command path (``results list``)."""
    text = DOC.read_text(encoding="utf-8") if text is None else text
    found: dict[str, Section] = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = part.partition("\n")
        if not heading.startswith("d5 "):
            continue
        schema = re.search(r"Schema: `(d5\.[^`]+)`", body)
        if schema is None:
            raise ValueError(f"docs/json.md: section {heading!r} names no schema")
        keys = tuple(k for k in map(_key, body.splitlines()) if k is not None)
        found[heading[3:].strip()] = Section(heading[3:].strip(), schema.group(1), keys)
    return found


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    raise TypeError(f"{value!r} is not a JSON value")


def _at(value: Any, steps: list[str]) -> list[tuple[str, Any]]:
    """Every value at the path ``steps`` below ``value`` (``[]`` fans out), with where
    it was found; ``_MISSING`` where a key is absent."""
    if not steps:
        return [("", value)]
    step, rest = steps[0], steps[1:]
    if step == "[]":
        assert isinstance(value, list), f"expected an array, got {_type(value)}"
        return [(f"[{i}]{w}", v) for i, item in enumerate(value) for w, v in _at(item, rest)]
    if value is _MISSING or value is None:
        return []  # below an optional or null parent: nothing to check
    assert isinstance(value, dict), f"expected an object holding {step!r}, got {_type(value)}"
    if step == "*":  # every value of an object keyed by name (a backend, a tag)
        return [(f".{k}{w}", v) for k, item in value.items() for w, v in _at(item, rest)]
    if step not in value:  # the key itself is missing, or a parent of it (not checked)
        return [(f".{step}", _MISSING)] if not rest else []
    return [(f".{step}{w}", v) for w, v in _at(value[step], rest)]


def _steps(path: str) -> list[str]:
    """``data.runs[].run_id`` -> ``["runs", "[]", "run_id"]`` (below ``data``)."""
    return [s for s in re.split(r"\.|(\[\])", path.removeprefix("data")) if s]


def _ids_are_run_ids(value: Any, where: str = "data") -> None:
    if isinstance(value, dict):
        if "id" in value:
            assert "run_id" in value, f"{where} has 'id' but no 'run_id': call a run's id run_id"
        for k, v in value.items():
            _ids_are_run_ids(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _ids_are_run_ids(v, f"{where}[{i}]")


def check(command: str, data: Any, **placeholders: str) -> None:
    """Assert that ``data`` (what ``d5 COMMAND --json`` printed inside its envelope)
    has the shape docs/json.md gives it. ``placeholders`` fill in names such as
    ``<by>``."""
    _ids_are_run_ids(data)
    section = sections()[command]
    keys = [
        Key(re.sub(r"<(\w+)>", lambda m: placeholders[m.group(1)], k.path), k.types, k.optional)
        for k in section.keys
    ]
    for key in keys:
        for where, value in _at(data, _steps(key.path)):
            shown = f"{key.path} (at data{where})"
            if value is _MISSING:
                assert key.optional, f"d5 {command}: {shown} is missing"
                continue
            kind = _type(value)
            allowed = key.types | ({"integer"} if "number" in key.types else set())
            assert kind in allowed, f"d5 {command}: {shown} is {kind}, documented {key.types}"
    listed: dict[str, set[str]] = {}
    for key in keys:
        parent, _, name = key.path.rpartition(".")
        if parent:
            listed.setdefault(parent, set()).add(name)
    for parent, names in listed.items():
        for where, value in _at(data, _steps(parent)):
            if isinstance(value, dict) and "*" not in names:
                extra = set(value) - names
                assert not extra, f"d5 {command}: data{where} has undocumented keys {extra}"
