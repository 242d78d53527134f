"""Plugins import d5 through its public surfaces only: d5core.api (the kernel's contract)
and d5core.onnx (the ONNX helper library); their tests may use d5core.testing too.

Everything else in d5core is internal and may change without notice; this reads the
imports of d5's own plugins and their tests, d5-kernels and its tests, the example plugin
and the plugins of docs/plugins, which plugin authors copy, so that none of them leans on
an internal module.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The packages a plugin's code may import from d5core (with their modules).
PUBLIC = ("d5core.api", "d5core.onnx")
#: And what its tests may import besides: the pytest fixtures and the test kits.
TESTING = "d5core.testing"
HINT = "d5core.api, d5core.onnx or (in tests) d5core.testing"


def plugin_sources(root: Path = ROOT) -> list[Path]:
    """Every Python file of a plugin package and of its tests, of d5-kernels (package and
    tests), and every file of the example plugins (their tests included)."""
    files = [p for pkg in root.glob("plugins/*/d5_plugin_*") for p in pkg.rglob("*.py")]
    files += [p for tests in root.glob("plugins/*/tests") for p in tests.rglob("*.py")]
    for folder in ("kernels/d5_kernels", "kernels/tests"):
        files += (root / folder).rglob("*.py")
    for example in (
        "tests/example_plugin",
        "docs/plugins/template",
        "docs/plugins/worked_example",
        "docs/plugins/algorithm_example",
    ):
        files += (root / example).rglob("*.py")
    return sorted(files)


def is_test(path: Path) -> bool:
    """Whether ``path`` is test code: in a ``tests`` folder, or a ``test_*.py`` or
    ``conftest.py`` file."""
    return (
        path.parent.name == "tests" or path.name.startswith("test_") or path.name == "conftest.py"
    )


def allowed(module: str, *, test: bool) -> bool:
    """Whether a plugin's code (``test``: its tests) may import ``module``."""
    if any(module == public or module.startswith(public + ".") for public in PUBLIC):
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
                if node.module == "d5core" and alias.name in ("api", "onnx", "testing"):
                    yield node.lineno, f"d5core.{alias.name}"
                else:
                    yield node.lineno, node.module


def internal_imports(path: Path, root: Path = ROOT) -> list[str]:
    """``file:line: imports module`` for each import of a d5core module the file may not
    use."""
    test = is_test(path)
    return [
        f"{path.relative_to(root)}:{line}: imports {module}; use {HINT}"
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
        "plugins/d5-plugin-numpy/tests/test_numpy_executor.py",
        "plugins/d5-plugin-mxnet/tests/test_mx_training.py",
        "kernels/d5_kernels/ops/conv.py",
        "kernels/tests/test_native_plugin.py",
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
        ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from d5core.onnx.network import Network\n",
         [(3, "d5core.onnx.network")]),
        ("from d5core.testing import FakeSite\n", [(1, "d5core.testing")]),
        ("from d5core import testing\n", [(1, "d5core.testing")]),
        ("from d5core.onnx import conv_window\n", [(1, "d5core.onnx")]),
        ("from d5core import onnx\n", [(1, "d5core.onnx")]),
        ("import d5core.lv1.zoo as zoo\n", [(1, "d5core.lv1.zoo")]),
        ("from .ops import base\nimport numpy\n", []),
    ],
)  # fmt: skip
def test_the_scan_finds_every_import_of_d5core(source, found):
    assert list(d5core_imports(source)) == found


def test_only_tests_may_import_the_testing_kits(tmp_path):
    (tmp_path / "pkg" / "tests").mkdir(parents=True)
    testing = "from d5core.testing import FakeSite\nfrom d5core.testing.networks import mlp\n"
    (tmp_path / "pkg" / "mod.py").write_text(testing)
    (tmp_path / "pkg" / "tests" / "test_mod.py").write_text(testing)
    (tmp_path / "pkg" / "tests" / "helpers.py").write_text("from d5core.bus import Event\n")
    assert internal_imports(tmp_path / "pkg" / "mod.py", tmp_path) == [
        f"pkg/mod.py:1: imports d5core.testing; use {HINT}",
        f"pkg/mod.py:2: imports d5core.testing.networks; use {HINT}",
    ]
    assert internal_imports(tmp_path / "pkg" / "tests" / "test_mod.py", tmp_path) == []
    assert internal_imports(tmp_path / "pkg" / "tests" / "helpers.py", tmp_path) == [
        f"pkg/tests/helpers.py:1: imports d5core.bus; use {HINT}"
    ]


def test_plugin_code_and_tests_may_import_the_api_and_the_onnx_library(tmp_path):
    (tmp_path / "pkg" / "tests").mkdir(parents=True)
    public = (
        "from d5core.api import hookimpl\nfrom d5core.onnx import conv_window\n"
        "from d5core.onnx.windows import SpatialWindow\nfrom d5core import api, onnx\n"
    )
    (tmp_path / "pkg" / "mod.py").write_text(public)
    (tmp_path / "pkg" / "tests" / "test_mod.py").write_text(public)
    assert internal_imports(tmp_path / "pkg" / "mod.py", tmp_path) == []
    assert internal_imports(tmp_path / "pkg" / "tests" / "test_mod.py", tmp_path) == []


def test_the_scan_catches_an_internal_import_planted_in_a_plugin_test_or_a_kernel(tmp_path):
    """A plugin's test, d5-kernels' test and d5-kernels' package each importing a renamed
    internal module are reported by the same scan that runs over the real tree."""
    planted = {
        "plugins/d5-plugin-demo/d5_plugin_demo/__init__.py": "",
        "plugins/d5-plugin-demo/tests/test_demo.py": "from d5core.lv1.runner import with_loss\n",
        "kernels/tests/test_native_demo.py": "def f():\n    from d5core.lv0 import runner\n",
        "kernels/d5_kernels/ops/demo.py": "from d5core.levels.operators import Operator\n",
    }
    for rel, source in planted.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(source)
    found = [line for path in plugin_sources(tmp_path) for line in internal_imports(path, tmp_path)]
    assert found == [
        f"kernels/d5_kernels/ops/demo.py:1: imports d5core.levels.operators; use {HINT}",
        f"kernels/tests/test_native_demo.py:2: imports d5core.lv0; use {HINT}",
        f"plugins/d5-plugin-demo/tests/test_demo.py:1: imports d5core.lv1.runner; use {HINT}",
    ]


def test_plugins_import_no_internal_d5core_module():
    found = [line for path in plugin_sources() for line in internal_imports(path)]
    assert found == [], "plugins import d5core's internals:\n" + "\n".join(found)
