"""``d5 bench comm --collective pingpong`` under mpiexec: one-way times between ranks 0
and 1, stored as one ``comm`` run with the fit of ``t(m) = L + G*m``, which
``d5 results show`` shows and :func:`~d5core.lv3.comm_fit.load_fit` reads back; a run
that holds no fit is refused in one line."""

from __future__ import annotations

import json

import pytest
from json_schema_doc import check

from d5core.errors import EXIT_USAGE, UsageError
from d5core.lv3.comm_fit import CommFit, load_fit
from d5core.results.store import ResultsStore

pytestmark = pytest.mark.usefixtures("mpi_env")


def test_a_ping_pong_is_stored_with_its_fit(tmp_path, d5_ranks):
    db = tmp_path / "r.sqlite"
    proc = d5_ranks("bench", "comm", "--collective", "pingpong", "--ranks", "2", "--min-bytes",
                    "8", "--max-bytes", "8192", "--samples", "5", "--db", str(db),
                    "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["data"]
    check("bench comm", data)
    assert data["collective"] == "pingpong" and data["communicator"] == "mpi"
    # 8 B to 8 KiB, twice as large each step
    sizes = [8 << k for k in range(11)]
    assert [(r["ranks"], r["bytes"]) for r in data["rows"]] == [(2, s) for s in sizes]
    for row in data["rows"]:
        d5 = row["d5"]
        assert d5["samples"] == 5 and d5["median_s"] > 0
        assert d5["algbw_GBs"] == pytest.approx(row["bytes"] / d5["median_s"] / 1e9)
    fit = data["fit"]
    assert fit["run_id"] == data["run_id"] and fit["sizes"] == sizes
    assert fit["latency_s"] > 0 and len(fit["residuals"]) == len(sizes)
    assert fit["measured_s"] == [row["d5"]["median_s"] for row in data["rows"]]
    assert len(fit["segments"]) == 2

    stored = load_fit(data["run_id"], db)
    assert stored == CommFit.from_json(fit)
    assert load_fit(None, db, "mpi") == stored
    assert stored.p2p_seconds(1 << 20) > stored.p2p_seconds(8)

    show = d5_ranks("results", "show", data["run_id"], "--db", str(db), "--json")
    assert show.returncode == 0, show.stderr
    document = json.loads(show.stdout)["data"]
    assert document["run"]["config"]["fit"]["latency_s"] == fit["latency_s"]
    metrics = {(k["name"], k["labels"].get("bytes")): k for k in document["metrics"]}
    assert metrics[("fit_latency", None)]["value"] == pytest.approx(fit["latency_s"] * 1e6)
    assert metrics[("fit_max_residual", None)]["value"] == pytest.approx(fit["max_abs_residual"])
    assert metrics[("fit_residual", 8)]["value"] == pytest.approx(fit["residuals"][0])
    table = d5_ranks("results", "show", data["run_id"], "--db", str(db))
    assert table.returncode == 0, table.stderr
    for name in ("fit_latency", "fit_bandwidth", "fit_ns_per_kb", "fit_max_residual"):
        assert name in table.stdout


def test_the_table_is_followed_by_the_fit(tmp_path, d5_ranks):
    db = tmp_path / "r.sqlite"
    proc = d5_ranks("bench", "comm", "--collective", "pingpong", "--max-bytes", "4096",
                    "--samples", "3", "--db", str(db))  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "d5 bench comm pingpong (mpi)" in proc.stdout and "d5 one-way (µs)" in proc.stdout
    assert "fit t(m) = L + G*m over 10 sizes" in proc.stdout
    assert "residuals (predicted/measured - 1): 8 B " in proc.stdout


def test_runs_without_a_fit_are_refused_in_one_line(tmp_path, d5_ranks):
    db = tmp_path / "r.sqlite"
    with ResultsStore.open(db) as store, store.run("train", "digits", environment={}) as train:
        pass
    proc = d5_ranks("bench", "comm", "--ranks", "2", "--max-bytes", "4096", "--samples", "3",
                    "--db", str(db), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    allreduce = json.loads(proc.stdout)["data"]["run_id"]
    for run, words in (
        (train, "'train' run, not a 'comm' run"),
        (allreduce, "timed 'allreduce', not 'pingpong'"),
        (None, "no ping-pong run is stored"),
    ):
        with pytest.raises(UsageError, match=words) as err:
            load_fit(run, db)
        assert "--collective pingpong" in str(err.value)
        assert "\n" not in str(err.value) and err.value.exit_code == EXIT_USAGE
    # the same refusal through the command that uses a fit
    for run, words in ((train, "not a 'comm' run"), (allreduce, "not 'pingpong'")):
        proc = d5_ranks("model", "comm", "--scheme", "allreduce", "--ranks", "2", "--params",
                        "1000", "--fit", run, "--db", str(db))  # fmt: skip
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], proc.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--ranks", "2,4"], "give one rank count"),
        (["--min-bytes", "64", "--max-bytes", "64"], "at least 2 message sizes"),
        (["--min-bytes", "6"], "--min-bytes 6: give a positive multiple of 4 bytes"),
    ],
)
def test_bad_ping_pong_input_is_one_line_and_exit_2_before_launching(
    tmp_path, args, words, d5_ranks
):
    db = tmp_path / "r.sqlite"
    proc = d5_ranks("bench", "comm", "--collective", "pingpong", *args, "--db", str(db),
                    timeout=60)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr
    assert not db.exists()
