"""Integration fixtures: real plugin distributions built and installed with pip."""

from __future__ import annotations

import os
import shutil
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


def _mpi_missing() -> str | None:
    """Why nothing can run on several ranks here (no mpiexec beside this Python or on the
    PATH, or the MPI plugin or mpi4py not importable), or ``None``."""
    here = Path(sys.executable).with_name("mpiexec")
    if not here.is_file() and shutil.which("mpiexec") is None:
        return "mpiexec is not installed (pip install mpich, or a system MPI)"
    try:
        import d5_plugin_mpi.comm  # noqa: F401
        import mpi4py  # noqa: F401
    except ImportError as exc:
        return f"the MPI plugin cannot be imported ({exc})"
    return None


def _launch_environment() -> dict[str, str]:
    """This process's environment less what would confuse a new job: an enclosing
    launcher's ``PMI_*`` variables and the fault injections of ``D5_TEST_*``."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "D5_TEST_"))}


@pytest.fixture
def mpi_env() -> dict[str, str]:
    """The environment to start a ``d5`` command that launches ranks with; skips the test,
    saying why, where mpiexec, the MPI plugin or mpi4py is missing. A module whose every test
    needs MPI marks them all with ``pytestmark = pytest.mark.usefixtures("mpi_env")``."""
    why = _mpi_missing()
    if why is not None:
        pytest.skip(why)
    return _launch_environment()


@pytest.fixture
def d5_ranks(mpi_env: dict[str, str]) -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run the installed ``d5`` command in a subprocess that may launch ranks (the test
    is skipped where it cannot, as with :func:`mpi_env`): the environment is taken as
    :func:`mpi_env` takes it, at the call (after any change the test made), plus ``env``."""
    d5 = Path(sys.executable).with_name("d5")

    def run(
        *args: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        environ = {**_launch_environment(), **(env or {})}
        return subprocess.run(
            [str(d5), *args], capture_output=True, text=True, env=environ, timeout=timeout
        )

    return run


@pytest.fixture(autouse=True)
def _noise_floor_without_calibrating(monkeypatch: pytest.MonkeyPatch) -> None:
    """``d5 bench`` and ``d5 results compare`` take the machine's noise floor from
    ``D5_NOISE_FLOOR`` here, so that no test runs a calibration first (the automatic
    calibration has its own tests in tests/core/test_noise.py and test_bench_processes.py)."""
    monkeypatch.setenv("D5_NOISE_FLOOR", "0.03")


def find_chromium() -> str | None:
    """The Chromium (or Chrome) executable on ``PATH``, or ``None``."""
    return (
        shutil.which("chromium")
        or shutil.which("chromium-browser")
        or shutil.which("google-chrome")
    )


@pytest.fixture(scope="session")
def chromium() -> str:
    """Chromium, for the real-browser checks of ``d5 report``: skipped where it is not
    installed, failed under ``CI=true`` (CI installs it)."""
    found = find_chromium()
    if found is None:
        reason = (
            "no Chromium on PATH (looked for chromium, chromium-browser, google-chrome): "
            "install it to run the real-browser checks of `d5 report`, e.g. "
            "`apt-get install -y chromium` on Debian or Ubuntu"
        )
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; under CI this check must run", pytrace=False)
        pytest.skip(reason)
    return found
