"""Issue 19 items 2 and 3 end to end: accuracy mode catching a deliberately wrong
executor (tests/fixtures/wrong-executor, installed with pip) through ``d5 bench net
--scenario offline --accuracy``, and find-peak's search of the server QPS on numpy's
lenet5 with real LoadGen runs in worker processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

WRONG = Path(__file__).resolve().parents[1] / "fixtures" / "wrong-executor" / "d5-plugin-wrongexec"
#: Short runs: the accuracy run issues every sample once whatever these say.
SHORT = ["--min-duration", "0.3", "--min-query-count", "10"]


@pytest.fixture(scope="module")
def wrong_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the wrongexec plugin, installed by pip."""
    target = tmp_path_factory.mktemp("wrongexec-site")
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target"]
    subprocess.run([*pip, str(target), str(WRONG)], check=True, capture_output=True, text=True)
    return target


def test_accuracy_mode_passes_numpy_and_catches_the_wrong_executor(run_d5, wrong_site, tmp_path):
    db = tmp_path / "results.db"
    bench = ["bench", "net", "lenet5", "--scenario", "offline", "--accuracy", *SHORT]
    proc = run_d5(*bench, "--executors", "numpy,wrongexec", "--db", str(db), "--json",
                  path=[wrong_site])  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    rows = {row["executor"]: row for row in json.loads(proc.stdout)["data"]}
    numpy, wrong = rows["numpy"]["accuracy"], rows["wrongexec"]["accuracy"]
    assert numpy["passed"] and numpy["failed"] == 0 and numpy["checked"] == 128
    assert numpy["reference"] == "numpy"
    assert not wrong["passed"] and wrong["failed"] == wrong["checked"] == 128
    # the worst difference is the fixture's offset of 1e-2, named with its sample
    assert wrong["worst"]["max_abs"] == pytest.approx(1e-2, rel=1e-3)
    assert wrong["message"].startswith(
        f"accuracy of wrongexec: FAILED, 128 of 128 samples differ from numpy; worst: "
        f"sample {wrong['worst']['sample']}, output 'output': tol_ratio: "
    )
    # the error names the wrong executor, and only it, in one line
    error = [line for line in proc.stderr.splitlines() if "accuracy check failed" in line]
    assert len(error) == 1 and "wrongexec: accuracy check failed" in error[0]
    assert "numpy: accuracy" not in error[0]


def test_find_peak_brackets_the_numpy_server_qps_with_every_run_reported(tmp_path):
    from d5core.loadgen.peak import find_peak
    from d5core.loadgen.settings import ScenarioSettings

    # 500 queries: LoadGen's early stopping needs about 460 queries within the bound
    # before a server run at p99 can be VALID
    settings = ScenarioSettings(
        "server", latency_bound_ms=20.0, min_duration_s=0.3, min_query_count=500, threads=1
    )
    start = time.perf_counter()
    peak = find_peak("lenet5", "numpy", settings, tmp_path, max_runs=4, tolerance=0.25)
    assert time.perf_counter() - start < 30
    assert peak.method == "bisection" and 1 <= len(peak.runs) <= 4
    assert len(peak.results) == len(peak.runs) == len(peak.failed_checks)
    assert peak.qps is not None, peak.message
    valid = [r.qps for r in peak.runs if r.valid]
    invalid = [r.qps for r in peak.runs if not r.valid]
    assert peak.qps == max(valid)
    assert peak.lowest_invalid == (min(invalid) if invalid else None)
    if invalid:  # the search only tries QPS between its best VALID and lowest INVALID
        assert max(valid) < min(invalid)
    for run, result, checks in zip(peak.runs, peak.results, peak.failed_checks, strict=True):
        # each run is a real LoadGen run in its own log directory, VALID or not
        assert result.settings.target_qps == run.qps and result.settings.mode == "performance"
        assert (Path(result.log_dir) / "mlperf_log_summary.txt").is_file()
        assert run.valid == (result.valid is True and not checks)
        assert run.p99 is not None and run.p99 > 0
        if run.valid:
            assert run.p99 <= 0.020
    assert len({r.log_dir for r in peak.results}) == len(peak.runs)
    assert peak.message.startswith(f"numpy: peak server QPS {peak.qps:.4g} VALID")
