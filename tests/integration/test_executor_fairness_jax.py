"""``benchmarks/executor_fairness.py``'s JAX rows (issue 31): d5's ``jax`` executor
against lenet5 and resnet20 written directly in ``jax.numpy``/``jax.lax`` and jitted.

A ratio means something only if both sides compute the same thing: the hand-written
networks are held here against the numpy reference (every parameter bound to its place,
in both layouts), a parameter in the wrong layout must stop the benchmark, and one short
run must report both layouts' rows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("jax")

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "executor_fairness.py"
sys.path.insert(0, str(ROOT / "benchmarks"))

import executor_fairness as fairness  # noqa: E402


# lenet5's train step is held against d5's jax executor in the last test.
@pytest.mark.parametrize(("net", "mode"), [("lenet5", "inference"), ("resnet20", "train")])
def test_hand_jax_networks_compute_what_the_reference_computes(net: str, mode: str) -> None:
    comparisons = fairness.jax_sides(net, 2, mode, executor_name="numpy")
    assert [c.path for c in comparisons] == [f"jit, {layout}" for layout in fairness.JAX_LAYOUTS]
    network = fairness.d5_network(net)
    trainable = {n for n in network.parameters if n.rsplit(".", 1)[1] not in ("mean", "var")}
    for c in comparisons:
        gradients = {n for n, d in c.diffs.items() if d["gradient"]}
        assert gradients == (trainable if mode == "train" else set())
        for name, d in c.diffs.items():
            if d["gradient"]:
                assert d["rel"] <= fairness.GRAD_RTOL, name
            else:
                assert d["abs"] <= 1e-4, name


def test_a_parameter_in_the_wrong_layout_stops_the_comparison(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # lenet5's gemm0 reads the flattened last pooled map: transposed without reordering
    # its rows to the channels-last flatten, the NHWC network computes other logits.
    monkeypatch.setattr(fairness, "_hwc_rows", lambda net: (np.transpose, np.transpose))
    with pytest.raises(SystemExit, match="disagree"):
        fairness.jax_sides("lenet5", 2, "inference", executor_name="numpy")


def test_one_round_reports_both_layouts_against_the_jax_executor() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--frameworks", "jax", "--nets", "lenet5",
         "--batches", "1", "--modes", "inference,train", "--processes", "1",
         "--rounds", "1", "--block-s", "0.005", "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    rows = {(r["mode"], r["path"]): r for r in report["summary"]}
    layouts = [f"jit, {layout}" for layout in fairness.JAX_LAYOUTS]
    assert set(rows) == {(m, p) for m in ("inference", "train") for p in layouts}
    for row in rows.values():
        assert row["framework"] == "jax" and row["d5"] == "d5 jax"
        assert row["ratio"] == pytest.approx(row["ratios"][0])
        assert row["ratio"] == pytest.approx(row["d5_s"] / row["hand_s"])
    assert report["threads"]["jax"].startswith("jax ")
