"""``d5 run --ranks N`` with no communication plugin: one line saying what is missing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from d5core.lv3.launch import NO_COMMUNICATION_PLUGIN

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"
D5 = Path(sys.executable).with_name("d5")


def test_ranks_without_a_communication_plugin_exit_2_in_one_line(tmp_path):
    db = tmp_path / "runs.sqlite"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "D5_"))}
    env["D5_DISABLE_PLUGINS"] = "d5-plugin-mpi"
    proc = subprocess.run(
        [str(D5), "run", str(RECIPE), "--ranks", "2", "--db", str(db)],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].endswith(NO_COMMUNICATION_PLUGIN), proc.stderr
    assert not db.exists()
