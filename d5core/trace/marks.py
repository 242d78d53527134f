"""How tables mark a traced run (``--trace LEVEL``; docs/traces.md).

Every table that shows a value of a traced run marks it with :data:`TRACED_MARK` and
explains the mark under the table (:data:`TRACED_LEGEND`); :func:`trace_level` is the one
test they use.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["TRACED_LEGEND", "TRACED_MARK", "trace_level"]

#: The mark a table puts beside a value of a traced run (``--trace LEVEL``).
TRACED_MARK = "TRACED"
#: The line under a table that shows :data:`TRACED_MARK`.
TRACED_LEGEND = (
    f"{TRACED_MARK}: a traced run (--trace); d5 bench's timings come from untraced workers, "
    "but a traced d5 run's times include the tracing (docs/traces.md)"
)


def trace_level(config: Mapping[str, Any]) -> str | None:
    """The trace level a run was made with (its config's ``trace``), ``None`` untraced."""
    level = config.get("trace")
    return str(level) if level else None
