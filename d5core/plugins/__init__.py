"""Plugin discovery and calling: stevedore loads, pluggy calls."""

from __future__ import annotations

from d5core.plugins.groups import COMPONENT_GROUPS, GROUPS, HOOKS_GROUP, Group
from d5core.plugins.manager import (
    API_ATTRIBUTE,
    HookOutcome,
    PluginManager,
    get_plugin_manager,
    reset_plugin_manager,
)
from d5core.plugins.records import PluginRecord, Status
from d5core.plugins.selection import DISABLE_VAR, LOAD_VAR, Selection

__all__ = [
    "API_ATTRIBUTE",
    "COMPONENT_GROUPS",
    "DISABLE_VAR",
    "GROUPS",
    "HOOKS_GROUP",
    "LOAD_VAR",
    "Group",
    "HookOutcome",
    "PluginManager",
    "PluginRecord",
    "Selection",
    "Status",
    "get_plugin_manager",
    "reset_plugin_manager",
]
