"""The pluggy markers shared by every hook specification module."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pluggy

__all__ = ["PROJECT", "PROPAGATES_ATTR", "hookimpl", "hookspec", "propagates"]

#: The pluggy project name: hook implementations must be marked with :data:`hookimpl`.
PROJECT = "d5"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)

#: The attribute :func:`propagates` sets on a hook specification.
PROPAGATES_ATTR = f"{PROJECT}_propagates"

_F = TypeVar("_F", bound=Callable[..., Any])


def propagates(spec: _F) -> _F:
    """Mark a hook specification whose implementations' exceptions reach the caller.

    d5 isolates a plugin whose implementation raises: the call goes on without it and
    a :class:`~d5core.plugins.PluginWarning` names the plugin and the hook. For a hook
    marked with this decorator, raising is part of the contract instead (a refusal, or
    a failure the caller must not carry on from), so the exception ends the call and
    reaches the caller, as pluggy does by default. Say so in the hook's docstring.
    """
    setattr(spec, PROPAGATES_ATTR, True)
    return spec
