"""Plugin discovery and calling: entry points load the plugins, pluggy calls them."""

from __future__ import annotations

from d5core.plugins.groups import COMPONENT_GROUPS, GROUPS, HOOKS_GROUP, INTERNAL_PLUGINS, Group
from d5core.plugins.guards import HookOutcome
from d5core.plugins.manager import (
    API_ATTRIBUTE,
    PluginManager,
    get_plugin_manager,
    reset_plugin_manager,
)
from d5core.plugins.problems import HookProblem, PluginWarning
from d5core.plugins.records import PluginRecord, Status
from d5core.plugins.selection import DISABLE_VAR, LOAD_VAR, Selection

__all__ = [
    "API_ATTRIBUTE",
    "COMPONENT_GROUPS",
    "DISABLE_VAR",
    "GROUPS",
    "HOOKS_GROUP",
    "INTERNAL_PLUGINS",
    "LOAD_VAR",
    "Group",
    "HookOutcome",
    "HookProblem",
    "PluginManager",
    "PluginRecord",
    "PluginWarning",
    "Selection",
    "Status",
    "get_plugin_manager",
    "reset_plugin_manager",
]
