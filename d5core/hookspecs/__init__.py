"""d5's hook specifications, one module per level plus measurement, results and CLI.

Plugins implement hooks with :data:`hookimpl`::

    from d5core.hookspecs import hookimpl

    @hookimpl
    def d5_environment_info():
        return {"answer": 42}

An implementation may accept fewer arguments than its specification, so hooks can grow
new arguments without breaking existing plugins.
"""

from __future__ import annotations

from types import ModuleType

from d5core.hookspecs import (
    cli,
    distributed,
    metrics,
    networks,
    operators,
    plugin,
    results,
    training,
)
from d5core.hookspecs._markers import PROJECT, hookimpl, hookspec

__all__ = ["PROJECT", "SPEC_MODULES", "hookimpl", "hookspec"]

#: Every hook specification module, in the order the reference documents them.
SPEC_MODULES: tuple[ModuleType, ...] = (
    plugin,
    operators,
    networks,
    training,
    distributed,
    metrics,
    results,
    cli,
)
