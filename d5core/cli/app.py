"""The ``d5`` command group, plugin subcommands, and how errors reach the user.

Exit codes: 0 success, 1 a check or threshold failed, 2 bad input (arguments, files,
recipes, plugin selection), 3 an unexpected error inside d5 or a plugin, 130 interrupted
(Ctrl-C). Errors print as one line; ``d5 --debug`` (or ``D5_DEBUG=1``, ``true``, ``yes``
or ``on``) shows the traceback instead.
"""

from __future__ import annotations

import errno
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

import click

from d5core._version import PLUGIN_API_VERSION, __version__
from d5core.cli.lazy import LazyCommand, LazyGroup, merge_commands
from d5core.errors import EXIT_USAGE, D5Error

__all__ = ["DEBUG_VAR", "EXIT_INTERNAL", "EXIT_INTERRUPTED", "D5Group", "cli", "main"]

EXIT_INTERNAL = 3
#: The exit code of a command the user interrupted (Ctrl-C), as shells report SIGINT.
EXIT_INTERRUPTED = 130
#: The variable that turns on tracebacks, like ``--debug``.
DEBUG_VAR = "D5_DEBUG"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


class _EscapedEOF(Exception):
    """An ``EOFError`` from inside a command, carried past click (which would turn it
    into "aborted") to be reported as the error it is."""

    def __init__(self, original: EOFError) -> None:
        super().__init__(str(original))
        self.original = original


def _warn(message: str) -> None:
    click.echo(f"d5: warning: {message}", err=True)


class D5Group(LazyGroup):
    """The ``d5`` group: every command comes from the ``d5_cli_commands`` hook, d5's own
    from its internal plugins, each imported only when it runs or shows its help."""

    _plugin_commands: dict[str, click.Command] | None = None

    def _from_plugins(self) -> dict[str, click.Command]:
        if self._plugin_commands is None:
            from d5core.plugins import get_plugin_manager

            offers = [
                (out.plugin, cmd)
                for out in get_plugin_manager().call_each("d5_cli_commands")
                if out.error is None  # a failure is reported by the plugin manager
                for cmd in out.result or ()
            ]
            self._plugin_commands = merge_commands(offers, _warn)
        return self._plugin_commands

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self._from_plugins()})

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except EOFError as exc:
            raise _EscapedEOF(exc) from exc

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands:
            return super().get_command(ctx, cmd_name)
        offered = self._from_plugins()
        found = offered.get(cmd_name)
        if isinstance(found, LazyCommand):
            found = offered[cmd_name] = found.load()
        return found


def _debug_wanted(argv: Sequence[str]) -> bool:
    """``--debug`` given, or ``D5_DEBUG`` a yes; a value that is neither yes nor no is
    warned about and leaves debugging off."""
    value = os.environ.get(DEBUG_VAR, "").strip().lower()
    if value not in _TRUE + _FALSE:
        _warn(
            f"{DEBUG_VAR}={os.environ[DEBUG_VAR]!r} is neither yes nor no; use 1, true, yes "
            f"or on to show tracebacks (0, false, no, off or empty for not); ignored"
        )
    return "--debug" in argv or value in _TRUE


def _warn_plugin_selection() -> None:
    """Warn about names in D5_DISABLE_PLUGINS / D5_LOAD_PLUGINS that select nothing."""
    from d5core.plugins.selection import DISABLE_VAR, LOAD_VAR

    if not (os.environ.get(DISABLE_VAR, "").strip() or os.environ.get(LOAD_VAR, "").strip()):
        return
    from d5core.plugins.catalog import discover
    from d5core.plugins.selection import selection_warnings

    for line in selection_warnings(os.environ, discover().records):
        _warn(line)


#: Errors of writing that the machine causes, not d5: a full disk or quota, a file too
#: large, a read-only filesystem, a failing device.
_WRITE_ERRNOS = frozenset(
    getattr(errno, name)
    for name in ("ENOSPC", "EDQUOT", "EFBIG", "EROFS", "EIO")
    if hasattr(errno, name)
)


