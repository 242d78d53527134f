"""Hooks that extend the ``d5`` command line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from d5core.hookspecs._markers import hookspec

if TYPE_CHECKING:
    import click

__all__ = ["d5_cli_commands"]


# -------------------------------------------------------------------------
# Subcommands
# -------------------------------------------------------------------------


@hookspec
def d5_cli_commands() -> Sequence[click.Command] | None:
    """Add subcommands to ``d5``.

    Called once when the command line starts. Commands are ``click`` commands or groups;
    their name is what follows ``d5`` on the command line. Import anything heavy inside
    the command's function, not at module level, so that ``d5 --help`` stays fast.

    :return: a sequence of commands, or ``None``. A command whose name is already taken
        is skipped with a warning naming both plugins, except a group offered under the
        name of another group: the two merge, so that a plugin may add ``d5 bench NAME``
        by returning a group ``bench`` holding only its command (a subcommand name taken
        in the merged group is skipped with the same warning). d5's own commands come
        from its internal plugins, as ``d5core.cli.lazy.LazyCommand`` stand-ins that
        import a command's module only when it runs.

    Not firstresult: the commands of all plugins are added.

    .. versionadded:: 1.0
    .. versionchanged:: 1.7
       Groups of one name merge.
    """
