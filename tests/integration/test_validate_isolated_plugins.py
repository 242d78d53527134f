"""``d5 validate op`` of a plugin's operator and ``d5 validate net`` run the plugin's
code in a worker process: a backend or executor whose native code crashes is a failed
check naming the signal, the phase and the framework, stored as a failed validation,
never a dead d5."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from d5core.results.store import ResultsStore
from d5core.testing import make_distribution

CRASHY = """
d5_plugin_api = ">=1.7,<2"

import os
import signal

from d5_plugin_numpy.backend import NumpyBackend
from d5_plugin_numpy.executor import NumpyExecutor


def _crash():
    os.kill(os.getpid(), signal.SIGSEGV)  # as native code that dereferences NULL


class CrashyBackend(NumpyBackend):
    name = "crashy"

    def create(self, op_type, attributes, inputs):
        operator = super().create(op_type, attributes, inputs)
        operator.forward = lambda arrays: _crash()
        return operator


class CrashyExecutor(NumpyExecutor):
    def inference(self, feeds):
        _crash()
"""


@pytest.fixture
def crashy_site(tmp_path: Path) -> dict[str, str]:
    """The environment of a d5 with a plugin whose operator and executor segfault."""
    pytest.importorskip("d5_plugin_numpy")
    site = tmp_path / "site"
    make_distribution(site, "d5-plugin-crashy", modules={"crashy_plugin.py": CRASHY},
                      entry_points={"d5.hooks": {"crashy": "crashy_plugin"},
                                    "d5.operators": {"crashy": "crashy_plugin:CrashyBackend"},
                                    "d5.frameworks": {"crashy": "crashy_plugin:CrashyExecutor"}})  # fmt: skip
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path}


def _d5(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "d5core", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=900)


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 1, done.stderr[-2000:]
    lines = [x for x in done.stderr.splitlines() if x.startswith("d5: error:")]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-2000:]
    return lines[0]


def _stored(db: Path, name: str) -> tuple[str, str, list[float]]:
    with ResultsStore.open(db) as store:
        [run] = [r for r in store.list_runs(kind="validate") if r.name == name]
        passed = [m.value for m in store.metrics(run.id) if m.name == "passed"]
    return run.status, run.error or "", passed


def test_a_plugin_operator_that_segfaults_is_a_failed_validation_not_a_dead_d5(
    crashy_site: dict[str, str], tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    done = _d5(crashy_site, "validate", "op", "Relu", "--backend", "crashy", "--db", str(db))
    line = _one_error_line(done)
    assert (
        "Relu on crashy (float32) failed: the worker was killed by SIGSEGV during crashy forward"
        in line
    )
    status, error, passed = _stored(db, "Relu crashy")
    assert status == "failed" and "SIGSEGV" in error and passed == [0.0]


def test_an_executor_that_segfaults_is_a_failed_validation_not_a_dead_d5(
    crashy_site: dict[str, str], tmp_path: Path
) -> None:
    db = tmp_path / "runs.db"
    done = _d5(crashy_site, "validate", "net", "mlp", "--executor", "crashy", "--db", str(db))
    line = _one_error_line(done)
    assert "crashy: the worker was killed by SIGSEGV during crashy inference" in line
    status, error, passed = _stored(db, "mlp crashy")
    assert status == "failed" and "SIGSEGV" in error and passed == [0.0]
