"""Issue 14: the wheels of d5core, d5-plugin-tensorflow and the reference backend install
with pip into a new virtualenv, where the TensorFlow plugin checks out and validates.

The wheels are built by ``.ci/build_dist.py`` (what ``make dist`` runs) into a temporary
folder; a virtualenv made with ``python -m venv`` gets them with ``pip install
--find-links`` (by name, as a user installs from a wheel folder), and pip takes every
other requirement (TensorFlow, numpy, onnx, ...) from the package registry as a user's
install would. The installed ``d5`` must then report
every component of the TensorFlow plugin ``ok`` under ``list-plugins --check`` and pass
``validate op Conv --backend tensorflow``.

Slow (TensorFlow's CPU wheel is about 270 MB; about 90 s on a loaded 2-core machine):
one virtualenv serves both checks, made without a pip of its own (the running pip
installs into it with ``--python``), pip compiles no bytecode and keeps its cache.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
BUILD_DIST = ROOT / ".ci" / "build_dist.py"
TENSORFLOW = "d5-plugin-tensorflow"
REFERENCE = "d5-plugin-numpy"
#: Seconds for each pip step: installing TensorFlow unpacks ~270 MB.
PIP_TIMEOUT_S = 900


def _run(cmd: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _declared_components(wheel: Path) -> set[tuple[str, str]]:
    """(group, name) of every entry point a wheel declares, read from the wheel."""
    archive = zipfile.Path(wheel)
    (info,) = [p for p in archive.iterdir() if p.name.endswith(".dist-info")]
    dist = importlib.metadata.PathDistribution(info)
    return {(ep.group, ep.name) for ep in dist.entry_points}


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtualenv with the three wheels installed from a wheel folder (next to
    it: ``dist``)."""
    tmp = tmp_path_factory.mktemp("wheels")
    dist = tmp / "dist"
    built = _run(
        [sys.executable, str(BUILD_DIST), "--out", str(dist), "d5core", REFERENCE, TENSORFLOW],
        timeout=PIP_TIMEOUT_S,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    wheels = sorted(Path(line).name for line in built.stdout.split())
    assert wheels == sorted(p.name for p in dist.glob("*.whl")), built.stdout
    assert [w.split("-")[0] for w in wheels] == [
        "d5_plugin_numpy",
        "d5_plugin_tensorflow",
        "d5core",
    ]

    # No pip inside: this test's pip installs into it (--python), sparing ensurepip.
    venv = tmp / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], timeout=120)
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = _run(
        [
            sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
            "--no-compile", "--disable-pip-version-check", "--find-links", str(dist),
            TENSORFLOW, REFERENCE,
        ],
        timeout=PIP_TIMEOUT_S,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # The three came from the wheel folder, not from a same-named project of the registry.
    versions = _run(
        [
            str(python), "-c",
            "import json, importlib.metadata as md; print(json.dumps("
            "{n: md.version(n) for n in ('d5core', 'd5-plugin-numpy', 'd5-plugin-tensorflow')}))",
        ],
        timeout=60,
    )  # fmt: skip
    assert versions.returncode == 0, versions.stderr
    expected = {w.split("-")[0].replace("_", "-"): w.split("-")[1] for w in wheels}
    assert json.loads(versions.stdout) == expected
    return venv


@pytest.fixture
def d5_in(wheel_venv: Path, tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the ``d5`` of the wheel virtualenv, outside the repository, on a fresh store."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(D5_DB=str(tmp_path / "results.sqlite"), XDG_CACHE_HOME=str(tmp_path / "cache"))
    env["PATH"] = os.pathsep.join([str(wheel_venv / "bin"), env.get("PATH", "")])

    def d5(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(wheel_venv / "bin" / "d5"), *args],
            capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path,
        )  # fmt: skip

    return d5


def test_list_plugins_check_finds_every_tensorflow_component_ok(d5_in, wheel_venv) -> None:
    done = d5_in("list-plugins", "--check", "--json")
    rows = json.loads(done.stdout)["data"]
    tensorflow = {(r["group"], r["name"]): r for r in rows if r["distribution"] == TENSORFLOW}
    (wheel,) = (wheel_venv.parent / "dist").glob("d5_plugin_tensorflow-*.whl")
    assert set(tensorflow) == _declared_components(wheel)
    broken = {key: row["error"] for key, row in tensorflow.items() if row["status"] != "ok"}
    assert not broken
    assert any(r["distribution"] == REFERENCE and r["status"] == "ok" for r in rows)
    assert done.returncode == 0, done.stderr[-2000:]


def test_validate_conv_on_tensorflow_passes_against_the_reference(d5_in) -> None:
    done = d5_in("validate", "op", "Conv", "--backend", "tensorflow", "--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    report = json.loads(done.stdout)["data"]
    assert report["backend"] == "tensorflow"
    assert report["op"] == "Conv"
    assert report["against"] == "numpy"  # the reference backend, from its own wheel
    assert report["passed"] is True
