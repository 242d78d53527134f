"""Inference under load: MLPerf LoadGen's scenarios on any graph executor.

- :mod:`d5core.loadgen.settings`: :class:`ScenarioSettings`, the scenarios and defaults;
- :mod:`d5core.loadgen.sut`: the system under test and the query sample library;
- :mod:`d5core.loadgen.loadgen`: :func:`run_scenario` (one executor, in a fresh worker
  process) and :class:`ScenarioResult`, parsed from LoadGen's logs;
- :mod:`d5core.loadgen.store`: :func:`store_scenario`, results and log artifacts.

Names are imported lazily: importing this package loads neither numpy nor LoadGen, so
the worker process can pin its threads first.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "SCENARIOS",
    "ScenarioFailed",
    "ScenarioResult",
    "ScenarioSettings",
    "artifacts_dir",
    "make_sut",
    "run_scenario",
    "sample_library",
    "store_scenario",
]

_WHERE = {
    "SCENARIOS": "settings",
    "ScenarioSettings": "settings",
    "ScenarioFailed": "sut",
    "make_sut": "sut",
    "sample_library": "sut",
    "ScenarioResult": "loadgen",
    "run_scenario": "loadgen",
    "artifacts_dir": "store",
    "store_scenario": "store",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
