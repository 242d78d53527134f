"""The jax executor's entry of conformance/baseline.json: a fixed selection of onnx's
node cases (recurrent, attention, normalization, resizing, sampling, quantization and
index operators) passes as the baseline records, and the entry names the versions
installed here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import onnx

from d5core.api import get_plugin_manager
from d5core.testing.kernel import installed_versions

BASELINE = Path(__file__).resolve().parents[3] / "conformance" / "baseline.json"
#: Ten cases, one per family of the plugin's graph operators.
SELECTION = (
    "lstm_with_peepholes",
    "gru_seq_length",
    "rnn_seq_length",
    "layer_normalization_4d_axis_negative_1",
    "attention_4d_causal",
    "rotary_embedding",
    "resize_downsample_sizes_cubic_antialias",
    "gridsample_bicubic",
    "quantizelinear_axis",
    "scatternd",
)
PATTERN = "^test_(" + "|".join(SELECTION) + ")$"


def _entry() -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(BASELINE.read_text())["jax"]
    return entry


def test_the_baseline_lists_every_case_of_the_selection_as_passing() -> None:
    passing = set(_entry()["passing"])
    assert {f"test_{name}" for name in SELECTION} <= passing


def test_the_selection_passes_as_the_baseline_records(d5_cli: Any, tmp_path: Path) -> None:
    result = d5_cli(
        "conformance", "jax", "--pattern", PATTERN, "--baseline", str(BASELINE),
        "--db", str(tmp_path / "results.sqlite"), "--no-failures",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr


def test_the_jax_baseline_names_the_versions_installed_here() -> None:
    entry = _entry()
    distribution = get_plugin_manager().record("d5.frameworks", "jax").distribution
    assert entry["versions"] == {**installed_versions(distribution), "onnx": onnx.__version__}
    assert entry["passed"] == len(entry["passing"]) <= entry["total"]
