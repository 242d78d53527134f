"""Write the top-level modules importable in this interpreter, one per line, sorted.

Each nox session runs it in its own virtualenv next to its JUnit report
(``.reports/<name>.modules.txt``), so that ``junit_summary.py`` can tell a skip for a module
the session lacks (legitimate) from a skip for a module the session has installed (a test
that cannot fail where it runs). Only the standard library is used, and nothing is
imported: the modules are found on ``sys.path`` the way ``import`` would find them.

Usage: ``python .ci/lane_modules.py OUTPUT``
"""

from __future__ import annotations

import pkgutil
import sys
from pathlib import Path

__all__ = ["importable_modules", "main"]


def importable_modules(path: list[str] | None = None) -> list[str]:
    """The names ``import NAME`` finds on ``path`` (``sys.path`` without this script's own
    folder by default), with the interpreter's built-in modules, sorted."""
    if path is None:
        here = str(Path(__file__).resolve().parent)
        path = [p for p in sys.path if p and str(Path(p).resolve()) != here]
    found = {module.name for module in pkgutil.iter_modules(path)}
    return sorted(found | set(sys.builtin_module_names))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python .ci/lane_modules.py OUTPUT", file=sys.stderr)
        return 2
    Path(argv[0]).write_text("".join(f"{name}\n" for name in importable_modules()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
