"""What d5 knows about each installed plugin entry: where it comes from and its status."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["PluginRecord", "Status", "listing_order"]


class Status(str, enum.Enum):
    """The state of one plugin entry."""

    #: Found, compatible, and (for plugin modules) loaded and registered.
    OK = "ok"
    #: It could not be used: a missing requirement, an import error, an invalid hook.
    FAILED = "failed"
    #: It was written for a plugin API range that this d5core does not satisfy.
    INCOMPATIBLE = "incompatible"
    #: Turned off by ``D5_DISABLE_PLUGINS`` or left out by ``D5_LOAD_PLUGINS``.
    DISABLED = "disabled"


@dataclass
class PluginRecord:
    """One entry point in one of d5's groups, with the outcome of discovering it."""

    name: str
    group: str
    distribution: str
    version: str
    #: The entry point's target, ``module:attribute``.
    value: str
    status: Status = Status.OK
    #: One line saying what is wrong and how to fix it; ``None`` when the status is ok.
    error: str | None = None
    #: Hook names the plugin implements (plugin modules) or the level it serves.
    hooks: list[str] = field(default_factory=list)
    #: Hook failures and clashes this plugin took part in, one line each; filled by
    #: ``d5 list-plugins --check`` (:meth:`PluginManager.check`).
    problems: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The record as plain JSON types."""
        data = asdict(self)
        data["status"] = self.status.value
        return data


def listing_order(rec: PluginRecord) -> tuple[bool, str, str, str]:
    """The order of ``d5 list-plugins``: plugin modules first, then by group, name and
    distribution."""
    return (rec.group != "d5.hooks", rec.group, rec.name, rec.distribution)
