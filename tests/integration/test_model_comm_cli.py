"""``d5 model comm``: a scheme's predicted communication per step from a stored ping-pong
fit, as a table, JSON and a PNG; bad input is one line and exit 2."""

from __future__ import annotations

import json

import pytest
from json_schema_doc import check

from d5core.lv3.comm_fit import fit_pingpong, store_fit
from d5core.results.store import ResultsStore

SIZES = [8, 64, 512, 4096, 32768, 262144, 2097152]
L, G = 4e-6, 2e-10


def _store(db, collective="pingpong", kind="comm", fit=True) -> str:
    config = {"collective": collective, "communicator": "mpi"}
    times = [L + G * s for s in SIZES]
    with (
        ResultsStore.open(db) as store,
        store.run(kind, f"comm {collective}", config=config, environment={}) as run_id,
    ):
        if fit:
            store_fit(store, run_id, fit_pingpong(SIZES, times, communicator="mpi", ranks=2))
    return run_id


@pytest.fixture
def fitted(tmp_path):
    db = tmp_path / "r.sqlite"
    return db, _store(db)


def test_a_series_of_rank_counts_prints_a_row_each(run_d5, fitted, tmp_path) -> None:
    db, run_id = fitted
    png = tmp_path / "allreduce.png"
    proc = run_d5("model", "comm", "--scheme", "allreduce", "--ranks", "2,4,...,64",
                  "--params", "100M", "--db", str(db), "--plot", str(png))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert f"fit: run {run_id} (mpi, 2 ranks): L = 4 µs" in out
    rows = [line.split("│") for line in out.splitlines() if line.startswith("│")]
    assert [r[1].strip() for r in rows] == ["2", "4", "8", "16", "32", "64"]
    assert all("Rabenseifner" in r[-2] and "bandwidth" in r[-3] for r in rows)
    # 2 ranks, B = 400 MB: 2L + B G
    assert float(rows[0][2]) == pytest.approx((2 * L + 4e8 * G) * 1e3, rel=1e-3)
    assert "model: 2 L log2 P + 2 B Gx (P-1)/P + B R (P-1)/P" in out
    assert png.read_bytes()[:4] == b"\x89PNG"


def test_a_zoo_model_and_scheme_options(run_d5, fitted) -> None:
    db, _ = fitted
    proc = run_d5("model", "comm", "--scheme", "parameter-server", "--ranks", "4",
                  "--params", "resnet20", "--scheme-option", "servers=2", "--db", str(db))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "274,042 parameters (resnet20, 107 tensors)" in proc.stdout
    assert "2 servers, point to point" in proc.stdout


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--scheme", "ring", "--ranks", "2", "--params", "10"],
         "no distribution scheme named 'ring'"),
        (["--scheme", "allreduce", "--ranks", "0", "--params", "10"],
         "rank counts must be 1 or more, not 0"),
        (["--scheme", "allreduce", "--ranks", "2,-4", "--params", "10"],
         "rank counts must be 1 or more, not -4"),
        (["--scheme", "allreduce", "--ranks", "2", "--params", "0"],
         "give a whole number of parameters, 1 or more"),
        (["--scheme", "allreduce", "--ranks", "2", "--params", "-5"],
         "give a whole number of parameters, 1 or more"),
        (["--scheme", "allreduce", "--ranks", "2", "--params", "10", "--itemsize", "0"],
         "--itemsize 0"),
        (["--scheme", "dpsgd", "--ranks", "2", "--params", "10", "--scheme-option", "period=2"],
         "'dpsgd' has no option 'period'"),
        (["--scheme", "allreduce", "--ranks", "2", "--params", "10", "--plot", "x.svg"],
         "give a path ending in .png"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_and_exit_2(run_d5, fitted, args, words) -> None:
    db, _ = fitted
    proc = run_d5("model", "comm", *args, "--db", str(db))
    assert proc.returncode == 2, proc.stdout
    assert words in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_fit_run_of_the_wrong_kind_or_none_stored_is_refused(run_d5, tmp_path) -> None:
    db = tmp_path / "r.sqlite"
    allreduce = _store(db, collective="allreduce", fit=False)
    base = ["model", "comm", "--scheme", "allreduce", "--ranks", "2", "--params", "10",
            "--db", str(db)]  # fmt: skip
    none = run_d5(*base)
    assert none.returncode == 2 and "no ping-pong run is stored" in none.stderr
    wrong = run_d5(*base, "--fit", allreduce)
    assert wrong.returncode == 2 and "not 'pingpong'" in wrong.stderr
    assert wrong.stderr.count("\n") == 1
    train = _store(db, collective="pingpong", kind="train", fit=False)
    other = run_d5(*base, "--fit", train)
    assert other.returncode == 2 and "is a 'train' run, not a 'comm' run" in other.stderr


def test_json_gives_the_fit_and_every_row(run_d5, fitted) -> None:
    db, run_id = fitted
    proc = run_d5("model", "comm", "--scheme", "allreduce", "--ranks", "2,4", "--params",
                  "1000", "--scheme-option", 'compression={"name": "sign"}', "--db", str(db),
                  "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == "d5.model.comm/1"
    data = doc["data"]
    check("model comm", data)
    assert data["fit"]["run_id"] == run_id and data["params"] == 1000
    assert data["scheme_options"] == {"compression": {"name": "sign"}}
    assert [r["ranks"] for r in data["rows"]] == [2, 4]
    assert data["rows"][0]["algorithm"] == "sign allgather (recursive doubling)"
    for row in data["rows"]:
        assert row["seconds"] == pytest.approx(row["latency_seconds"] + row["bandwidth_seconds"])
