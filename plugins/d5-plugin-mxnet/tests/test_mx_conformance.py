"""The mxnet executor's entry of conformance/baseline.json, recorded in MXNet's own
environment: the pass count may not fall below it, and it must name the versions
installed here (the integration session, which has no MXNet, leaves this entry to this
file)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx

from d5core.api import get_plugin_manager
from d5core.testing.kernel import installed_versions

BASELINE = Path(__file__).resolve().parents[3] / "conformance" / "baseline.json"


def test_mxnet_pass_count_does_not_fall_below_the_checked_in_baseline(d5_cli: Any) -> None:
    result = d5_cli("conformance", "mxnet", "--baseline", str(BASELINE), "--no-failures")
    assert result.exit_code == 0, result.stderr


def test_mxnet_baseline_matches_the_versions_installed_in_its_environment() -> None:
    entry = json.loads(BASELINE.read_text())["mxnet"]
    distribution = get_plugin_manager().record("d5.frameworks", "mxnet").distribution
    assert entry["versions"] == {**installed_versions(distribution), "onnx": onnx.__version__}
    assert entry["passed"] == len(entry["passing"]) <= entry["total"]
