"""Write docs/plugins/hooks.md from the docstrings of d5's hook specifications.

Run ``python docs/gen_hook_reference.py`` after changing a hookspec; a test fails while
the checked-in reference differs from what this script produces.
"""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

from d5core._version import PLUGIN_API_VERSION
from d5core.hookspecs import PROJECT, SPEC_MODULES
from d5core.hookspecs._markers import PROPAGATES_ATTR

OUT = Path(__file__).resolve().parent / "plugins" / "hooks.md"

_FIELD = re.compile(r"^:(param (\w+)|return|raises \w+):\s*", re.M)
_VERSION = re.compile(r"^\.\. versionadded:: (\S+)\s*$", re.M)


def hooks_of(module: object) -> list[tuple[str, object]]:
    """The hook specification functions of ``module``, in source order."""
    marker = f"{PROJECT}_spec"
    found = [
        (name, func)
        for name, func in vars(module).items()
        if inspect.isfunction(func) and hasattr(func, marker)
    ]
    return sorted(found, key=lambda item: inspect.getsourcelines(item[1])[1])  # type: ignore[arg-type]


def _rst_to_md(text: str) -> str:
    text = re.sub(r":(?:class|func|data|meth):`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    text = _FIELD.sub(lambda m: f"- **{m.group(1).replace('param ', '')}**: ", text)
    return _VERSION.sub(lambda m: f"*Since plugin API {m.group(1)}.*", text)


def render() -> str:
    lines = [
        "# Hook reference",
        "",
        f"Generated from the hook specifications of plugin API {PLUGIN_API_VERSION} by",
        "`python docs/gen_hook_reference.py`; do not edit by hand.",
        "",
        "Implement a hook with `@hookimpl` from `d5core.api`. An implementation may take",
        "fewer arguments than the specification lists, never others. An implementation that",
        "raises is left out of the call and reported, naming the plugin and the hook, unless",
        "the hook is marked *propagates*. How hooks are called, in which order, and how clashes",
        "are reported: [README.md](README.md#calling-hooks).",
        "",
    ]
    for module in SPEC_MODULES:
        short = module.__name__.rsplit(".", 1)[-1]
        lines += [f"## `{short}`", "", _rst_to_md(inspect.getdoc(module) or ""), ""]
        for name, func in hooks_of(module):
            opts = getattr(func, f"{PROJECT}_spec")
            sig = str(inspect.signature(func)).replace("'", "")
            lines += [f"### `{name}{sig}`", ""]
            if opts.get("firstresult"):
                lines += ["*firstresult*: the call stops at the first non-`None` result.", ""]
            if getattr(func, PROPAGATES_ATTR, False):
                lines += [
                    "*propagates*: an implementation's exception ends the call and reaches "
                    "the caller.",
                    "",
                ]
            lines += [_rst_to_md(inspect.getdoc(func) or ""), ""]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    OUT.write_text(render())
    sys.stdout.write(f"wrote {OUT}\n")
