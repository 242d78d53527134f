"""The test distribution ``d5-plugin-qa`` (tests/fixtures/metric_plugin): its metrics,
installed into a ``d5_site`` under the entry-point names a test chooses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

MODULE = Path(__file__).resolve().parent / "fixtures" / "metric_plugin" / "d5_qa_metrics.py"


def add_qa_plugin(site: Any, metrics: dict[str, str]) -> Any:
    """Install ``d5-plugin-qa`` into ``site`` with ``metrics`` (entry-point name -> class
    name in ``d5_qa_metrics``) in ``d5.metrics``; return ``site``."""
    site.add(
        "d5-plugin-qa",
        entry_points={
            "d5.hooks": {"qa": "d5_qa_metrics"},
            "d5.metrics": {name: f"d5_qa_metrics:{cls}" for name, cls in metrics.items()},
        },
        modules={"d5_qa_metrics.py": MODULE.read_text()},
    )
    return site
