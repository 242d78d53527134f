"""Each plugin's declared plugin-API range starts no lower than what the plugin uses.

A plugin says which plugin APIs it supports (``d5_plugin_api = ">=1.5,<2"`` in its hook
module). d5 refuses a plugin outside the range, but a lower bound that is too low lets a
plugin load into an older core that lacks a name it imports or a hook it implements, and
it then fails on import instead of with d5's one-line refusal. This reads each plugin
package's imports from :mod:`d5core.api` and :mod:`d5core.onnx` and its ``@hookimpl``
functions, and holds the range's lower bound against the version each was added in
(:mod:`api_history`, and the ``.. versionadded::`` of the hookspecs).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest
from api_history import (
    NAMES_ADDED_IN,
    ONNX_LIBRARY_ADDED_IN,
    hooks_added_in,
    version_key,
)
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from d5core import PLUGIN_API_VERSION

ROOT = Path(__file__).resolve().parents[2]
#: The hook module of every plugin d5 ships or shows plugin authors.
PLUGIN_MODULES = sorted(
    [
        *ROOT.glob("plugins/*/d5_plugin_*/plugin.py"),
        ROOT / "kernels/d5_kernels/plugin.py",
        ROOT / "tests/example_plugin/d5_loadavg/plugin.py",
        ROOT / "docs/plugins/template/d5_plugin_template/plugin.py",
        ROOT / "docs/plugins/worked_example/d5_tinygemm/plugin.py",
        ROOT / "docs/plugins/algorithm_example/d5_polyak/plugin.py",
    ]
)


@dataclass(frozen=True)
class Need:
    """One thing a plugin uses and the plugin API that first offered it."""

    version: str
    what: str
    where: str


def declared_range(plugin_module: Path) -> str:
    """The string assigned to ``d5_plugin_api`` at the top level of ``plugin_module``."""
    for node in ast.parse(plugin_module.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "d5_plugin_api" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            assert isinstance(value, str), f"{plugin_module}: d5_plugin_api is not a string"
            return value
    raise AssertionError(f"{plugin_module} declares no d5_plugin_api")


def lower_bound(spec: str) -> str:
    """The lowest ``MAJOR.MINOR`` a range admits (``">=1.5,<2"`` -> ``"1.5"``); ``"1.0"``
    when it names none."""
    bounds = [Version(s.version) for s in SpecifierSet(spec) if s.operator in (">=", "==", "~=")]
    bounds += [Version(s.version) for s in SpecifierSet(spec) if s.operator == ">"]
    if not bounds:
        return "1.0"
    low = min(bounds)
    return f"{low.major}.{low.minor}"


def _is_hookimpl(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return (isinstance(target, ast.Name) and target.id == "hookimpl") or (
        isinstance(target, ast.Attribute) and target.attr == "hookimpl"
    )


def _onnx_names() -> set[str]:
    import d5core.onnx

    return set(d5core.onnx.__all__)


def needs_of_source(source: str, where: str, hooks: dict[str, str]) -> list[Need]:
    """What one module of a plugin uses from d5core, each with the version it needs."""
    needs: list[Need] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            module = node.module
            names = [alias.name for alias in node.names]
            if module == "d5core" and "api" in names:
                needs.append(Need(NAMES_ADDED_IN["hookimpl"], "d5core.api", where))
            elif module == "d5core.api":
                for name in names:
                    version = NAMES_ADDED_IN.get(name)
                    if version is None and name in _onnx_names():
                        version = ONNX_LIBRARY_ADDED_IN  # a newer helper, deprecated path
                    assert version is not None, (
                        f"{where}: d5core.api.{name} is not in api_history"
                    )
                    needs.append(Need(version, f"d5core.api.{name}", where))
            elif module == "d5core.onnx" or module.startswith("d5core.onnx."):
                needs += [Need(ONNX_LIBRARY_ADDED_IN, f"{module}.{n}", where) for n in names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "d5core.onnx" or alias.name.startswith("d5core.onnx."):
                    needs.append(Need(ONNX_LIBRARY_ADDED_IN, alias.name, where))
                elif alias.name == "d5core.api":
                    needs.append(Need(NAMES_ADDED_IN["hookimpl"], "d5core.api", where))
        elif isinstance(node, ast.FunctionDef) and any(map(_is_hookimpl, node.decorator_list)):
            version = hooks.get(node.name)
            assert version is not None, f"{where}: {node.name} is not a d5 hook"
            needs.append(Need(version, f"hook {node.name}", where))
    return needs


def package_needs(package: Path, root: Path = ROOT) -> list[Need]:
    """What every module of a plugin package (its tests left out) uses from d5core."""
    hooks = hooks_added_in()
    needs: list[Need] = []
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package)
        if "tests" in relative.parts or path.name.startswith("test_"):
            continue
        needs += needs_of_source(path.read_text(), str(path.relative_to(root)), hooks)
    return needs


def range_problem(plugin_module: Path, root: Path = ROOT) -> str | None:
    """Why the range ``plugin_module`` declares is wrong for its package, or None."""
    spec = declared_range(plugin_module)
    low = lower_bound(spec)
    name = plugin_module.relative_to(root)
    if version_key(low) > version_key(PLUGIN_API_VERSION):
        return f"{name}: d5_plugin_api = {spec!r} starts above this core's {PLUGIN_API_VERSION}"
    needs = package_needs(plugin_module.parent, root)
    if not needs:
        return None
    required = max((n.version for n in needs), key=version_key)
    if version_key(low) >= version_key(required):
        return None
    first_use: dict[str, Need] = {}
    for need in needs:
        if version_key(need.version) > version_key(low):
            first_use.setdefault(need.what, need)
    by_name = sorted(first_use.values(), key=lambda n: n.what)
    newest_first = sorted(by_name, key=lambda n: version_key(n.version), reverse=True)
    too_new = [f"{n.what} ({n.version}, {n.where})" for n in newest_first]
    shown = ", ".join(too_new[:5]) + (f" and {len(too_new) - 5} more" if len(too_new) > 5 else "")
    return (
        f"{name}: d5_plugin_api = {spec!r} admits {low}, but the plugin needs >={required}: {shown}"
    )


def test_the_ranges_checked_include_every_plugin_and_example() -> None:
    names = {str(p.relative_to(ROOT)) for p in PLUGIN_MODULES}
    assert len(PLUGIN_MODULES) >= 10 and all(p.is_file() for p in PLUGIN_MODULES)
    for expected in (
        "plugins/d5-plugin-torch/d5_plugin_torch/plugin.py",
        "plugins/d5-plugin-mxnet/d5_plugin_mxnet/plugin.py",
        "kernels/d5_kernels/plugin.py",
        "tests/example_plugin/d5_loadavg/plugin.py",
    ):
        assert expected in names


def test_every_name_of_the_api_and_the_onnx_library_has_a_version() -> None:
    import d5core.api as api
    import d5core.onnx as onnx

    for name in api.__all__:
        assert name in NAMES_ADDED_IN, f"d5core.api.{name}: add it to NAMES_ADDED_IN"
    moved = {name for name, version in NAMES_ADDED_IN.items() if name not in api.__all__}
    assert moved <= set(onnx.__all__), "a name left d5core.api without going to d5core.onnx"
    newest = max(NAMES_ADDED_IN.values(), key=version_key)
    assert version_key(newest) <= version_key(PLUGIN_API_VERSION)
    assert version_key(ONNX_LIBRARY_ADDED_IN) <= version_key(PLUGIN_API_VERSION)


def test_every_hookspec_says_when_it_was_added() -> None:
    hooks = hooks_added_in()
    assert hooks["d5_report_figures"] == "1.6" and hooks["d5_custom_op_glue"] == "1.3"
    assert all(version_key(v) <= version_key(PLUGIN_API_VERSION) for v in hooks.values())


@pytest.mark.parametrize(
    ("spec", "low"),
    [(">=1.5,<2", "1.5"), (">=1.0,<2", "1.0"), ("<2", "1.0"), ("==1.7", "1.7"), ("~=1.4", "1.4")],
)
def test_the_lower_bound_is_read_from_the_range(spec: str, low: str) -> None:
    assert lower_bound(spec) == low


def _plant(tmp_path: Path, spec: str, body: str) -> Path:
    package = tmp_path / "plugins" / "d5-plugin-demo" / "d5_plugin_demo"
    (package / "tests").mkdir(parents=True)
    (package / "plugin.py").write_text(
        f"from d5core.api import hookimpl\n\nd5_plugin_api = {spec!r}\n\n{body}"
    )
    (package / "tests" / "test_demo.py").write_text("from d5core.onnx import conv_window\n")
    return package / "plugin.py"


def test_a_range_below_an_imported_name_or_an_implemented_hook_is_caught(tmp_path: Path) -> None:
    onnx_import = "from d5core.onnx import conv_window\n"
    plugin = _plant(tmp_path, ">=1.3,<2", onnx_import)
    problem = range_problem(plugin, tmp_path)
    assert problem is not None
    assert "admits 1.3, but the plugin needs >=1.7: d5core.onnx.conv_window (1.7," in problem
    report_hook = "@hookimpl\ndef d5_report_figures(runs, store):\n    return None\n"
    problem = range_problem(_plant(tmp_path / "b", ">=1.1,<2", report_hook), tmp_path / "b")
    assert problem is not None and "hook d5_report_figures (1.6," in problem
    api_name = "from d5core.api import ReportRun\n"
    problem = range_problem(_plant(tmp_path / "c", ">=1.5,<2", api_name), tmp_path / "c")
    assert problem is not None and "d5core.api.ReportRun (1.6," in problem


def test_a_range_that_covers_what_the_plugin_uses_passes_and_tests_do_not_count(
    tmp_path: Path,
) -> None:
    plugin = _plant(tmp_path, ">=1.1,<2", "@hookimpl\ndef d5_environment_info():\n    return {}\n")
    assert range_problem(plugin, tmp_path) is None


@pytest.mark.parametrize("plugin_module", PLUGIN_MODULES, ids=lambda p: p.parent.name)
def test_each_plugin_declares_a_range_no_lower_than_what_it_uses(plugin_module: Path) -> None:
    problem = range_problem(plugin_module)
    assert problem is None, problem
