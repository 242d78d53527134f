"""Check a plugin object's hook implementations against d5's specifications.

pluggy validates too, but its messages span several lines; d5 wants one line that names
the plugin, the hook, what is wrong and how to fix it.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pluggy

from d5core.hookspecs import PROJECT

__all__ = ["hook_functions", "hook_problems", "marked_hooks"]

_IMPL_ATTR = f"{PROJECT}_impl"


def marked_hooks(plugin: object) -> Iterator[tuple[str, Callable[..., Any], dict[str, Any]]]:
    """(attribute, function, hookimpl options) of every ``@hookimpl`` of ``plugin``."""
    for attr in dir(plugin):
        try:
            value = getattr(plugin, attr)
        except Exception:
            continue
        opts = getattr(value, _IMPL_ATTR, None)
        if callable(value) and isinstance(opts, dict):
            yield attr, value, opts


def hook_functions(plugin: object) -> dict[str, Callable[..., Any]]:
    """The functions of ``plugin`` marked with ``@hookimpl``, by hook name."""
    return {opts.get("specname") or attr: value for attr, value, opts in marked_hooks(plugin)}


def _argnames(func: Callable[..., Any]) -> list[str]:
    params = inspect.signature(func).parameters.values()
    return [
        p.name
        for p in params
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.POSITIONAL_ONLY, p.KEYWORD_ONLY)
        and p.name != "self"
    ]


def hook_problems(pm: pluggy.PluginManager, plugin: object) -> list[str]:
    """One-line problems with the hook implementations of ``plugin``; empty when valid."""
    problems: list[str] = []
    for hook_name, func in sorted(hook_functions(plugin).items()):
        caller = getattr(pm.hook, hook_name, None)
        spec = getattr(caller, "spec", None)
        if spec is None:
            if getattr(func, _IMPL_ATTR, {}).get("optionalhook"):
                continue
            problems.append(
                f"implements {hook_name}, which is not a d5 hook; check the name against "
                f"the hook reference or mark it @hookimpl(optionalhook=True)"
            )
            continue
        extra = [a for a in _argnames(func) if a not in spec.argnames]
        if extra:
            wanted = ", ".join(spec.argnames) or "no arguments"
            problems.append(
                f"{hook_name} takes {', '.join(repr(a) for a in extra)}, which the "
                f"specification does not offer (it offers: {wanted}); remove or rename it"
            )
    return problems
