"""Plugins import d5 through d5core.api only (and their tests d5core.testing too).

Everything else in d5core is internal and may change without notice; this reads the
imports of d5's own plugins, the example plugin and the plugins of docs/plugins, which
plugin authors copy, so that none of them leans on an internal module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The module a plugin's code may import from d5core.
PUBLIC = "d5core.api"
#: And what its tests may import besides: the pytest fixtures and test networks.
TESTING = "d5core.testing"


def plugin_sources() -> list[Path]:
    """Every Python file of a plugin package, and every file of the example plugins
    (their tests included)."""
    files = [p for pkg in ROOT.glob("plugins/*/d5_plugin_*") for p in pkg.rglob("*.py")]
    for example in ("tests/example_plugin", "docs/plugins/template", "docs/plugins/worked_example"):
        files += (ROOT / example).rglob("*.py")
    return sorted(files)


def is_test(path: Path) -> bool:
    """Whether ``path`` is test code: in a ``tests`` folder, or a ``test_*.py`` or
    ``conftest.py`` file."""
    return (
        path.parent.name == "tests" or path.name.startswith("test_") or path.name == "conftest.py"
    )


def allowed(module: str, *, test: bool) -> bool:
    """Whether a plugin's code (``test``: its tests) may import ``module``."""
    if module == PUBLIC:
        return True
    return test and (module == TESTING or module.startswith(TESTING + "."))


def d5core_imports(source: str) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of every import of d5core in ``source``, wherever it stands
    (in a function, under ``TYPE_CHECKING``); ``from d5core import x`` is module
    ``d5core``, and ``from d5core import api`` is ``d5core.api``."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "d5core":
                    yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] != "d5core":
                continue
            for alias in node.names:
                if node.module == "d5core" and alias.name in ("api", "testing"):
                    yield node.lineno, f"d5core.{alias.name}"
                else:
                    yield node.lineno, node.module


def internal_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: imports module`` for each import of a d5core module the file may not
    use."""
    test = is_test(path)
    return [
        f"{path.relative_to(root)}:{line}: imports {module}; use d5core.api"
        for line, module in d5core_imports(path.read_text())
        if not allowed(module, test=test)
    ]


def test_the_scan_covers_every_plugin_and_example():
    files = {str(p.relative_to(ROOT)) for p in plugin_sources()}
    for expected in (
        "plugins/d5-plugin-numpy/d5_plugin_numpy/executor.py",
        "plugins/d5-plugin-torch/d5_plugin_torch/ops/_spatial.py",
        "plugins/d5-plugin-onnxruntime/d5_plugin_onnxruntime/plugin.py",
        "plugins/d5-plugin-mpi/d5_plugin_mpi/schemes/_common.py",
        "tests/example_plugin/d5_loadavg/plugin.py",
        "docs/plugins/template/tests/test_template_components.py",
        "docs/plugins/worked_example/d5_tinygemm/executor.py",
    ):
        assert expected in files


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ("from d5core.api import hookimpl\n", [(1, "d5core.api")]),
        ("from d5core import api\n", [(1, "d5core.api")]),
        ("import d5core.api\n", [(1, "d5core.api")]),
        ("from d5core.levels.operators import Operator\n", [(1, "d5core.levels.operators")]),
        ("from d5core import UsageError\n", [(1, "d5core")]),
        ("import d5core.bus as bus\n", [(1, "d5core.bus")]),
        ("def f():\n    from d5core.plugins.manager import get_plugin_manager\n",
         [(2, "d5core.plugins.manager")]),
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from d5core.networks import Network\n",
         [(3, "d5core.networks")]),
        ("from d5core.testing import FakeSite\n", [(1, "d5core.testing")]),
        ("from d5core import testing\n", [(1, "d5core.testing")]),
        ("from .ops import base\nimport numpy\n", []),
    ],
)  # fmt: skip
def test_the_scan_finds_every_import_of_d5core(source, found):
    assert list(d5core_imports(source)) == found


def test_only_tests_may_import_the_testing_fixtures(tmp_path):
    (tmp_path / "pkg" / "tests").mkdir(parents=True)
    testing = "from d5core.testing import FakeSite\nfrom d5core.testing.networks import mlp\n"
    (tmp_path / "pkg" / "mod.py").write_text(testing)
    (tmp_path / "pkg" / "tests" / "test_mod.py").write_text(testing)
    (tmp_path / "pkg" / "tests" / "helpers.py").write_text("from d5core.bus import Event\n")
    assert internal_imports(tmp_path / "pkg" / "mod.py", tmp_path) == [
        "pkg/mod.py:1: imports d5core.testing; use d5core.api",
        "pkg/mod.py:2: imports d5core.testing.networks; use d5core.api",
    ]
    assert internal_imports(tmp_path / "pkg" / "tests" / "test_mod.py", tmp_path) == []
    assert internal_imports(tmp_path / "pkg" / "tests" / "helpers.py", tmp_path) == [
        "pkg/tests/helpers.py:1: imports d5core.bus; use d5core.api"
    ]


def test_plugins_import_no_internal_d5core_module():
    found = [line for path in plugin_sources() for line in internal_imports(path)]
    assert found == [], "plugins import d5core's internals:\n" + "\n".join(found)
