"""Import the entry points d5 discovered.

Discovery (:mod:`d5core.plugins.catalog`) has already read fresh metadata and knows
which distribution each entry point comes from and whether it is turned off, so loading
one is :meth:`importlib.metadata.EntryPoint.load`, which the manager calls in its own
``try`` per entry point. stevedore's managers would look the group up again (through
their cache) and make their own choice about import failures (an ``AssertionError``
escapes them); d5 needs neither, so it does not use them.
"""

from __future__ import annotations

import importlib.metadata as md
from typing import Any

__all__ = ["load_entry_point"]


def load_entry_point(entry_point: md.EntryPoint) -> Any:
    """Import one entry point and return its object; exceptions propagate."""
    return entry_point.load()
