"""Every hook specification is documented the way plugin authors need, and the generated
reference in docs/plugins/hooks.md is current."""

from __future__ import annotations

import inspect
import runpy
from pathlib import Path

import pytest

from d5core.hookspecs import PROJECT, SPEC_MODULES

ROOT = Path(__file__).resolve().parents[2]
SPECS = [
    (f"{module.__name__.rsplit('.', 1)[-1]}.{name}", func)
    for module in SPEC_MODULES
    for name, func in vars(module).items()
    if inspect.isfunction(func) and hasattr(func, f"{PROJECT}_spec")
]


def test_there_are_hooks_for_every_level():
    modules = {name.split(".")[0] for name, _ in SPECS}
    expected = {"plugin", "operators", "networks", "training", "distributed", "metrics"}
    assert expected | {"results", "cli"} <= modules


@pytest.mark.parametrize(("name", "func"), SPECS, ids=[n for n, _ in SPECS])
def test_hookspec_is_fully_documented(name, func):
    doc = inspect.getdoc(func) or ""
    assert func.__name__.startswith("d5_"), f"{name}: hooks are named d5_*"
    assert len(doc.splitlines()) >= 3, f"{name} has no docstring worth the name"
    for param in inspect.signature(func).parameters:
        assert f":param {param}:" in doc, f"{name} does not document its argument {param!r}"
    assert ":return:" in doc or "Return values are ignored" in doc, (
        f"{name}: what does a return mean?"
    )
    assert ".. versionadded::" in doc, f"{name} does not say since which plugin API version"
    firstresult = getattr(func, f"{PROJECT}_spec").get("firstresult", False)
    if firstresult:
        assert "firstresult: stops at the first non-``None`` result" in doc, name
    else:
        assert "Not firstresult" in doc or "Return values are ignored" in doc, name


@pytest.mark.parametrize("module", SPEC_MODULES, ids=lambda m: m.__name__)
def test_hookspec_modules_export_exactly_their_hooks(module):
    hooks = {n for n, f in vars(module).items() if hasattr(f, f"{PROJECT}_spec")}
    assert set(module.__all__) == hooks
    assert inspect.getdoc(module)


def test_generated_hook_reference_is_up_to_date():
    generator = runpy.run_path(str(ROOT / "docs" / "gen_hook_reference.py"))
    current = (ROOT / "docs" / "plugins" / "hooks.md").read_text()
    assert current == generator["render"](), "run: python docs/gen_hook_reference.py"
    for name, _ in SPECS:
        assert f"### `{name.split('.')[1]}(" in current
