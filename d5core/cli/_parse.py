"""Parsing of option values shared by commands: lists, attributes, measurement options."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from d5core.errors import UsageError

__all__ = ["parse_attributes", "parse_list"]


def parse_list(value: str, what: str) -> list[str]:
    """Split ``"a,b"`` into names; an empty list, or a name listed twice, is a usage
    error naming ``what``."""
    names = [part.strip() for part in value.split(",") if part.strip()]
    if not names:
        raise UsageError(f"no {what} given; list them separated by commas")
    twice = next((name for i, name in enumerate(names) if name in names[:i]), None)
    if twice is not None:
        raise UsageError(f"{what} lists {twice!r} twice; list each of them once")
    return names


def parse_attributes(pairs: Sequence[str]) -> dict[str, Any]:
    """``["axis=1", "pads=[1,1,1,1]"]`` -> ``{"axis": 1, "pads": [1, 1, 1, 1]}``.

    Values are read as JSON when they parse as JSON, as strings otherwise.
    """
    attributes: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"attribute {pair!r} is not KEY=VALUE (for example --attr axis=1)")
        try:
            attributes[key.strip()] = json.loads(raw)
        except json.JSONDecodeError:
            attributes[key.strip()] = raw
    return attributes
