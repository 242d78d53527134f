"""Which plugins the user turned off or on, from the environment."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from packaging.utils import canonicalize_name

__all__ = ["DISABLE_VAR", "LOAD_VAR", "Selection"]

#: Comma-separated plugin or distribution names to turn off.
DISABLE_VAR = "D5_DISABLE_PLUGINS"
#: Comma-separated plugin or distribution names to allow; when set, all others are off.
LOAD_VAR = "D5_LOAD_PLUGINS"


def _names(value: str | None) -> frozenset[str] | None:
    if value is None or not value.strip():
        return None
    return frozenset(canonicalize_name(part) for part in value.split(",") if part.strip())


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
