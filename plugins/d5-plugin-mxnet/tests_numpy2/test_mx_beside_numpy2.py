"""Issue 16: the MXNet plugin installed beside numpy 2, where MXNet 1.9.1 fails inside
its own import. d5 must say so in one line with the fix, exit 2 without a traceback when
the backend is asked for, show the plugin as failed in ``d5 list-plugins``, and keep the
other plugins working. Run by the nox session ``mxnet-beside-numpy2`` (numpy 2, mxnet
installed without its dependencies)."""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version


def _d5(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "d5core", *args], capture_output=True, text=True, timeout=120
    )


def test_this_environment_has_mxnet_beside_numpy_2() -> None:
    assert Version(md.version("numpy")) >= Version("2")
    assert md.version("mxnet") == "1.9.1"
    # The failure the plugin guards against is real: MXNet's own import breaks here.
    probe = subprocess.run([sys.executable, "-c", "import mxnet"], capture_output=True, text=True)
    assert probe.returncode != 0


def test_list_plugins_shows_the_mxnet_plugin_failed_with_the_reason_and_fix() -> None:
    result = _d5("list-plugins", "--json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)["data"]
    mxnet = [r for r in rows if r.get("distribution") == "d5-plugin-mxnet"]
    assert mxnet and all(r["status"] == "failed" for r in mxnet), mxnet
    reasons = " ".join(r["error"] for r in mxnet)
    assert "cannot import beside numpy 2" in reasons
    assert "make mxnet" in reasons and "numpy==1.23.5" in reasons
    others = [r for r in rows if r.get("distribution") == "d5-plugin-numpy"]
    assert others and all(r["status"] == "ok" for r in others)


@pytest.mark.parametrize(
    "args",
    [
        ("bench", "op", "Relu", "--backends", "numpy,mxnet", "--time-budget", "0.1"),
        ("validate", "op", "Relu", "--backend", "mxnet"),
    ],
)
def test_asking_for_the_mxnet_backend_is_one_line_and_exit_2(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    result = _d5(*args, "--db", str(tmp_path / "r.sqlite"))
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "mxnet" in lines[0] and "numpy" in lines[0]


def test_the_reference_backend_still_runs_beside_the_failed_plugin(tmp_path: Path) -> None:
    result = _d5("validate", "op", "Relu", "--backend", "numpy", "--db", str(tmp_path / "r.db"))
    assert result.returncode == 0, result.stderr
