"""d5: a plugin-based benchmarking meta-framework for deep learning.

The core defines hook specifications for each level (``d5core.hookspecs``), the level
interfaces (``d5core.levels``) and plugin discovery (``d5core.plugins``); frameworks come
as separately installed plugins. Importing ``d5core`` imports no framework.
"""

from __future__ import annotations

from d5core._version import PLUGIN_API_VERSION, __version__
from d5core.errors import CheckFailed, D5Error, PluginError, UsageError
from d5core.hookspecs import hookimpl, hookspec
from d5core.plugins import PluginManager, get_plugin_manager

__all__ = [
    "PLUGIN_API_VERSION",
    "CheckFailed",
    "D5Error",
    "PluginError",
    "PluginManager",
    "UsageError",
    "__version__",
    "get_plugin_manager",
    "hookimpl",
    "hookspec",
]
