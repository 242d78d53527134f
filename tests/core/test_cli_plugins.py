"""``d5 --version``, ``d5 list-plugins`` and plugin subcommands, run in-process."""

from __future__ import annotations

import pytest

from d5core import PLUGIN_API_VERSION, __version__
from d5core.cli.output import read_json
from d5core.errors import CheckFailed
from d5core.plugins import PluginWarning

BROKEN = {"modules": {"boom_mod.py": "raise ImportError('no module named fancy_sdk')\n"}}


def test_version_shows_core_and_plugin_api(d5_cli):
    result = d5_cli("--version")
    assert result.exit_code == 0
    assert result.stdout.strip() == f"d5 {__version__} (plugin API {PLUGIN_API_VERSION})"


def test_list_plugins_json_has_the_documented_keys(d5_cli):
    result = d5_cli("list-plugins", "--json")
    assert result.exit_code == 0
    rows = read_json(result.stdout)
    core = next(r for r in rows if r["name"] == "core")
    assert {"name", "group", "distribution", "version", "status", "error", "hooks"} <= set(core)
    assert core["status"] == "ok" and core["distribution"] == "d5core"


def test_list_plugins_exits_zero_and_names_a_broken_plugin(d5_site, d5_cli):
    d5_site.add("d5-plugin-boom", entry_points={"d5.hooks": {"boom": "boom_mod"}}, **BROKEN)
    result = d5_cli("list-plugins")
    assert result.exit_code == 0
    line = next(line for line in result.stdout.splitlines() if " boom " in line)
    assert "failed" in line and "fancy_sdk" in line


def test_check_exits_one_naming_the_broken_plugin(d5_site, d5_cli):
    d5_site.add("d5-plugin-boom", entry_points={"d5.hooks": {"boom": "boom_mod"}}, **BROKEN)
    result = d5_cli("list-plugins", "--check", "--json")
    assert result.exit_code == 1
    assert read_json(result.stdout)
    assert result.stderr.strip() == "d5: error: plugin check failed for: boom (failed)"


def test_check_passes_when_every_plugin_works(d5_cli, monkeypatch):
    monkeypatch.setenv("D5_LOAD_PLUGINS", "core")
    result = d5_cli("list-plugins", "--check")
    assert result.exit_code == 0, result.stderr


def test_debug_flag_lets_the_exception_through(d5_site, d5_cli):
    d5_site.add("d5-plugin-boom", entry_points={"d5.hooks": {"boom": "boom_mod"}}, **BROKEN)
    with pytest.raises(CheckFailed):
        d5_cli("--debug", "list-plugins", "--check")


def test_bad_option_is_a_one_line_usage_error(d5_cli):
    result = d5_cli("list-plugins", "--frobnicate")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "No such option '--frobnicate'" in result.stderr
    assert "d5 list-plugins --help" in result.stderr


def test_unknown_command_is_a_one_line_usage_error(d5_cli):
    result = d5_cli("frobnicate")
    assert result.exit_code == 2
    assert result.stderr.startswith("d5: error: No such command 'frobnicate'")
    assert result.stderr.count("\n") == 1


COMMANDS = """
import click
from d5core.hookspecs import hookimpl
d5_plugin_api = ">=1.0"

@click.command("{name}")
def cmd():
    click.echo("hello from {dist}")

@hookimpl
def d5_cli_commands():
    return [cmd]
"""


def _add_command_plugin(site, dist, module, name):
    site.add(
        dist,
        entry_points={"d5.hooks": {module: module}},
        modules={f"{module}.py": COMMANDS.format(name=name, dist=dist)},
    )


def test_plugins_add_subcommands(d5_site, d5_cli):
    _add_command_plugin(d5_site, "d5-plugin-greet", "greet_mod", "greet")
    assert "greet" in d5_cli("--help").stdout
    result = d5_cli("greet")
    assert (result.exit_code, result.stdout) == (0, "hello from d5-plugin-greet\n")


def test_a_taken_command_name_is_skipped_with_a_warning(d5_site, d5_cli):
    _add_command_plugin(d5_site, "d5-plugin-greet", "greet_mod", "greet")
    _add_command_plugin(d5_site, "d5-plugin-greet-too", "greet_too_mod", "greet")
    _add_command_plugin(d5_site, "d5-plugin-hijack", "hijack_mod", "list-plugins")
    result = d5_cli("greet")
    assert result.exit_code == 0
    assert "offers command 'greet', already taken by" in result.stderr
    assert "offers command 'list-plugins', already taken by d5 itself" in result.stderr


def test_a_plugin_failing_to_add_commands_does_not_stop_the_others(d5_site, d5_cli):
    _add_command_plugin(d5_site, "d5-plugin-greet", "greet_mod", "greet")
    d5_site.add(
        "d5-plugin-badcmds",
        entry_points={"d5.hooks": {"badcmds": "badcmds_mod"}},
        modules={
            "badcmds_mod.py": """
            from d5core.hookspecs import hookimpl
            d5_plugin_api = ">=1.0"

            @hookimpl
            def d5_cli_commands():
                raise RuntimeError("commands exploded")
            """
        },
    )
    with pytest.warns(PluginWarning, match="'d5-plugin-badcmds:badcmds' failed in d5_cli_commands"):
        result = d5_cli("greet")
    assert result.exit_code == 0


BENCH_GROUP = """
import click
from d5core.hookspecs import hookimpl
d5_plugin_api = ">=1.7"

@click.group("bench")
def bench():
    pass

@bench.command("{name}")
def cmd():
    click.echo("hello from {dist}")

@hookimpl
def d5_cli_commands():
    return [bench]
"""


def test_a_plugins_group_merges_into_d5s_group_of_the_same_name(d5_site, d5_cli):
    d5_site.add(
        "d5-plugin-benchmore",
        entry_points={"d5.hooks": {"benchmore": "benchmore_mod"}},
        modules={"benchmore_mod.py": BENCH_GROUP.format(name="greet", dist="benchmore")},
    )
    listed = d5_cli("bench", "--help").stdout
    assert all(name in listed for name in ("greet", "op", "net", "comm"))
    result = d5_cli("bench", "greet")
    assert (result.exit_code, result.stdout, result.stderr) == (0, "hello from benchmore\n", "")
    assert "--backends" in d5_cli("bench", "op", "--help").stdout


def test_a_plugins_subcommand_taking_one_of_d5s_is_skipped_with_a_warning(d5_site, d5_cli):
    d5_site.add(
        "d5-plugin-hijack",
        entry_points={"d5.hooks": {"hijack": "hijack_mod"}},
        modules={"hijack_mod.py": BENCH_GROUP.format(name="op", dist="hijack")},
    )
    result = d5_cli("bench", "op", "--help")
    assert result.exit_code == 0 and "--backends" in result.stdout
    assert (
        "plugin 'd5-plugin-hijack:hijack' offers command 'bench op', already taken by d5 "
        "itself; skipped" in result.stderr
    )
