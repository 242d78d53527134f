"""Which plugins the user turned off or on, from the environment."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from packaging.utils import canonicalize_name

from d5core.plugins.groups import INTERNAL_PLUGINS
from d5core.plugins.records import PluginRecord

__all__ = ["DISABLE_VAR", "LOAD_VAR", "Selection", "selection_warnings"]

#: The distribution of d5 itself: its components are always on.
_CORE_DISTRIBUTION = "d5core"

#: Comma-separated plugin or distribution names to turn off.
DISABLE_VAR = "D5_DISABLE_PLUGINS"
#: Comma-separated plugin or distribution names to allow; when set, all others are off.
LOAD_VAR = "D5_LOAD_PLUGINS"


def _names(value: str | None) -> frozenset[str] | None:
    if value is None or not value.strip():
        return None
    return frozenset(canonicalize_name(part.strip()) for part in value.split(",") if part.strip())


@dataclass(frozen=True)
class Selection:
    """The user's choice of plugins; names match an entry-point or a distribution name."""

    disabled: frozenset[str] = frozenset()
    #: ``None`` means every plugin is allowed.
    allowed: frozenset[str] | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Selection:
        return cls(
            disabled=_names(environ.get(DISABLE_VAR)) or frozenset(),
            allowed=_names(environ.get(LOAD_VAR)),
        )

    def reason_off(self, name: str, distribution: str) -> str | None:
        """Why the entry ``name`` of ``distribution`` is off, or ``None`` if it is on."""
        keys = {canonicalize_name(name), canonicalize_name(distribution)}
        if keys & self.disabled:
            return f"turned off by {DISABLE_VAR}; remove it from that list to use it"
        if self.allowed is not None and not keys & self.allowed:
            return f"not named in {LOAD_VAR}; add it to that list to use it"
        return None


def _installed(records: Iterable[PluginRecord]) -> tuple[set[str], set[str], list[str]]:
    """(names that select a plugin, names of d5core's own entries, plugins to show)."""
    selectable: set[str] = set()
    core: set[str] = {canonicalize_name(name) for name, _ in INTERNAL_PLUGINS}
    shown: set[str] = set()
    for rec in records:
        if canonicalize_name(rec.distribution) == _CORE_DISTRIBUTION:
            core.add(canonicalize_name(rec.name))
            continue
        selectable |= {canonicalize_name(rec.name), canonicalize_name(rec.distribution)}
        if rec.group == "d5.hooks":
            shown.add(rec.name)
    return selectable, core - selectable, sorted(shown)


def selection_warnings(environ: Mapping[str, str], records: Iterable[PluginRecord]) -> list[str]:
    """One line per name in ``D5_DISABLE_PLUGINS`` / ``D5_LOAD_PLUGINS`` that selects
    nothing among the installed ``records``: a typo, or (to disable) a part of d5core,
    which is always on. Each line names the installed plugins.

    A part of d5core in ``D5_LOAD_PLUGINS`` is fine: ``D5_LOAD_PLUGINS=core`` is how
    one runs d5 with no plugin at all.
    """
    selectable, core, shown = _installed(records)
    installed = ", ".join(shown) or "none"
    lines = []
    for var in (DISABLE_VAR, LOAD_VAR):
        for name in sorted(_names(environ.get(var)) or ()):
            if name in selectable or (var == LOAD_VAR and name in core):
                continue
            why = (
                "that is part of d5core, which is always on and cannot be turned off"
                if name in core
                else "no installed plugin or distribution has that name"
            )
            lines.append(f"{var} names {name!r}: {why}; installed plugins: {installed}")
    return lines
