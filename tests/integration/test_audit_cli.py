"""Issue 28, section 5, end to end: ``d5 bench`` and ``d5 audit`` on the cheating
backends of tests/fixtures/cheaters (installed into a fake site the worker processes
see), and ``d5 audit`` passing a real backend."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from cheaters import install_cheaters
from json_schema_doc import check

from d5core.cli.output import read_json
from d5core.results.store import ResultsStore

BRIEF_AUDIT = ["--processes", "3", "--min-samples", "8", "--time-budget", "0.05", "--warmup", "1"]


@pytest.fixture(scope="module")
def cheaters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    site = install_cheaters(tmp_path_factory.mktemp("cheaters-site"))
    db = tmp_path_factory.mktemp("audit") / "results.sqlite"
    return {
        **os.environ,
        "PYTHONPATH": str(site),
        "D5_DB": str(db),
        "D5_NOISE_FLOOR": "0.05",
        "OMP_NUM_THREADS": "1",
    }


def _d5(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    d5 = str(Path(sys.executable).with_name("d5"))
    return subprocess.run([d5, *args], capture_output=True, text=True, env=env, timeout=300)


def test_bench_op_fails_an_operator_whose_timed_callable_does_nothing(cheaters):
    done = _d5(cheaters, "bench", "op", "Relu", "--backends", "idle", "--shape", "64x64",
               "--processes", "1", "--min-samples", "6", "--time-budget", "0.05")  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "accuracy while timed failed: the timed callable returned None" in done.stderr


def test_bench_net_fails_an_executor_whose_timed_callable_does_nothing(cheaters):
    done = _d5(cheaters, "bench", "net", "mlp", "--executors", "idle", "--processes", "1",
               "--min-samples", "6", "--time-budget", "0.05")  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "accuracy while timed failed" in done.stderr


def test_the_audit_catches_an_operator_that_caches_and_one_that_returns_stale_outputs(cheaters):
    done = _d5(cheaters, "audit", "op", "Relu", "--backends", "caching,stale", "--shape",
               "256x256", *BRIEF_AUDIT)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL  caching  no caching: repeated inputs ran" in done.stdout
    assert "PASS  caching  accuracy while timed" in done.stdout
    assert "FAIL  stale  accuracy while timed" in done.stdout
    assert "differs from the untimed one" in done.stdout


def test_the_audit_passes_the_numpy_operator_and_stores_an_audit_run(cheaters):
    done = _d5(cheaters, "audit", "op", "Relu", "--backends", "numpy", "--shape", "64x64",
               *BRIEF_AUDIT, "--json")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    found = read_json(done.stdout, "audit op")
    check("audit op", found)
    assert found["passed"] and len(found["checks"]) == 3
    with ResultsStore.open(cheaters["D5_DB"]) as store:
        assert store.get_run(found["run_id"]).kind == "audit"


def test_the_net_audit_catches_an_executor_that_caches_and_one_that_returns_stale_outputs(
    cheaters,
):
    done = _d5(cheaters, "audit", "net", "mlp", "--executors", "caching,stale", "--batch", "8",
               *BRIEF_AUDIT)  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL  caching  no caching: repeated inputs ran" in done.stdout
    assert "FAIL  stale  accuracy while timed" in done.stdout
