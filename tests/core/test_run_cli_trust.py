"""How the command line ends: Ctrl-C, stray EOFError, D5_DEBUG values, plugin selection
names, and zoo options (issue 11, items 17 and 18)."""

from __future__ import annotations

from collections.abc import Iterator

import click
import pytest

from d5core.cli.app import cli
from d5core.errors import UsageError
from d5core.lv1.zoo import build
from d5core.plugins.records import PluginRecord
from d5core.plugins.selection import Selection, selection_warnings


@pytest.fixture
def raising_command() -> Iterator[None]:
    """A ``raise-it KIND`` command that raises what it is told to."""

    @click.command("raise-it")
    @click.argument("kind")
    def raise_it(kind: str) -> None:
        if kind == "interrupt":
            raise KeyboardInterrupt
        if kind == "eof":
            raise EOFError("Compressed file ended before the end-of-stream marker was reached")
        raise UsageError("bad input, said the command")

    cli.add_command(raise_it)
    yield
    cli.commands.pop("raise-it", None)


# -- Ctrl-C and EOFError --------------------------------------------------------------


def test_ctrl_c_in_a_command_says_interrupted_not_aborted(d5_cli, raising_command):
    result = d5_cli("raise-it", "interrupt")
    assert result.exit_code == 130
    assert result.stderr.strip() == "d5: interrupted"


def test_an_eof_error_in_a_command_is_an_error_not_an_abort(d5_cli, raising_command):
    result = d5_cli("raise-it", "eof")
    assert result.exit_code == 3
    assert result.stderr.startswith("d5: internal error: EOFError: Compressed file ended")
    assert "aborted" not in result.stderr and result.stderr.count("\n") == 1


def test_debug_shows_the_eof_error_itself(d5_cli, raising_command):
    with pytest.raises(EOFError):
        d5_cli("--debug", "raise-it", "eof")


# -- D5_DEBUG --------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["maybe", "2", "debug"])
def test_an_unclear_d5_debug_warns_and_leaves_debugging_off(d5_cli, raising_command,
                                                            monkeypatch, value):  # fmt: skip
    monkeypatch.setenv("D5_DEBUG", value)
    result = d5_cli("raise-it", "usage")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith(f"d5: warning: D5_DEBUG={value!r} is neither yes nor no")
    assert lines[1] == "d5: error: bad input, said the command" and len(lines) == 2


@pytest.mark.parametrize("value", ["1", "true", "YES", "on"])
def test_a_yes_d5_debug_shows_tracebacks(d5_cli, raising_command, monkeypatch, value):
    monkeypatch.setenv("D5_DEBUG", value)
    with pytest.raises(UsageError):
        d5_cli("raise-it", "usage")


@pytest.mark.parametrize("value", ["", "0", "false", "No", "off"])
def test_a_no_d5_debug_keeps_one_line_errors_silently(d5_cli, raising_command, monkeypatch,
                                                      value):  # fmt: skip
    monkeypatch.setenv("D5_DEBUG", value)
    result = d5_cli("raise-it", "usage")
    assert result.exit_code == 2
    assert result.stderr == "d5: error: bad input, said the command\n"


# -- D5_DISABLE_PLUGINS / D5_LOAD_PLUGINS -----------------------------------------------


def _record(name: str, group: str, distribution: str) -> PluginRecord:
    return PluginRecord(name, group, distribution, "1.0", f"{name}_mod")


RECORDS = [
    _record("core", "d5.hooks", "d5core"),
    _record("digits", "d5.datasets", "d5core"),
    _record("torch", "d5.hooks", "d5-plugin-torch"),
    _record("torch", "d5.executors", "d5-plugin-torch"),
    _record("numpy", "d5.hooks", "d5-plugin-numpy"),
]


def test_unknown_plugin_names_are_warned_about_naming_the_installed_ones():
    environ = {"D5_DISABLE_PLUGINS": "torhc, torch", "D5_LOAD_PLUGINS": "nmupy,d5-plugin-numpy"}
    assert selection_warnings(environ, RECORDS) == [
        "D5_DISABLE_PLUGINS names 'torhc': no installed plugin or distribution has that "
        "name; installed plugins: numpy, torch",
        "D5_LOAD_PLUGINS names 'nmupy': no installed plugin or distribution has that "
        "name; installed plugins: numpy, torch",
    ]


def test_names_after_a_comma_and_a_space_still_select_their_plugin():
    selection = Selection.from_environ({"D5_DISABLE_PLUGINS": "numpy, torch"})
    assert selection.reason_off("torch", "d5-plugin-torch") is not None


def test_disabling_a_part_of_d5core_is_warned_about_but_loading_core_only_is_not():
    warned = selection_warnings({"D5_DISABLE_PLUGINS": "digits"}, RECORDS)
    assert len(warned) == 1 and "part of d5core, which is always on" in warned[0]
    assert selection_warnings({"D5_LOAD_PLUGINS": "core"}, RECORDS) == []
    assert selection_warnings({}, RECORDS) == []


def test_the_command_line_warns_about_an_unknown_plugin_name(d5_cli, monkeypatch):
    monkeypatch.setenv("D5_DISABLE_PLUGINS", "no-such-plugin")
    result = d5_cli("--version")
    assert result.exit_code == 0
    assert result.stderr.startswith(
        "d5: warning: D5_DISABLE_PLUGINS names 'no-such-plugin': no installed plugin"
    )


# -- zoo options -----------------------------------------------------------------------


@pytest.mark.parametrize("hidden", [[-5], [64, 0], [2.5], ["64"], "64", [True]])
def test_mlp_hidden_sizes_must_be_positive_integers(hidden):
    with pytest.raises(UsageError, match="mlp option hidden must be a list of positive"):
        build("mlp", input_shape=(64,), classes=10, hidden=hidden)


def test_mlp_with_good_hidden_sizes_builds():
    assert build("mlp", input_shape=(64,), classes=10, hidden=[16, 8]).model.graph.node
