"""Shared helpers for printing tables and JSON from commands.

Every ``--json`` output is one envelope (``docs/json.md``)::

    {"schema": "d5.results.list/1", "d5": "0.1.0", "data": ...}

``schema`` names the command and the version of the shape of its ``data``; ``d5`` is
the version of d5 that wrote it. The JSON is standard: a NaN or infinite number is
written as ``null``.
"""

from __future__ import annotations

import json
import math
import numbers
import sys
from collections.abc import Mapping
from typing import Any

from rich.console import Console

__all__ = [
    "SCHEMA_VARIANTS",
    "SCHEMA_VERSIONS",
    "console",
    "envelope",
    "json_text",
    "print_json",
    "read_json",
    "schema_name",
    "strict_json",
]

#: The version of the ``data`` of each command with ``--json``, by command path. A
#: version goes up when a key of that command's data is removed or renamed or changes
#: its type or meaning; a new key does not change it.
SCHEMA_VERSIONS: dict[str, int] = {
    "audit net": 1,
    "audit op": 1,
    "bench algorithms": 1,
    "bench comm": 1,
    "bench net": 1,
    "bench net scenario": 1,
    "bench op": 1,
    "calibrate": 1,
    "conformance": 1,
    "list-plugins": 1,
    "model comm": 1,
    "op build": 1,
    "report": 1,
    "results artifacts": 1,
    "results compare": 1,
    "results export": 1,
    "results import": 1,
    "results list": 1,
    "results merge": 1,
    "results score": 1,
    "results show": 1,
    "results table": 1,
    "run": 1,
    "run inference": 1,
    "trace": 1,
    "validate net": 1,
    "validate op": 1,
}

#: Shapes a command prints with an option that changes what it reports, named like a
#: command in :data:`SCHEMA_VERSIONS`: variant -> the command and option that print it.
SCHEMA_VARIANTS: dict[str, str] = {
    "bench net scenario": "bench net --scenario",
    "run inference": 'run RECIPE with kind = "inference"',
}


def console(stderr: bool = False) -> Console:
    """A rich console; wide when the output is not a terminal, so rows do not wrap."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(file=stream)
    return Console(file=stream, width=240, no_color=True, soft_wrap=False)


def schema_name(command: str) -> str:
    """``"results list"`` -> ``"d5.results.list/1"``: the command and its data's version.

    :raises KeyError: for a command that declares no version in :data:`SCHEMA_VERSIONS`.
    """
    try:
        version = SCHEMA_VERSIONS[command]
    except KeyError:
        raise KeyError(
            f"'d5 {command}' prints JSON but declares no schema version; add it to "
            "SCHEMA_VERSIONS in d5core/cli/output.py and document it in docs/json.md"
        ) from None
    return f"d5.{command.replace(' ', '.')}/{version}"


def _running_command() -> str:
    """The path of the command being run, without the program: ``"results list"``."""
    import click

    ctx = click.get_current_context(silent=True)
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.command.name or "")
        ctx = ctx.parent
    if not names:
        raise RuntimeError("print_json needs command= outside a running d5 command")
    return " ".join(reversed(names))


def strict_json(value: Any) -> Any:
    """``value`` with every NaN or infinite number replaced by ``None``, tuples made
    lists and numpy scalars made Python numbers: what :func:`json.dumps` writes as
    standard JSON with ``allow_nan=False``."""
    if value is None or isinstance(value, str | bool):
        return value
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        return strict_json(value.item())  # a numpy scalar
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    if isinstance(value, Mapping):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def envelope(data: Any, command: str) -> dict[str, Any]:
    """``data`` of ``d5 COMMAND`` in the envelope every ``--json`` output has."""
    from d5core._version import __version__

    return {"schema": schema_name(command), "d5": __version__, "data": strict_json(data)}


def json_text(data: Any, command: str | None = None) -> str:
    """The enveloped JSON of ``data`` as text, indented, ending with a newline.

    ``command`` defaults to the command being run. Values JSON cannot hold (a path, a
    date) are written as strings.
    """
    document = envelope(data, command or _running_command())
    return json.dumps(document, indent=2, allow_nan=False, default=str) + "\n"


def print_json(data: Any, *, command: str | None = None) -> None:
    """Print ``data`` on standard output in the ``--json`` envelope (:func:`json_text`)."""
    sys.stdout.write(json_text(data, command))


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not standard JSON")


def read_json(text: str, command: str | None = None) -> Any:
    """The ``data`` of a ``--json`` output, read strictly: ``NaN`` or ``Infinity`` is an
    error, and so is a document that is not the envelope (or, with ``command``, the
    envelope of another command)."""
    document = json.loads(text, parse_constant=_no_constant)
    if not isinstance(document, dict) or set(document) != {"schema", "d5", "data"}:
        raise ValueError("not a d5 --json document: expected the keys schema, d5 and data")
    if command is not None and document["schema"] != schema_name(command):
        raise ValueError(
            f"expected the output of 'd5 {command}' ({schema_name(command)}), "
            f"got {document['schema']}"
        )
    return document["data"]
