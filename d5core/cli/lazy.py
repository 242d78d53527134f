"""Commands that cost nothing until they run: what ``d5_cli_commands`` implementations
return when their command's module is heavy to import.

A :class:`LazyCommand` carries its name, a one-line help and the ``"module:attribute"``
of the real ``click`` command; the real one is imported when the command runs or shows
its own help. A :class:`LazyGroup` is a group whose members may be lazy, and it merges
the groups of the same name that several plugins offer (``d5 bench`` gets ``op`` from
level 0, ``net`` from level 1 and ``comm`` from level 3).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import click

__all__ = ["INTERNAL_PREFIX", "LazyCommand", "LazyGroup", "merge_commands"]

#: How the names of d5's internal plugins begin, as the plugin manager registers them.
INTERNAL_PREFIX = "d5core:builtins"


class LazyCommand(click.Command):
    """A stand-in for the ``click`` command at ``target`` (``"module:attribute"``)."""

    def __init__(self, name: str, target: str, help: str) -> None:
        super().__init__(name, help=help, short_help=help)
        self.target = target

    def load(self) -> click.Command:
        """The real command, imported now, under this command's name."""
        module, _, attribute = self.target.partition(":")
        command = getattr(importlib.import_module(module), attribute)
        if not isinstance(command, click.Command):
            raise TypeError(f"{self.target} is {type(command).__name__}, not a click command")
        command.name = self.name
        return command


def _real(command: click.Command) -> click.Command:
    return command.load() if isinstance(command, LazyCommand) else command


class LazyGroup(click.Group):
    """A group whose lazy members are imported one at a time, when asked for."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = self.commands.get(cmd_name)
        if found is None:
            return None
        real = _real(found)
        self.commands[cmd_name] = real
        return real


def merge_commands(
    offers: list[tuple[str, click.Command]], warn: Callable[[str], None]
) -> dict[str, click.Command]:
    """The commands of ``offers`` (each ``(plugin, command)``, in the order the hook
    gave them) by name.

    Two groups of one name become one :class:`LazyGroup` with the members of both; any
    other second offer of a taken name, and a member name taken in a merged group, is
    skipped with a warning naming both plugins.
    """
    found: dict[str, click.Command] = {}
    owner: dict[str, str] = {}
    for plugin, command in offers:
        name = command.name or ""
        taken = found.get(name)
        if taken is None:
            found[name], owner[name] = command, plugin
            if isinstance(command, click.Group):
                owner.update({f"{name} {sub}": plugin for sub in command.commands})
            continue
        if isinstance(taken, click.Group) and isinstance(command, click.Group):
            merged = taken if isinstance(taken, LazyGroup) else _as_lazy_group(taken)
            for sub_name, sub in command.commands.items():
                if sub_name in merged.commands:
                    warn(
                        f"plugin {plugin!r} offers command '{name} {sub_name}', already "
                        f"taken by {_who(owner[f'{name} {sub_name}'])}; skipped"
                    )
                    continue
                merged.add_command(sub, sub_name)
                owner[f"{name} {sub_name}"] = plugin
            found[name] = merged
            continue
        warn(
            f"plugin {plugin!r} offers command {name!r}, already taken by "
            f"{_who(owner[name])}; skipped"
        )
    return found


def _who(plugin: str) -> str:
    """A plugin as a clash warning names it: d5's internal plugins are "d5 itself"."""
    return "d5 itself" if plugin.startswith(INTERNAL_PREFIX) else repr(plugin)


def _as_lazy_group(group: click.Group) -> LazyGroup:
    return LazyGroup(
        group.name, commands=dict(group.commands), help=group.help, short_help=group.short_help
    )
