"""pytest fixtures for testing d5 plugins, loaded through the ``pytest11`` entry point.

A plugin author tests a plugin in isolation by registering it on an empty manager::

    def test_my_hook(d5_plugin_manager):
        import my_plugin.plugin as plugin
        d5_plugin_manager.register(plugin)
        assert d5_plugin_manager.hook.d5_environment_info() == [{"mine": 1}]

and runs the command line against that manager with ``d5_cli``. ``d5_site`` installs
fake distributions (metadata and modules, no build) on ``sys.path`` for discovery tests.

Nothing heavy is imported at module level: pytest loads this module in every session of
an environment where d5core is installed.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from d5core.plugins import PluginManager

__all__ = [
    "CliResult",
    "FakeSite",
    "d5_cli",
    "d5_plugin_manager",
    "d5_site",
    "make_distribution",
]


@dataclass
class CliResult:
    """The outcome of one in-process ``d5`` invocation."""

    exit_code: int
    stdout: str
    stderr: str


def make_distribution(
    site: Path,
    name: str,
    *,
    version: str = "0.1.0",
    entry_points: Mapping[str, Mapping[str, str]] | None = None,
    requires: Sequence[str] = (),
    modules: Mapping[str, str] | None = None,
) -> Path:
    """Write an installed-looking distribution into the directory ``site``.

    :param name: the distribution name, for example ``"d5-plugin-demo"``.
    :param entry_points: ``{group: {name: "module:attr"}}``.
    :param requires: ``Requires-Dist`` lines.
    :param modules: ``{relative path: source}``, for example
        ``{"demo_plugin.py": "from d5core.hookspecs import hookimpl ..."}``.
    :return: the ``.dist-info`` directory written.
    """
    site.mkdir(parents=True, exist_ok=True)
    dist_info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir(exist_ok=True)
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    (dist_info / "METADATA").write_text("\n".join(meta) + "\n")
    lines: list[str] = []
    for group, entries in (entry_points or {}).items():
        lines.append(f"[{group}]")
        lines += [f"{ep_name} = {value}" for ep_name, value in entries.items()]
        lines.append("")
    (dist_info / "entry_points.txt").write_text("\n".join(lines))
    for rel, source in (modules or {}).items():
        target = site / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(textwrap.dedent(source))
    (dist_info / "RECORD").write_text("")
    return dist_info


class FakeSite:
    """A directory on ``sys.path`` holding fake distributions made by :func:`make_distribution`."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def add(self, name: str, **kwargs: object) -> Path:
        """Install a fake distribution; see :func:`make_distribution` for the arguments."""
        dist_info = make_distribution(self.path, name, **kwargs)  # type: ignore[arg-type]
        importlib.invalidate_caches()
        return dist_info

    def manager(self, environ: Mapping[str, str] | None = None) -> PluginManager:
        """A fresh manager that discovers what is installed now, this site included."""
        from d5core.plugins import PluginManager

        return PluginManager(environ if environ is not None else {})


@pytest.fixture
def d5_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSite]:
    """A fresh directory at the front of ``sys.path`` to install fake plugins into."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    before = set(sys.modules)
    yield FakeSite(site)
    for mod in set(sys.modules) - before:
        origin = getattr(sys.modules[mod], "__file__", None) or ""
        if origin.startswith(str(site)):
            del sys.modules[mod]


@pytest.fixture
def d5_plugin_manager() -> Iterator[PluginManager]:
    """An empty plugin manager, installed as the process-wide one for the test.

    Register the plugin under test with ``d5_plugin_manager.register(module)``; hooks
    and commands of other installed plugins do not interfere. Only d5's internal
    ``builtins`` plugin is there, as in every manager: the zoo models, passes, suites and
    schedules d5 itself offers.
    """
    from d5core.plugins import PluginManager, reset_plugin_manager

    manager = PluginManager({}, discover_installed=False)
    reset_plugin_manager(manager)
    try:
        yield manager
    finally:
        reset_plugin_manager(None)


@pytest.fixture
def d5_cli() -> Callable[..., CliResult]:
    """Run the ``d5`` command line in-process: ``d5_cli("list-plugins", "--json")``.

    It uses whatever process-wide plugin manager is installed (see
    :func:`d5_plugin_manager`) and returns a :class:`CliResult`.
    """
    from d5core.cli.app import D5Group, cli, run

    def invoke(*args: str) -> CliResult:
        out, err = io.StringIO(), io.StringIO()
        if isinstance(cli, D5Group):
            cli._plugin_commands = None
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(list(args))
        return CliResult(code, out.getvalue(), err.getvalue())

    return invoke
