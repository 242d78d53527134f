"""The entry-point groups through which plugins offer things to d5."""

from __future__ import annotations

from dataclasses import dataclass

from d5core.builtin import INTERNAL_PLUGINS

__all__ = ["COMPONENT_GROUPS", "GROUPS", "HOOKS_GROUP", "INTERNAL_PLUGINS", "Group"]


@dataclass(frozen=True)
class Group:
    """An entry-point group: its name, what its entries are, and the level they serve."""

    name: str
    #: What one entry of the group provides, as shown by ``d5 list-plugins``.
    provides: str
    #: Dotted path of the level interface an entry must implement, or ``""`` for none.
    interface: str = ""


#: Each distribution's plugin module: it carries the ``@hookimpl`` functions and the
#: ``d5_plugin_api`` range. It is imported whenever d5 starts, so it must stay light.
HOOKS_GROUP = Group("d5.hooks", "hooks")


#: Selectable components, imported only when chosen by name or checked.
COMPONENT_GROUPS: tuple[Group, ...] = (
    Group("d5.operators", "level 0: operator backend", "d5core.levels.operators:OperatorBackend"),
    Group("d5.frameworks", "level 1: graph executor", "d5core.levels.networks:GraphExecutor"),
    Group("d5.datasets", "level 2: dataset", "d5core.levels.training:Dataset"),
    Group("d5.optimizers", "level 2/3: optimizer", "d5core.levels.training:Optimizer"),
    Group(
        "d5.algorithms",
        "level 2: training algorithm",
        "d5core.levels.training:TrainingAlgorithm",
    ),
    Group("d5.communication", "level 3: communicator", "d5core.levels.distributed:Communicator"),
    Group("d5.metrics", "metric", "d5core.levels.metrics:Metric"),
)

GROUPS: dict[str, Group] = {g.name: g for g in (HOOKS_GROUP, *COMPONENT_GROUPS)}
