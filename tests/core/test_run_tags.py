"""Tags on runs: stored with the run, read back sorted, added later, used to select runs
(``ResultsStore.list_runs(tag=)``, ``d5 results list --tag``), shown by ``d5 results
show``, and refused with a one-line error (exit 2) before any work when they are bad."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5core.cli.output import read_json
from d5core.errors import UsageError
from d5core.plugins import PluginManager
from d5core.results import ResultsStore
from d5core.results.tags import MAX_TAG_LENGTH, check_tag, check_tags

ENV = {"cpu": {"model": "Test CPU", "logical_cores": 2}, "packages": {"d5core": "0.1.0"}}

BAD_TAGS = [
    ("", "must not be empty"),
    ("   ", "must not be empty"),
    (" padded", "starts or ends with blanks"),
    ("x" * (MAX_TAG_LENGTH + 1), f"at most {MAX_TAG_LENGTH}"),
    ("bell\x07", "control characters"),
    ("two\nlines", "control characters"),
]


def _open(db: Path) -> ResultsStore:
    return ResultsStore.open(db, manager=PluginManager({}, discover_installed=False))


@pytest.fixture
def tagged(tmp_path: Path) -> dict[str, object]:
    """Three runs: ``a`` tagged baseline and 'quoted "x"', ``b`` tagged baseline, ``c``
    untagged (of kind net)."""
    db = tmp_path / "r.sqlite"
    with _open(db) as store:
        with store.run("op", "a", environment=ENV, tags=['quoted "x"', "baseline"]) as a:
            store.add_metric(a, "passed", 1.0)
        b = store.begin_run("op", "b", environment=ENV, tags=["baseline", "baseline"])
        store.finish_run(b)
        with store.run("net", "c", environment=ENV) as c:
            pass
    return {"db": db, "a": a, "b": b, "c": c}


# -- the store ---------------------------------------------------------------------------


def test_tags_are_stored_once_each_and_read_back_sorted(tagged):
    with _open(tagged["db"]) as store:
        assert store.get_run(tagged["a"]).tags == ("baseline", 'quoted "x"')
        assert store.get_run(tagged["b"]).tags == ("baseline",)
        assert store.get_run(tagged["c"]).tags == ()
        assert store.tag_names() == {"baseline": 2, 'quoted "x"': 1}
        assert store.get_run(tagged["a"]).to_json()["tags"] == ["baseline", 'quoted "x"']


def test_list_runs_selects_by_tag_and_kind(tagged):
    with _open(tagged["db"]) as store:
        assert [r.id for r in store.list_runs(tag="baseline")] == [tagged["b"], tagged["a"]]
        assert [r.id for r in store.list_runs(tag='quoted "x"')] == [tagged["a"]]
        assert store.list_runs(tag="nope") == []
        assert store.list_runs(tag="baseline", kind="net") == []
        assert [r.id for r in store.list_runs(tag="baseline", limit=1)] == [tagged["b"]]


def test_add_tags_tags_a_finished_run_and_ignores_repeats(tagged):
    with _open(tagged["db"]) as store:
        store.add_tags(tagged["c"][:6], ["later", "baseline"])
        store.add_tags(tagged["c"], ["later"])
        assert store.get_run(tagged["c"]).tags == ("baseline", "later")
        assert store.tag_names()["baseline"] == 3
        with pytest.raises(UsageError, match="no run"):
            store.add_tags("ffffffffffff", ["x"])


@pytest.mark.parametrize(("tag", "message"), BAD_TAGS)
def test_bad_tags_are_refused_and_nothing_is_stored(tag, message, tmp_path):
    with pytest.raises(UsageError, match=message):
        check_tag(tag)
    db = tmp_path / "r.sqlite"
    with _open(db) as store:
        with pytest.raises(UsageError, match=message):
            store.begin_run("op", "x", environment=ENV, tags=["fine", tag])
        assert store.list_runs() == []
        rid = store.begin_run("op", "y", environment=ENV)
        with pytest.raises(UsageError, match=message):
            store.add_tags(rid, [tag])
        assert store.get_run(rid).tags == ()


def test_check_tags_keeps_the_first_order_and_allows_printable_text():
    assert check_tags(["b", "a", "b", "<script>", "Größe"]) == ("b", "a", "<script>", "Größe")
    assert check_tag("x" * MAX_TAG_LENGTH) == "x" * MAX_TAG_LENGTH
    with pytest.raises(UsageError, match="must be text"):
        check_tag(3)


# -- the command line --------------------------------------------------------------------


def test_results_list_tag_selects_the_tagged_runs(tagged, d5_cli):
    db = str(tagged["db"])
    result = d5_cli("results", "list", "--db", db, "--tag", "baseline", "--json")
    assert result.exit_code == 0, result.stderr
    rows = read_json(result.stdout, "results list")
    assert [r["run_id"] for r in rows] == [tagged["b"], tagged["a"]]
    assert rows[1]["tags"] == ["baseline", 'quoted "x"']
    result = d5_cli("results", "list", "--db", db, "--tag", "baseline", "--kind", "net", "--json")
    assert read_json(result.stdout, "results list") == []


def test_results_list_table_shows_tags_and_names_known_tags_when_none_match(tagged, d5_cli):
    db = str(tagged["db"])
    result = d5_cli("results", "list", "--db", db, "--tag", 'quoted "x"')
    assert result.exit_code == 0, result.stderr
    assert tagged["a"] in result.stdout and tagged["b"] not in result.stdout
    assert "tags" in result.stdout
    result = d5_cli("results", "list", "--db", db, "--tag", "nope")
    assert result.exit_code == 0, result.stderr
    assert "no runs in" in result.stdout and "tagged 'nope'" in result.stdout
    assert "'baseline'" in result.stdout


def test_results_show_prints_the_tags(tagged, d5_cli):
    result = d5_cli("results", "show", tagged["a"], "--db", str(tagged["db"]))
    assert result.exit_code == 0, result.stderr
    assert 'tags   baseline, quoted "x"' in result.stdout
    untagged = d5_cli("results", "show", tagged["c"], "--db", str(tagged["db"]))
    assert "tags " not in untagged.stdout


@pytest.mark.parametrize(
    "command",
    [
        ("results", "list"),
        ("bench", "op", "Gemm", "--backends", "numpy", "--shape", "4x4,4x4"),
        ("bench", "net", "mlp", "--executors", "numpy"),
        ("run", "no-such-recipe.toml"),
        ("validate", "op", "Relu", "--backend", "numpy"),
        ("validate", "net", "mlp", "--executor", "numpy"),
        ("conformance", "numpy", "--pattern", "^test_relu$"),
    ],
)
@pytest.mark.parametrize(("tag", "message"), BAD_TAGS[:1] + BAD_TAGS[3:5])
def test_a_bad_tag_is_a_one_line_usage_error_before_any_work(
    command, tag, message, tmp_path, d5_cli
):
    db = tmp_path / "r.sqlite"
    result = d5_cli(*command, "--tag", "fine", "--tag", tag, "--db", str(db))
    assert result.exit_code == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("d5: error: ") and message in lines[0]
    assert not db.exists()  # refused before the store was opened