def _write_failed(exc: OSError) -> int:
    """A write the machine refused, as one line naming what was written (exit 2). Output
    still buffered for standard output is dropped, so that Python's exit does not fail
    on it again with a second message."""
    where = f"{exc.filename!r}" if exc.filename else "the output (standard output or a file)"
    click.echo(
        f"d5: error: cannot write {where}: {exc.strerror or exc}; free space there, or "
        f"write somewhere else",
        err=True,
    )
    _drop_stdout()
    return EXIT_USAGE


def _drop_stdout() -> None:
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        return  # not a real file (a test's buffer): nothing is flushed at exit
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:
        pass


def _interrupted() -> int:
    click.echo("d5: interrupted", err=True)
    return EXIT_INTERRUPTED


def _internal_error(exc: BaseException) -> int:
    msg = " ".join(str(exc).split())
    click.echo(
        f"d5: internal error: {type(exc).__name__}: {msg} "
        f"(rerun with 'd5 --debug ...' for the traceback and report it)",
        err=True,
    )
    return EXIT_INTERNAL


@click.group(cls=D5Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(
    __version__,
    "--version",
    prog_name="d5",
    message=f"%(prog)s {__version__} (plugin API {PLUGIN_API_VERSION})",
)
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
def cli(debug: bool) -> None:
    """d5: benchmark deep-learning operators, networks, training and distributed schemes
    fairly, validate them against a reference, and keep every result reproducible."""


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``d5`` command: run it and exit with its code."""
    args = list(sys.argv[1:] if argv is None else argv)
    warnings.showwarning = _show_warning
    sys.exit(run(args))


_python_showwarning = warnings.showwarning


def _show_warning(message: Warning | str, category: type[Warning], *args: Any, **kw: Any) -> None:
    """A plugin's failure or clash as one ``d5: warning:`` line; other warnings as Python
    shows them."""
    from d5core.plugins import PluginWarning

    if issubclass(category, PluginWarning):
        _warn(str(message))
    else:
        _python_showwarning(message, category, *args, **kw)


def _trace_hook_calls() -> None:
    """``--debug``: pluggy's trace of every hook call and its result, on standard error."""
    from d5core.plugins import get_plugin_manager

    get_plugin_manager().trace_calls(lambda text: sys.stderr.write(f"d5: hook: {text}"), width=200)


def run(args: list[str]) -> int:
    """Run the command line on ``args`` and return the exit code."""
    debug = _debug_wanted(args)
    try:
        from d5core.allocator import apply_allocator_policy

        apply_allocator_policy()  # before any framework allocates: see its module
        _warn_plugin_selection()
        if debug:
            _trace_hook_calls()
        rv = cli.main(args=args, prog_name="d5", standalone_mode=False)
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.Abort as exc:
        # click turns Ctrl-C (KeyboardInterrupt) into Abort, the interrupt as its context
        if isinstance(exc.__context__, KeyboardInterrupt):
            return _interrupted()
        click.echo("d5: aborted", err=True)
        return EXIT_INTERRUPTED
    except _EscapedEOF as exc:
        if debug:
            raise exc.original from None
        return _internal_error(exc.original)
    except click.ClickException as exc:
        if debug:
            raise
        hint = ""
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        click.echo(f"d5: error: {exc.format_message()}{hint}", err=True)
        return exc.exit_code
    except D5Error as exc:
        if debug:
            raise
        click.echo(f"d5: error: {exc}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        return _interrupted()
    except OSError as exc:
        if debug:
            raise
        return _write_failed(exc) if exc.errno in _WRITE_ERRNOS else _internal_error(exc)
    except Exception as exc:
        if debug:
            raise
        return _internal_error(exc)
    try:
        sys.stdout.flush()  # a full disk behind standard output is seen here, not at exit
    except OSError as exc:
        if exc.errno in _WRITE_ERRNOS:
            return _write_failed(exc)
        raise
    return rv if isinstance(rv, int) else 0
