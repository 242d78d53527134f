"""The pluggy markers shared by every hook specification module."""

from __future__ import annotations

import pluggy

__all__ = ["PROJECT", "hookimpl", "hookspec"]

#: The pluggy project name: hook implementations must be marked with :data:`hookimpl`.
PROJECT = "d5"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)
