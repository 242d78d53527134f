"""Issue 34, item 4: ``merge_stores`` copies the finished runs of several stores into one.

Runs are made with the store API directly (no framework plugin). The destination is an
SQLite file and, where the private PostgreSQL cluster of the tests can run, a PostgreSQL
database too.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from d5core.errors import UsageError
from d5core.plugins import PluginManager
from d5core.results import ResultsStore
from d5core.teamstore.documents import import_document
from d5core.teamstore.transfer import canonical_text, differences, merge_stores

ENV = {
    "packages": {"d5core": "0.1.0"},
    "cpu": {"model": "Test CPU", "logical_cores": 2, "physical_cores": 2},
    "os": {"system": "Linux", "release": "6.1", "machine": "x86_64"},
    "argv": ["bench.py"],
}
OTHER_ENV = dict(ENV, packages={"d5core": "0.1.0", "torch": "2.13.0"})


def _open(target: str | Path) -> ResultsStore:
    return ResultsStore.open(target, manager=PluginManager({}, discover_installed=False))


def make_run(
    store: ResultsStore,
    name: str,
    *,
    samples: tuple[float, ...] = (1.0e-3, 1.1e-3, 0.9e-3, 1.2e-3),
    status: str | None = "complete",
    env: dict = ENV,
    artifact: bytes | None = None,
) -> str:
    """One run with a measurement (samples of two processes), a metric and a tag;
    left ``running`` when ``status`` is None."""
    rid = store.begin_run("op", name, environment=env, config={"name": name}, seed=7,
                          tags=["rank-job"])  # fmt: skip
    processes = [i % 2 for i in range(len(samples))]
    store.add_measurement(rid, "time", list(samples), labels={"backend": "numpy"},
                          processes=processes)  # fmt: skip
    store.add_metric(rid, "accuracy", 0.9)
    if artifact is not None:
        store.add_artifact(rid, "log.txt", artifact)
    if status is not None:
        store.finish_run(rid, status)
    return rid


def _store_of(tmp_path: Path, name: str, runs: int) -> tuple[Path, list[str]]:
    """A store of ``runs`` complete runs, as a 2-rank cluster job leaves one."""
    path = tmp_path / f"{name}.sqlite"
    with _open(path) as store:
        ids = [make_run(store, f"{name}-{i}", artifact=f"rank {i}\n".encode()) for i in range(runs)]
    return path, ids


def _documents(target: str | Path) -> dict[str, str]:
    """Every run of a store as the canonical text of its transfer document, by id."""
    with _open(target) as store:
        return {r.id: canonical_text(store.export_run(r.id)) for r in store.list_runs()}


@pytest.fixture
def dest(store_target: str) -> str:
    """The destination of a merge: a new store on each backend, an SQLite file
    and a PostgreSQL database (``store_target``, tests/conftest.py)."""
    return store_target


# -- merging -----------------------------------------------------------------------------


def test_three_stores_merge_into_one_with_their_counts(tmp_path, dest):
    stores = [_store_of(tmp_path, f"job{i}", runs=2 + i) for i in range(3)]
    report = merge_stores([str(p) for p, _ in stores], dest)
    assert [s.counts() for s in report.sources] == [
        {"copied": 2 + i, "already_there": 0, "conflicts": 0, "skipped_running": 0}
        for i in range(3)
    ]
    assert report.totals() == {"copied": 9, "already_there": 0, "conflicts": 0,
                               "skipped_running": 0}  # fmt: skip
    assert [s.source for s in report.sources] == [str(p) for p, _ in stores]
    merged = _documents(dest)
    for path, _ in stores:
        assert _documents(path).items() <= merged.items()
    assert len(merged) == 9


def test_merging_twice_changes_nothing(tmp_path, dest):
    stores = [str(_store_of(tmp_path, f"job{i}", runs=2)[0]) for i in range(2)]
    merge_stores(stores, dest)
    before = _documents(dest)
    again = merge_stores(stores, dest)
    assert again.totals() == {"copied": 0, "already_there": 4, "conflicts": 0,
                              "skipped_running": 0}  # fmt: skip
    assert _documents(dest) == before


def test_a_conflicting_run_is_reported_and_left_out_while_the_others_are_copied(tmp_path, dest):
    first, (shared_id, _) = _store_of(tmp_path, "first", runs=2)
    merge_stores([str(first)], dest)
    with _open(first) as store:
        changed = store.export_run(shared_id)
    changed["measurements"][0]["samples"][0] = 5.0
    changed["run"]["status"] = "failed"
    second = tmp_path / "second.sqlite"
    with _open(second) as store:
        assert import_document(store, changed)
        fresh = make_run(store, "fresh")
    held = _documents(dest)[shared_id]

    report = merge_stores([str(second)], dest)

    (part,) = report.sources
    assert part.counts() == {"copied": 1, "already_there": 0, "conflicts": 1,
                             "skipped_running": 0}  # fmt: skip
    (conflict,) = part.conflicts
    assert conflict.run_id == shared_id
    assert conflict.differences == ("run.status", "measurements[0].samples")
    merged = _documents(dest)
    assert merged[shared_id] == held  # the stored run is left as it was
    assert fresh in merged


def test_a_running_run_is_skipped_and_named(tmp_path, dest):
    source = tmp_path / "live.sqlite"
    with _open(source) as store:
        done = make_run(store, "done")
        live = make_run(store, "live", status=None)
        report = merge_stores([str(source)], dest)
    (part,) = report.sources
    assert (part.copied, part.running) == (1, [live])
    assert set(_documents(dest)) == {done}


def test_nan_samples_processes_tags_and_artifacts_survive_the_merge(tmp_path, dest):
    source = tmp_path / "nan.sqlite"
    with _open(source) as store:
        rid = make_run(store, "nan", samples=(1.0, math.nan, 2.0, 3.0), artifact=b"\x00log\xff")
        store.add_tags(rid, ["later"])
    merge_stores([str(source)], dest)
    with _open(source) as a, _open(dest) as b:
        assert canonical_text(a.export_run(rid)) == canonical_text(b.export_run(rid))
        (m,) = b.measurements(rid)
        samples = b.samples(m.id)
        assert samples[0] == 1.0 and math.isnan(samples[1]) and samples[2:] == [2.0, 3.0]
        groups = b.samples_by_process(m.id)
        assert list(groups) == [0, 1] and groups[0] == [1.0, 2.0]
        assert math.isnan(groups[1][0]) and groups[1][1] == 3.0
        assert b.get_run(rid).tags == ("later", "rank-job")
        assert b.read_artifact(rid, "log.txt") == b"\x00log\xff"
        assert b.environment(rid) == a.environment(rid)
        assert b.get_run(rid).fingerprint == a.get_run(rid).fingerprint


def test_runs_of_two_environments_keep_their_own_environment(tmp_path, dest):
    source = tmp_path / "two.sqlite"
    with _open(source) as store:
        here = make_run(store, "here")
        there = make_run(store, "there", env=OTHER_ENV)
    merge_stores([str(source)], dest)
    with _open(dest) as store:
        assert store.environment(there)["packages"]["torch"] == "2.13.0"
        assert "torch" not in store.environment(here)["packages"]
        assert store.get_run(here).fingerprint != store.get_run(there).fingerprint


def test_merge_into_a_store_that_does_not_exist_yet_creates_it(tmp_path):
    source, ids = _store_of(tmp_path, "job", runs=1)
    dest = tmp_path / "new" / "dir" / "merged.sqlite"
    report = merge_stores([str(source)], str(dest))
    assert dest.is_file() and report.totals()["copied"] == 1
    assert list(_documents(dest)) == ids


# -- bad input ---------------------------------------------------------------------------


def test_a_missing_source_is_refused_before_the_destination_is_created(tmp_path):
    good, _ = _store_of(tmp_path, "job", runs=1)
    dest = tmp_path / "merged.sqlite"
    with pytest.raises(UsageError, match=r"no results database at .*missing\.sqlite to merge from"):
        merge_stores([str(good), str(tmp_path / "missing.sqlite")], str(dest))
    assert not dest.exists()


def test_a_file_that_is_not_a_store_is_refused_and_nothing_is_written(tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a database\n")
    dest, _ = _store_of(tmp_path, "dest", runs=1)
    before = _documents(dest)
    with pytest.raises(UsageError, match="is not a d5 results database"):
        merge_stores([str(notes)], str(dest))
    assert _documents(dest) == before and notes.read_text() == "not a database\n"


def test_the_destination_among_the_sources_is_refused(tmp_path):
    source, _ = _store_of(tmp_path, "job", runs=1)
    before = _documents(source)
    alias = tmp_path / "sub" / ".." / "job.sqlite"
    (tmp_path / "sub").mkdir()
    with pytest.raises(UsageError, match="is both a source and the destination"):
        merge_stores([str(source)], str(alias))
    assert _documents(source) == before


# -- the differences a conflict names ----------------------------------------------------


def test_differences_name_the_first_keys_that_differ_as_paths():
    a = {"run": {"status": "complete", "tags": ["x"]}, "measurements": [{"samples": [1, 2]}]}
    b = {"run": {"status": "failed", "tags": ["x", "y"]}, "measurements": [{"samples": [1, 3]}]}
    assert differences(a, b) == ["run.status", "run.tags", "measurements[0].samples"]
    assert differences(a, b, limit=1) == ["run.status"]
    assert differences(a, a) == []
    assert differences({"run": {}}, {"run": {"extra": 1}}) == ["run.extra"]
    assert differences({"metrics": [{}]}, {"metrics": [{}, {}]}) == ["metrics"]


def test_a_postgresql_destination_among_the_sources_is_refused(postgres_url):
    with _open(postgres_url) as store:
        make_run(store, "only")
    before = _documents(postgres_url)
    alias = postgres_url.replace("postgresql://", "postgres://", 1)
    with pytest.raises(UsageError, match="is both a source and the destination"):
        merge_stores([alias], postgres_url)
    assert _documents(postgres_url) == before
