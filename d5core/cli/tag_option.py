"""``--tag NAME``: the option every command that makes runs shares, so that tags read,
check and behave the same on ``d5 bench``, ``d5 run``, ``d5 validate`` and
``d5 conformance``.

The tags are checked while the command line is parsed (:func:`d5core.results.tags.check_tags`),
so a bad tag ends the command with its one-line error and exit 2 before any work starts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from d5core.results.tags import check_tags

__all__ = ["tag_option"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _checked(_ctx: click.Context, _param: click.Parameter, value: Sequence[str]) -> tuple[str, ...]:
    """The tags given, each once, in order; a bad one raises its UsageError (exit 2)."""
    return check_tags(value or ())


def tag_option(fn: _F) -> _F:
    """``--tag NAME`` (repeatable): tags for every run the command stores, passed to the
    command as ``tags`` (a tuple of checked, distinct tags; empty when none is given)."""
    option = click.option(
        "--tag",
        "tags",
        multiple=True,
        metavar="NAME",
        callback=_checked,
        help="Tag the stored run(s) with NAME, to find them with 'd5 results list --tag NAME' "
        "or 'd5 report --tag NAME' (repeatable).",
    )
    return option(fn)
