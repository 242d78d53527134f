"""Tell the metric bus and the plugins that a validation finished.

:func:`d5core.lv0.runner.validate_op` and
:func:`d5core.lv1.runner.validate_network` call these once per validation, passed
or failed, so that ``d5 validate`` and library callers alike are heard. The plugins are
attached to the process-wide bus first (:func:`d5core.bus.attach_plugins`, once per
bus), so a plugin that subscribes to ``validation`` in ``d5_bus_subscribe`` gets it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from d5core.bus import VALIDATION, attach_plugins, get_bus

if TYPE_CHECKING:
    from d5core.plugins import PluginManager

__all__ = ["network_validated", "operator_validated"]


def _manager(manager: PluginManager | None) -> PluginManager:
    if manager is not None:
        return manager
    from d5core.plugins import get_plugin_manager

    return get_plugin_manager()


def operator_validated(
    op_type: str, backend: str, report: Mapping[str, Any], manager: PluginManager | None = None
) -> None:
    """Publish ``validation`` (level 0) with ``report`` and call ``d5_operator_validated``."""
    plugins = _manager(manager)
    bus = get_bus()
    attach_plugins(bus, plugins)
    bus.publish(VALIDATION, level=0, **report)
    plugins.hook.d5_operator_validated(op_type=op_type, backend=backend, report=report)


def network_validated(report: Mapping[str, Any], manager: PluginManager | None = None) -> None:
    """Publish ``validation`` (level 1) with ``report``: a network's validation, which
    plugins hear through the bus (there is no separate hook for it)."""
    bus = get_bus()
    attach_plugins(bus, _manager(manager))
    bus.publish(VALIDATION, level=1, **report)
