"""``d5 bench comm``: collective bandwidth under mpiexec, stored as one ``comm`` run with
d5's and mpi4py's own samples; bad input exits 2 before any rank starts."""

from __future__ import annotations

import json

import pytest
from json_schema_doc import check

from d5core.levels.report import ReportRun
from d5core.lv3 import figures as distributed
from d5core.results.store import ResultsStore

pytestmark = pytest.mark.usefixtures("mpi_env")


def test_bench_comm_stores_one_run_with_d5_and_raw_measurements(tmp_path, d5_ranks):
    db = tmp_path / "r.sqlite"
    proc = d5_ranks("bench", "comm", "--ranks", "2", "--max-bytes", "65536", "--samples", "10",
                    "--link-peak", "20", "--tag", "sweep", "--db", str(db), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "d5.bench.comm/1"
    data = doc["data"]
    check("bench comm", data)
    sizes = [1024, 4096, 16384, 65536]
    assert [(r["ranks"], r["bytes"]) for r in data["rows"]] == [(2, s) for s in sizes]
    assert data["raw_baseline"] is True and data["link_peak_gbps"] == 20.0
    with ResultsStore.open(db) as store:
        runs = store.list_runs(limit=10)
        assert [(r.kind, r.name, r.status, r.tags) for r in runs] == [
            ("comm", "comm allreduce", "complete", ("sweep",))
        ]
        run_id = runs[0].id
        assert run_id == data["run_id"]
        config = store.get_run(run_id).config
        assert config["ranks"] == [2] and config["sizes"] == sizes
        assert config["communicator"] == "mpi" and config["raw_baseline"] is True
        measurements = store.measurements(run_id)
        labels = sorted((m.labels["impl"], m.labels["bytes"]) for m in measurements)
        assert labels == sorted((impl, s) for impl in ("d5", "raw") for s in sizes)
        for m in measurements:
            assert m.metric == "time" and m.unit == "s" and m.n == 10
            assert m.labels["collective"] == "allreduce" and m.labels["ranks"] == 2
            assert all(v > 0 for v in store.samples(m.id))
        metrics = {(k.name, k.labels["impl"], k.labels["bytes"]): k for k in store.metrics(run_id)}
        assert len(metrics) == 2 * 2 * len(sizes)
        row = data["rows"][-1]
        algbw = metrics[("algbw", "d5", 65536)]
        assert algbw.unit == "GB/s" and algbw.value == pytest.approx(row["d5"]["algbw_GBs"])
        assert algbw.value == pytest.approx(65536 / row["d5"]["median_s"] / 1e9)
        # allreduce on 2 ranks: bus factor 2(n-1)/n = 1
        assert metrics[("busbw", "raw", 65536)].value == pytest.approx(row["raw"]["algbw_GBs"])
        stored = [ReportRun.from_stored(s) for s in store.read_runs([run_id])]
    (fig,) = distributed.figures(stored)
    assert fig.data["link_peak_gbps"] == 20.0
    assert fig.data["panels"][0]["series"]["d5"]["algbw"][-1] == pytest.approx(algbw.value)


def test_bench_comm_table_and_broadcast(tmp_path, d5_ranks):
    db = tmp_path / "r.sqlite"
    proc = d5_ranks("bench", "comm", "--ranks", "2", "--collective", "broadcast", "--min-bytes",
                    "4096", "--max-bytes", "8192", "--samples", "5", "--db", str(db))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "d5 bench comm broadcast (mpi)" in proc.stdout
    assert "4 KiB" in proc.stdout and "8 KiB" in proc.stdout
    with ResultsStore.open(db) as store:
        (run,) = store.list_runs(limit=10)
        assert run.name == "comm broadcast"
        assert {m.labels["bytes"] for m in store.measurements(run.id)} == {4096, 8192}


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--min-bytes", "0"], "--min-bytes 0"),
        (["--max-bytes", "-8"], "--max-bytes -8"),
        (["--min-bytes", "8192", "--max-bytes", "4096"], "larger than --max-bytes"),
        (["--ranks", "1"], "at least 2 ranks"),
        (["--ranks", "two"], "--ranks takes comma-separated integers"),
        (["--collective", "alltoallw"], "unknown collective 'alltoallw'"),
        (["--communicator", "carrier-pigeon"], "'carrier-pigeon' is not installed"),
        (["--sizes", "8,1KiB"], "'1KiB' is no message size"),
        (["--sizes", "8,6"], "'6' is no message size"),
    ],
)
def test_bad_input_is_one_line_and_exit_2_before_launching(tmp_path, args, words, d5_ranks):
    db = tmp_path / "r.sqlite"
    proc = d5_ranks("bench", "comm", *args, "--db", str(db), timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert not db.exists()
