"""Per-plugin failure isolation, installed once, when a plugin is registered.

pluggy stops a hook call at the first implementation that raises and hands the
exception to the caller. d5 wants a broken plugin to cost only its own contribution, so
:func:`guarded` builds the object pluggy registers for a plugin: the plugin's hook
functions, each ordinary implementation wrapped in a guard. The guard

- records what the implementation returned or raised in the :class:`Recording` of the
  current call, if the caller opened one (that is how :meth:`PluginManager.call_each
  <d5core.plugins.PluginManager.call_each>` and ``merged`` know which plugin gave what);
- for an exception, tells the manager (which warns, naming the plugin and the hook) and
  returns ``None``, so pluggy goes on with the next implementation as if this one had
  nothing to say;
- except for the hooks whose specification is marked
  :func:`~d5core.hookspecs.propagates`: there the exception is recorded and re-raised,
  as pluggy does.

Everything else is plain pluggy: calls go through ``pm.hook.NAME(...)``, so
``tryfirst``/``trylast``, ``firstresult``, wrappers (``wrapper=True`` and
``hookwrapper=True``, registered unguarded: a wrapper sees the outcome of the whole call
and answers for what it does with it) and pluggy's tracing work as pluggy documents them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from d5core.hookspecs import PROJECT
from d5core.plugins.validation import marked_hooks

__all__ = ["HookOutcome", "Recording", "guarded", "recording"]

_IMPL_ATTR = f"{PROJECT}_impl"


@dataclass
class HookOutcome:
    """What one plugin's implementation of a hook returned, or the error it raised."""

    plugin: str
    result: Any = None
    error: BaseException | None = None


@dataclass
class Recording:
    """The outcome of every guarded implementation called during one call of ``hook``."""

    hook: str
    outcomes: list[HookOutcome] = field(default_factory=list)


_current: ContextVar[Recording | None] = ContextVar("d5_hook_recording", default=None)


@contextmanager
def recording(hook: str) -> Iterator[Recording]:
    """Record the outcomes of ``hook``'s implementations called inside the block.

    Recordings nest: a hook called from inside an implementation records into its own.
    """
    rec = Recording(hook)
    token = _current.set(rec)
    try:
        yield rec
    finally:
        _current.reset(token)


def _note(hook: str, outcome: HookOutcome) -> None:
    rec = _current.get()
    if rec is not None and rec.hook == hook:
        rec.outcomes.append(outcome)


#: What the manager is told about an implementation that raised: hook, plugin, error.
FailureSink = Callable[[str, str, BaseException], None]


def _guard(
    function: Callable[..., Any], plugin: str, hook: str, propagate: bool, failed: FailureSink
) -> Callable[..., Any]:
    @functools.wraps(function)  # keeps the signature pluggy reads the argument names from
    def guard(*args: Any, **kwargs: Any) -> Any:
        try:
            result = function(*args, **kwargs)
        except Exception as exc:
            _note(hook, HookOutcome(plugin, error=exc))
            if propagate:
                raise
            failed(hook, plugin, exc)
            return None
        _note(hook, HookOutcome(plugin, result))
        return result

    return guard


class _Guarded:
    """What pluggy registers for one plugin: the plugin's hook functions, guarded."""

    def __init__(self, plugin: object, name: str) -> None:
        self._d5_plugin = plugin
        self._d5_name = name

    def __repr__(self) -> str:
        return f"<d5 plugin {self._d5_name!r}: {self._d5_plugin!r}>"


def guarded(
    plugin: object,
    name: str,
    *,
    propagates: Callable[[str], bool],
    failed: FailureSink,
) -> object:
    """The object to register with pluggy in place of ``plugin``.

    :param name: the plugin's registered name, used in outcomes and messages.
    :param propagates: whether exceptions of a hook's implementations reach its caller.
    :param failed: told of every isolated exception.
    """
    proxy = _Guarded(plugin, name)
    for attr, function, opts in marked_hooks(plugin):
        if opts.get("wrapper") or opts.get("hookwrapper"):
            setattr(proxy, attr, function)
            continue
        hook = opts.get("specname") or attr
        guard = _guard(function, name, hook, propagates(hook), failed)
        setattr(guard, _IMPL_ATTR, dict(opts))
        setattr(proxy, attr, guard)
    return proxy
