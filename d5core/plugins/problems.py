"""What can go wrong when plugins are called: a hook that raised, two plugins that offer
the same name. Both are reported as a :class:`PluginWarning` and kept on the manager
for ``d5 list-plugins --check``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["CLASH", "FAILED", "HookProblem", "PluginWarning", "ProblemKind", "one_line"]

#: What went wrong, :attr:`HookProblem.kind`.
ProblemKind = Literal["failed", "clash"]
#: An implementation raised (or gave something unusable) and was left out.
FAILED: ProblemKind = "failed"
#: Two plugins offered the same name in a merged hook.
CLASH: ProblemKind = "clash"


class PluginWarning(RuntimeWarning):
    """A plugin's hook implementation failed, or its offer clashed with another plugin's.

    d5 carries on without the failing contribution (or with the first of two clashing
    ones); the message names the hook and every plugin involved.
    """


@dataclass(frozen=True)
class HookProblem:
    """One failure or clash, as reported."""

    #: :data:`FAILED` or :data:`CLASH`.
    kind: ProblemKind
    #: The hook, for example ``"d5_model_zoo"``.
    hook: str
    #: The plugins involved: the one that failed, or the one kept and the one left out.
    plugins: tuple[str, ...]
    #: One line naming the hook, the plugins and what d5 did about it.
    message: str

    def __str__(self) -> str:
        return self.message


def one_line(exc: BaseException) -> str:
    """``ExceptionType: message`` on one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
