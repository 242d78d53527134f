"""The cheating backends of tests/fixtures/cheaters, installed into a fake site for
subprocess tests of ``d5 bench`` and ``d5 audit``."""

from __future__ import annotations

from pathlib import Path

from d5core.testing import make_distribution

MODULE = Path(__file__).resolve().parent / "fixtures" / "cheaters" / "d5_cheaters.py"
NAMES = ("caching", "stale", "idle")


def install_cheaters(site: Path) -> Path:
    """Write ``d5-plugin-cheaters`` (its operator backends and executors) into ``site``."""
    make_distribution(
        site,
        "d5-plugin-cheaters",
        entry_points={
            "d5.hooks": {"cheaters": "d5_cheaters_plugin"},
            "d5.operators": {n: f"d5_cheaters:{n.title()}Backend" for n in NAMES},
            "d5.frameworks": {n: f"d5_cheaters:{n.title()}Executor" for n in NAMES},
        },
        modules={
            "d5_cheaters.py": MODULE.read_text(),
            "d5_cheaters_plugin.py": 'd5_plugin_api = ">=1.0,<2"\n',
        },
    )
    return site
