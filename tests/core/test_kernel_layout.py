"""The kernel stays small and reaches the level packages only through hooks: no kernel
module imports a level package (``d5core.builtin`` lists them as internal plugins and
imports none), no module under ``d5core/cli`` touches the results store, and the
kernel keeps to its line budget (docs/architecture.md)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import d5core

ROOT = Path(d5core.__file__).parent
#: The internal plugin packages, and the two that are neither kernel nor level.
LEVELS = ("lv0", "lv1", "lv2", "lv3", "loadgen", "report", "teamstore", "trace")
NOT_KERNEL = (*LEVELS, "onnx", "testing")
KERNEL_BUDGET = 16_000
STORE_CALLS = re.compile(
    r"ResultsStore|store\.run\(|\.add_measurement\(|\.add_metric\(|\.begin_run\(|\.finish_run\("
)


def kernel_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if p.relative_to(root).parts[0] not in NOT_KERNEL)


def level_imports(path: Path) -> list[str]:
    """``file:line: module`` for each import of a level package in ``path``, type-only
    imports included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            if parts[0] == "d5core" and len(parts) > 1 and parts[1] in LEVELS:
                found.append(f"{path.name}:{node.lineno}: {name}")
                break
    return found


def test_no_kernel_module_imports_a_level_package():
    assert [hit for path in kernel_files() for hit in level_imports(path)] == []


def test_the_import_scan_catches_a_planted_import_of_a_level(tmp_path):
    planted = tmp_path / "planted.py"
    planted.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from d5core.lv1.runner import Network\n"
        "def f():\n    import d5core.report.build\n    from d5core import lv0\n"
    )
    assert level_imports(planted) == [
        "planted.py:3: d5core.lv1.runner",
        "planted.py:5: d5core.report.build",
        "planted.py:6: d5core.lv0",
    ]


def test_the_internal_plugins_are_every_level_package_and_the_kernel():
    from d5core.builtin import INTERNAL_PLUGINS

    modules = {value.partition(":")[0] for _, value in INTERNAL_PLUGINS}
    assert modules == {"d5core.builtin", *(f"d5core.{level}.plugin" for level in LEVELS)}


#: Modules that parse a command line and render: the kernel's ``cli/`` and each level's
#: command modules.
COMMAND_MODULES = sorted(
    {*(ROOT / "cli").glob("*.py"), *ROOT.rglob("*_cmd.py"), ROOT / "report" / "command.py"}
)
#: The runners the commands call: they own the runs and their store transactions.
RUNNERS = sorted(
    {*ROOT.rglob("runner.py"), *ROOT.rglob("*_run.py"), ROOT / "loadgen" / "recipe.py"}
)


@pytest.mark.parametrize("path", COMMAND_MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_command_module_writes_to_the_store_its_runner_does(path):
    assert STORE_CALLS.findall(path.read_text()) == []


@pytest.mark.parametrize("path", RUNNERS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_runner_imports_a_command_module(path):
    imported = [
        node.module
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module
    ]
    assert [m for m in imported if m.endswith("_cmd") or m.startswith("d5core.cli.")] == []


def test_the_kernel_keeps_to_its_line_budget():
    lines = sum(len(p.read_text().splitlines()) for p in kernel_files())
    assert lines <= KERNEL_BUDGET, (
        f"the kernel has {lines} lines, over its budget of {KERNEL_BUDGET}: move level "
        "code into its level package (docs/architecture.md, 'Where does X go')"
    )
