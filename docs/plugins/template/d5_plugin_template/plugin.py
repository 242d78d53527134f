"""The plugin module: hook implementations and the plugin-API range.

Keep imports of your framework inside the hook functions, so that ``d5 list-plugins``
never pays for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from d5core.hookspecs import hookimpl

#: The d5 plugin-API versions this plugin works with.
d5_plugin_api = ">=1.0,<2"


@hookimpl
def d5_environment_info() -> Mapping[str, Any]:
    """Facts stored with every run: your framework's version, build options, devices."""
    import platform

    return {"template": "0.1.0", "python_build": platform.python_build()[0]}


@hookimpl
def d5_plugin_check() -> list[str]:
    """Prove the plugin can work here; return one-line problems, or nothing."""
    return []
