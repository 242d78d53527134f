"""Integration fixtures: real plugin distributions built and installed with pip."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
BROKEN = TESTS / "fixtures" / "broken"
EXAMPLE = TESTS / "example_plugin"


def pip_install_target(target: Path, projects: Sequence[Path]) -> None:
    """Build and install ``projects`` into ``target`` with pip, without dependencies."""
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", str(target)]
    subprocess.run([*cmd, *map(str, projects)], check=True, capture_output=True, text=True)


@pytest.fixture(scope="session")
def broken_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the four deliberately broken plugins, installed by pip."""
    target = tmp_path_factory.mktemp("broken-site")
    pip_install_target(target, sorted(p.parent for p in BROKEN.glob("*/pyproject.toml")))
    return target


@pytest.fixture(scope="session")
def example_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the example third-party plugin, installed by pip."""
    target = tmp_path_factory.mktemp("example-site")
    pip_install_target(target, [EXAMPLE])
    return target


@pytest.fixture
def run_d5() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the installed ``d5`` command in a subprocess, with extra ``sys.path`` entries."""

    def run(*args: str, path: Sequence[Path] = (), env: dict[str, str] | None = None):
        environ = {**os.environ, **(env or {})}
        environ["PYTHONPATH"] = os.pathsep.join(map(str, path))
        d5 = Path(sys.executable).with_name("d5")
        return subprocess.run(
            [str(d5), *args], capture_output=True, text=True, env=environ, timeout=120
        )

    return run


@pytest.fixture(autouse=True)
def _noise_floor_without_calibrating(monkeypatch: pytest.MonkeyPatch) -> None:
    """``d5 bench`` and ``d5 results compare`` take the machine's noise floor from
    ``D5_NOISE_FLOOR`` here, so that no test runs a calibration first (the automatic
    calibration has its own tests in tests/core/test_noise.py and test_bench_processes.py)."""
    monkeypatch.setenv("D5_NOISE_FLOOR", "0.03")
