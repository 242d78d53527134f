"""Shared helpers for printing tables and JSON from commands."""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

__all__ = ["console", "print_json"]


def console(stderr: bool = False) -> Console:
    """A rich console; wide when the output is not a terminal, so rows do not wrap."""
    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(file=stream)
    return Console(file=stream, width=240, no_color=True, soft_wrap=False)


def print_json(data: Any) -> None:
    """Print ``data`` as indented JSON on standard output."""
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False, default=str) + "\n")
