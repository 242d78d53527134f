"""Issue 11, item 5: the load average is recorded when every run begins and ends, and
``d5 results show`` and ``compare`` show it, flagging busy machines and differing loads."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from d5core.cli.output import read_json
from d5core.plugins import PluginManager
from d5core.results import ResultsStore
from d5core.results.load import LoadAverage, current_load

ENV = {"packages": {"d5core": "0.1.0"}, "cpu": {"model": "Test CPU", "logical_cores": 4}}


def _open(db: Path) -> ResultsStore:
    return ResultsStore.open(db, manager=PluginManager({}, discover_installed=False))


@pytest.fixture
def load(monkeypatch) -> Iterator[list[tuple[float, float, float]]]:
    """Each read of the load average returns (and removes) the first item of the list."""
    values: list[tuple[float, float, float]] = []
    monkeypatch.setattr(os, "getloadavg", lambda: values.pop(0))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    yield values


def _run(db: Path, start: tuple[float, float, float], end, load) -> str:
    load[:] = [start, end]
    with _open(db) as store, store.run("op", "gemm", environment=ENV) as rid:
        store.add_measurement(rid, "time", [1e-3, 1.1e-3, 0.9e-3] * 10)
    return rid


def test_begin_and_finish_record_the_load_average(tmp_path, load):
    load[:] = [(0.5, 0.4, 0.3), (2.5, 1.0, 0.6)]
    with _open(tmp_path / "r.sqlite") as store:
        rid = store.begin_run("train", "digits", environment=ENV)
        assert store.get_run(rid).load_start == LoadAverage(0.5, 0.4, 0.3, cores=4)
        assert store.get_run(rid).load_end is None
        store.finish_run(rid, "diverged")
        run = store.get_run(rid)
    assert run.load_end == LoadAverage(2.5, 1.0, 0.6, cores=4)
    assert run.to_json()["load_start"] == {
        "one_min": 0.5,
        "five_min": 0.4,
        "fifteen_min": 0.3,
        "cores": 4,
    }


def test_a_run_whose_process_died_keeps_the_load_at_its_start(tmp_path, load, monkeypatch):
    from d5core.results import store as store_mod

    load[:] = [(1.0, 1.0, 1.0)]
    with _open(tmp_path / "r.sqlite") as store:
        rid = store.begin_run("op", "gemm", environment=ENV)
    monkeypatch.setattr(store_mod, "_process_alive", lambda pid, started: False)
    with _open(tmp_path / "r.sqlite") as store:
        run = store.get_run(rid)
    assert run.status == "incomplete"
    assert (run.load_start, run.load_end) == (LoadAverage(1.0, 1.0, 1.0, cores=4), None)


def test_a_system_without_a_load_average_records_none(tmp_path, monkeypatch):
    def missing() -> tuple[float, float, float]:
        raise OSError("no load average here")

    monkeypatch.setattr(os, "getloadavg", missing)
    assert current_load() is None
    with _open(tmp_path / "r.sqlite") as store, store.run("op", "x", environment=ENV) as rid:
        pass
    with _open(tmp_path / "r.sqlite") as store:
        run = store.get_run(rid)
    assert (run.load_start, run.load_end) == (None, None)


@pytest.mark.parametrize("junk", [None, "x", {"one_min": "a"}, {"one_min": 1.0}, [1, 2, 3]])
def test_an_unreadable_stored_load_reads_as_not_recorded(junk):
    assert LoadAverage.from_json(junk) is None


def test_show_prints_the_load_and_warns_about_a_busy_machine(tmp_path, load, d5_cli):
    db = tmp_path / "r.sqlite"
    quiet = _run(db, (0.2, 0.2, 0.2), (0.8, 0.3, 0.2), load)
    busy = _run(db, (9.0, 6.0, 3.0), (0.4, 0.4, 0.4), load)

    out = d5_cli("results", "show", quiet, "--db", str(db)).stdout
    assert "load         start 0.20, 0.20, 0.20 on 4 cores (0.05 per core); end 0.80" in out
    assert "busy" not in out

    result = d5_cli("results", "show", busy, "--db", str(db))
    assert result.exit_code == 0, result.stderr
    assert (
        "WARNING: the machine was busy: 1-minute load 9.00 at the start of the run, on 4 cores "
        "(up to 2.25 per core, above 1)"
    ) in " ".join(result.stdout.split())
    doc = read_json(d5_cli("results", "show", busy, "--json", "--db", str(db)).stdout)
    assert doc["run"]["load_start"]["one_min"] == 9.0
    assert doc["run"]["load_end"]["one_min"] == 0.4
    assert len(doc["load_warnings"]) == 1 and "at the start of" in doc["load_warnings"][0]


def test_compare_flags_runs_whose_loads_differed(tmp_path, load, d5_cli):
    db = tmp_path / "r.sqlite"
    quiet = _run(db, (0.2, 0.2, 0.2), (0.6, 0.3, 0.2), load)
    again = _run(db, (0.3, 0.2, 0.2), (0.7, 0.3, 0.2), load)
    loaded = _run(db, (3.6, 2.0, 1.0), (3.8, 2.5, 1.2), load)

    same = d5_cli("results", "compare", quiet, again, "--json", "--db", str(db))
    assert same.exit_code == 0, same.stderr
    assert read_json(same.stdout)["load"]["warnings"] == []
    assert "load" not in same.stderr

    result = d5_cli("results", "compare", quiet, loaded, "--json", "--db", str(db))
    assert result.exit_code == 0, result.stderr
    report = read_json(result.stdout)["load"]
    assert report["baseline"]["start"]["one_min"] == 0.2
    assert report["candidate"]["end"]["one_min"] == 3.8
    (warning,) = report["warnings"]
    assert "load differed" in warning and "0.15 per core" in warning and "0.95" in warning
    assert f"d5: warning: {warning}" in result.stderr

    table = d5_cli("results", "compare", quiet, loaded, "--db", str(db)).stdout
    text = " ".join(table.split())
    assert "WARNING: the machine's load differed" in text
    assert "load start 3.60, 2.00, 1.00 on 4 cores" in text


def test_compare_flags_a_busy_run_even_when_both_were_busy(tmp_path, load, d5_cli):
    db = tmp_path / "r.sqlite"
    first = _run(db, (6.0, 6.0, 6.0), (6.0, 6.0, 6.0), load)
    second = _run(db, (6.2, 6.0, 6.0), (6.1, 6.0, 6.0), load)
    result = d5_cli("results", "compare", first, second, "--json", "--db", str(db))
    warnings = read_json(result.stdout)["load"]["warnings"]
    assert len(warnings) == 2  # one for each run, naming both ends
    assert warnings[0].startswith(
        f"baseline {first}: the machine was busy: 1-minute load 6.00 at the start and 6.00 "
        "at the end of the run, on 4 cores (up to 1.50 per core"
    )
    assert warnings[1].startswith(f"candidate {second}: the machine was busy")
