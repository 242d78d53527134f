"""Exceptions with a meaning for the user, and the exit codes they map to.

d5's commands exit with 0 on success, 1 when a result fails a threshold or a check, and
2 when the input is bad (a recipe, a file, an argument, a plugin selection). Errors that
reach the command line are printed as one line naming what is wrong and how to fix it.
"""

from __future__ import annotations

__all__ = [
    "EXIT_FAILED",
    "EXIT_OK",
    "EXIT_USAGE",
    "CheckFailed",
    "D5Error",
    "PluginError",
    "UsageError",
    "one_line",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class D5Error(Exception):
    """Base class of every error d5 raises on purpose; carries the exit code to use."""

    exit_code: int = EXIT_USAGE


class UsageError(D5Error):
    """Bad input from the user: an argument, a file, a recipe or a plugin selection."""

    exit_code = EXIT_USAGE


class PluginError(UsageError):
    """A plugin that was asked for is unknown, disabled, broken or incompatible."""


class CheckFailed(D5Error):
    """A validation, a threshold or a plugin check did not hold."""

    exit_code = EXIT_FAILED


def one_line(exc: BaseException) -> str:
    """``exc`` as one line for a message: its type and its text with the white space
    folded (``ValueError: bad shape (3, 4)``)."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
