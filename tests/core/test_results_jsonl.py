"""Issue 34, item 4: runs move between sites as JSON Lines, one ``d5-run/1`` document a
line (``write_jsonl``, ``read_jsonl``, ``import_jsonl``); a bad file changes nothing."""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest
from test_results_merge import ENV, make_run

from d5core.errors import UsageError
from d5core.plugins import PluginManager
from d5core.results import ResultsStore
from d5core.teamstore.transfer import canonical_text, import_jsonl, read_jsonl, write_jsonl


def _open(target: str | Path) -> ResultsStore:
    return ResultsStore.open(target, manager=PluginManager({}, discover_installed=False))


def _documents(target: str | Path) -> dict[str, str]:
    with _open(target) as store:
        return {r.id: canonical_text(store.export_run(r.id)) for r in store.list_runs()}


@pytest.fixture
def source(tmp_path: Path) -> tuple[Path, list[str]]:
    """A store of three runs: one with a NaN sample, an infinite metric and an artifact."""
    path = tmp_path / "site-a.sqlite"
    with _open(path) as store:
        odd = make_run(store, "odd", samples=(1.0, math.nan, 2.0), artifact=b"\x00\x01log")
        with store.run("train", "mlp", environment=ENV, seed=3) as plain:
            store.add_metric(plain, "speedup", math.inf)
            store.add_metric(plain, "loss", math.nan)
        third = make_run(store, "third, naïve ünïcode")
    return path, [odd, plain, third]


@pytest.fixture
def dest(store_target: str) -> str:
    """The store runs are imported into: a new store on each backend, an SQLite file
    and a PostgreSQL database (``store_target``, tests/conftest.py)."""
    return store_target


def _export(store_path: Path, ids: list[str], out: Path) -> None:
    with _open(store_path) as store, out.open("w", encoding="utf-8") as stream:
        written = write_jsonl(store, ids, stream)
    assert written.runs == len(ids)


def test_each_line_is_one_d5_run_document(source, tmp_path):
    path, ids = source
    out = tmp_path / "runs.jsonl"
    _export(path, ids, out)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3
    documents = [json.loads(line) for line in lines]
    assert [d["format"] for d in documents] == ["d5-run/1"] * 3
    assert [d["run"]["run_id"] for d in documents] == ids
    assert documents[0]["measurements"][0]["samples"] == [1.0, None, 2.0]
    assert documents[0]["measurements"][0]["processes"] == [0, 1, 0]
    (artifact,) = documents[0]["artifacts"]
    assert artifact["name"] == "log.txt" and artifact["data_base64"] == "AAFsb2c="
    assert read_jsonl(out) == documents


def test_export_then_import_gives_the_same_runs(source, tmp_path, dest):
    path, ids = source
    out = tmp_path / "runs.jsonl"
    _export(path, ids, out)
    assert out.read_bytes().isascii()
    report = import_jsonl([out], dest)
    assert report.totals() == {"copied": 3, "already_there": 0, "conflicts": 0,
                               "skipped_running": 0}  # fmt: skip
    assert _documents(dest) == _documents(path)
    with _open(dest) as store:
        (speedup, loss) = store.metrics(ids[1])
        assert speedup.value == math.inf and math.isnan(loss.value)
        assert store.read_artifact(ids[0], "log.txt") == b"\x00\x01log"
    again = import_jsonl([out], dest)
    assert again.totals()["already_there"] == 3 and again.totals()["copied"] == 0


def test_a_stream_can_be_read(source):
    path, ids = source
    buffer = io.StringIO()
    with _open(path) as store:
        write_jsonl(store, ids[:1], buffer)
    buffer.seek(0)
    (document,) = read_jsonl(buffer)
    assert document["run"]["run_id"] == ids[0]


def test_blank_lines_are_skipped(source, tmp_path):
    path, ids = source
    out = tmp_path / "runs.jsonl"
    _export(path, ids[:2], out)
    lines = out.read_text().splitlines()
    out.write_text(f"\n{lines[0]}\n\n{lines[1]}\n\n")
    assert [d["run"]["run_id"] for d in read_jsonl(out)] == ids[:2]


def _with_bad_line(source, tmp_path: Path, bad: str, at: int = 2) -> Path:
    path, ids = source
    out = tmp_path / "runs.jsonl"
    _export(path, ids, out)
    lines = out.read_text().splitlines()
    lines.insert(at, bad)
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ('{"format": "d5-run/1", "run": ', r"line 3 is not JSON \(Expecting value"),
        ("[1, 2]", "line 3: malformed run document: expected a JSON object"),
        ('{"format": "d5-run/9"}', r"line 3: run document of format 'd5-run/9'"),
        ('{"format": "csv"}', "line 3: malformed run document: format must be 'd5-run/1'"),
    ],
)
def test_a_malformed_line_is_named_by_file_and_line_and_nothing_is_imported(
    source, tmp_path, dest, bad, message
):
    out = _with_bad_line(source, tmp_path, bad)
    target = dest
    with _open(target) as store:
        kept = make_run(store, "kept")
    before = _documents(target)
    with pytest.raises(UsageError, match=message) as raised:
        import_jsonl([out], target)
    assert str(raised.value).startswith(f"{out} line 3")
    assert "\n" not in str(raised.value)
    assert _documents(target) == before and list(before) == [kept]


def test_a_bad_field_deep_in_a_document_is_named(source, tmp_path):
    path, ids = source
    with _open(path) as store:
        document = store.export_run(ids[0])
    document["measurements"][0]["samples"][1] = "fast"
    out = _with_bad_line(source, tmp_path, json.dumps(document), at=0)
    with pytest.raises(UsageError, match=r"line 1: .*measurements\[0\]\.samples\[1\]"):
        read_jsonl(out)


def test_a_bad_second_file_stops_the_import_of_the_first(source, tmp_path):
    path, ids = source
    good = tmp_path / "good.jsonl"
    _export(path, ids, good)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n")
    target = tmp_path / "target.sqlite"
    with pytest.raises(UsageError, match=r"bad\.jsonl line 1 is not JSON"):
        import_jsonl([good, bad], str(target))
    assert not target.exists()


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(UsageError, match=r"no file .*none\.jsonl; give a JSON Lines file"):
        read_jsonl(tmp_path / "none.jsonl")


def test_a_running_run_in_a_file_is_skipped(source, tmp_path):
    path, ids = source
    with _open(path) as store:
        document = store.export_run(ids[2])
    document["run"]["status"] = "running"
    out = tmp_path / "running.jsonl"
    out.write_text(json.dumps(document) + "\n")
    report = import_jsonl([out], str(tmp_path / "target.sqlite"))
    (part,) = report.sources
    assert (part.copied, part.running) == (0, [ids[2]])
