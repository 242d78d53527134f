"""``d5 results artifacts`` gives back the files kept with a run, from either backend:
listed, written under a folder with their relative paths, never over an existing file."""

from __future__ import annotations

import json
from pathlib import Path

from d5core.plugins import PluginManager
from d5core.results import ResultsStore

ENV = {"cpu": {"model": "Test CPU"}}


def _run_with_files(db: str) -> str:
    with ResultsStore.open(db, manager=PluginManager({}, discover_installed=False)) as store:
        run_id = store.record_measurement_run("lenet5", {"latency": [0.1, 0.2]}, environment=ENV)
        store.add_artifact(run_id, "numpy/mlperf_log_summary.txt", b"Result is : VALID\n")
        store.add_artifact(run_id, "numpy/peak/0/trace.json.gz", b"\x1f\x8b binary")
    return run_id


def test_the_files_of_a_run_are_listed_with_their_sizes(store_target, d5_cli):
    run_id = _run_with_files(store_target)
    result = d5_cli("results", "artifacts", run_id, "--db", store_target, "--json")
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)["data"]
    assert data["artifacts"] == [
        {"name": "numpy/mlperf_log_summary.txt", "bytes": 18},
        {"name": "numpy/peak/0/trace.json.gz", "bytes": 9},
    ]
    assert data["written"] == [] and data["left_alone"] == []


def test_written_out_they_keep_their_paths_and_bytes_and_existing_files_are_left_alone(
    store_target, d5_cli, tmp_path: Path
):
    run_id = _run_with_files(store_target)
    out = tmp_path / "out"
    (out / "numpy").mkdir(parents=True)
    (out / "numpy" / "mlperf_log_summary.txt").write_bytes(b"mine")
    result = d5_cli("results", "artifacts", run_id, "-o", str(out), "--db", store_target)
    assert result.exit_code == 0, result.stderr
    assert (out / "numpy" / "peak" / "0" / "trace.json.gz").read_bytes() == b"\x1f\x8b binary"
    assert (out / "numpy" / "mlperf_log_summary.txt").read_bytes() == b"mine"
    assert "left alone" in result.stdout


def test_an_unknown_file_name_is_one_line_naming_what_the_run_keeps(store_target, d5_cli):
    run_id = _run_with_files(store_target)
    result = d5_cli("results", "artifacts", run_id, "trace.json", "--db", store_target)
    assert result.exit_code == 2
    message = result.stderr.strip()
    assert "\n" not in message and "Traceback" not in message
    assert "'trace.json'" in message and "numpy/mlperf_log_summary.txt" in message
