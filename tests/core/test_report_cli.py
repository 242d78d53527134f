"""``d5 report`` in-process against a temporary store (core lane: no plugin installed, runs
stored by hand): selecting runs, the hook's figures, the files written, and every bad
input as one line with exit 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from json_schema_doc import check

from d5core.api import hookimpl
from d5core.cli.output import read_json
from d5core.errors import UsageError
from d5core.levels.report import ReportFigure
from d5core.plugins import PluginManager
from d5core.report import build as report_build
from d5core.report.build import build_report, figure_family
from d5core.report.selection import select_runs
from d5core.report.style import new_figure
from d5core.report.writer import figures_folder, save_figures, svg_markup
from d5core.results import ResultsStore

ENV = {"cpu": {"model": "Test CPU", "logical_cores": 2}, "hostname": "testhost"}


def _store(db: Path) -> ResultsStore:
    return ResultsStore.open(db, manager=PluginManager({}, discover_installed=False))


def _op_run(store: ResultsStore, scale: float = 1.0, tags: tuple[str, ...] = ()) -> str:
    """An operator run as ``d5 bench op`` stores one: times and GFLOP/s per backend."""
    with store.run("op", "bench Gemm", environment=ENV, config={"op": "Gemm"}, tags=tags) as rid:
        for b, backend in enumerate(("numpy", "torch")):
            labels = {"backend": backend, "problem": "gemm m=64 n=64 k=64", "direction": "forward",
                      "dtype": "float32"}  # fmt: skip
            times = [scale * (1e-4 + b * 2e-5 + i * 1e-7) for i in range(12)]
            store.add_measurement(rid, "time", times, labels=labels, unit="s")
            store.add_measurement(
                rid, "gflops", [2 * 64**3 / t / 1e9 for t in times], labels=labels, unit="GFLOP/s"
            )
    return rid


def _train_run(store: ResultsStore, distributed: bool = False) -> str:
    config = {"recipe": "digits", "distributed": {"ranks": 2}} if distributed else {"recipe": "x"}
    with store.run("train", "digits-mlp", environment=ENV, config=config) as rid:
        store.add_measurement(rid, "loss", [2.0, 1.0, 0.5, 0.3], unit="loss")
        store.add_metric(rid, "final_test_accuracy", 0.9)
    return rid


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "results.sqlite"
    with _store(path) as store:
        _op_run(store, tags=("base",))
        _op_run(store, 1.02)
        _train_run(store)
    return path


class Recorder:
    """A plugin that draws one figure of the runs it is given and remembers each call."""

    def __init__(self, key: str = "mine-runs") -> None:
        self.calls: list[list[str]] = []
        self.key = key

    @hookimpl
    def d5_report_figures(self, runs):
        self.calls.append([r.id for r in runs])
        figure = new_figure(3, 2)
        figure.add_subplot().bar(range(len(runs)), [len(r.measurements) for r in runs])
        return [ReportFigure(self.key, "Measurements per run", "mine", figure,
                             {"counts": [len(r.measurements) for r in runs]},
                             runs=tuple(r.id for r in runs))]  # fmt: skip


class Broken:
    @hookimpl
    def d5_report_figures(self, runs):
        raise RuntimeError("no ink left")


def _bad(result, *needles: str) -> None:
    """Exit 2, one line on standard error naming ``needles``, no traceback."""
    assert result.exit_code == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("d5: error: ")
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# -- bad input --------------------------------------------------------------------------------


def test_an_unknown_run_id_is_one_line_exit_2(d5_cli, d5_plugin_manager, db, tmp_path):
    out = tmp_path / "r.html"
    _bad(d5_cli("report", "ffffffff", "--db", str(db), "-o", str(out)), "'ffffffff'")
    assert not out.exists()


def test_an_empty_selection_says_what_was_asked_and_what_the_database_holds(
    d5_cli, d5_plugin_manager, db, tmp_path
):
    out = str(tmp_path / "r.html")
    _bad(d5_cli("report", "--tag", "nope", "--db", str(db), "-o", out), "'nope'", "3 runs",
         "tags: base")  # fmt: skip
    _bad(d5_cli("report", "--kind", "net", "--db", str(db), "-o", out), "--kind net", "3 runs")
    _bad(d5_cli("report", "--kind", "dist", "--db", str(db), "-o", out), "--kind dist")


@pytest.mark.parametrize(
    ("output", "needle"),
    [("missing/r.html", "does not exist"), (".", "is a directory"), ("r.txt", ".html file")],
)
def test_a_bad_output_path_is_one_line_exit_2(
    d5_cli, d5_plugin_manager, db, tmp_path, output, needle
):
    _bad(d5_cli("report", "--db", str(db), "-o", str(tmp_path / output)), needle)
    assert not (tmp_path / "missing").exists()


def test_ids_with_filters_a_bad_last_and_an_unknown_kind_are_refused(
    d5_cli, d5_plugin_manager, db, tmp_path
):
    with _store(db) as store:
        rid = store.list_runs(limit=1)[0].id
    out = str(tmp_path / "r.html")
    _bad(d5_cli("report", rid, "--last", "2", "--db", str(db), "-o", out), "not both")
    _bad(d5_cli("report", "--last", "0", "--db", str(db), "-o", out), "--last", "got 0")
    _bad(
        d5_cli("report", "--kind", "lv9", "--db", str(db), "-o", out),
        "'lv9'",
        "op, net, train, dist",
    )
    _bad(d5_cli("report", "--formats", "gif", "--db", str(db), "-o", out), "'gif'")


def test_a_figure_of_another_kind_than_the_runs_names_them_and_the_kind_to_use(
    d5_cli, d5_plugin_manager, db, tmp_path
):
    with _store(db) as store:
        train = store.list_runs(kind="train")[0].id
    result = d5_cli(
        "report", "--figure", "op-roofline", "--db", str(db), "-o", str(tmp_path / "r.html")
    )
    _bad(result, "incompatible kinds", f"{train} (train)", "--kind op")
    assert not (tmp_path / "r.html").exists()


def test_a_figure_family_nobody_drew_lists_the_families_drawn(
    d5_cli, d5_plugin_manager, db, tmp_path
):
    d5_plugin_manager.register(Recorder(), "recorder")
    result = d5_cli(
        "report", "--figure", "mine-nothing", "--db", str(db), "-o", str(tmp_path / "r.html")
    )
    _bad(result, "'mine-nothing'", "mine-runs")


# -- a good report ----------------------------------------------------------------------------


def test_a_report_writes_the_page_and_a_png_and_pdf_of_every_figure(
    d5_cli, d5_plugin_manager, db, tmp_path
):
    recorder = Recorder()
    d5_plugin_manager.register(recorder, "recorder")
    out = tmp_path / "r.html"
    result = d5_cli("report", "--last", "3", "--db", str(db), "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    data = read_json(result.stdout, "report")
    check("report", data)
    with _store(db) as store:
        ids = [r.id for r in reversed(store.list_runs())]
    assert [r["run_id"] for r in data["runs"]] == ids  # oldest first
    assert recorder.calls == [ids]  # the hook is called once, with the selected runs
    assert data["path"] == str(out.resolve())
    page = out.read_text(encoding="utf-8")
    assert data["figures"], "no figure drawn"
    for figure in data["figures"]:
        assert set(figure["files"]) == {"png", "pdf"}
        png, pdf = (Path(figure["files"][f]) for f in ("png", "pdf"))
        assert png.parent == figures_folder(out) and png.name == f"{figure['key']}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert pdf.read_bytes()[:5] == b"%PDF-"
    assert page.count("<svg") >= len(data["figures"])
    assert "mine-runs" in {f["key"] for f in data["figures"]}
    assert "Measurements per run" in page
    assert set(data["seconds"]) == {"read", "figures", "save", "html", "total"}


def test_a_plugin_that_raises_is_named_while_the_other_figures_still_appear(
    d5_cli, d5_plugin_manager, db, tmp_path
):
    d5_plugin_manager.register(Broken(), "broken")
    d5_plugin_manager.register(Recorder(), "recorder")
    out = tmp_path / "r.html"
    result = d5_cli("report", "--db", str(db), "-o", str(out), "--json")
    assert result.exit_code == 0, result.stderr
    data = read_json(result.stdout, "report")
    problems = [p for p in data["problems"] if "'broken'" in p]
    assert len(problems) == 1 and "no ink left" in problems[0]
    plugins = {f["plugin"] for f in data["figures"]}
    assert "recorder" in plugins
    assert any("builtins" in p for p in plugins), data["figures"]  # d5's own still drawn
    assert "no ink left" in out.read_text(encoding="utf-8")


def test_the_text_output_names_the_page_the_sections_and_the_problems(
    d5_cli, d5_plugin_manager, db, tmp_path
):
    d5_plugin_manager.register(Broken(), "broken")
    d5_plugin_manager.register(Recorder(), "recorder")
    out = tmp_path / "r.html"
    result = d5_cli("report", "--db", str(db), "-o", str(out), "--formats", "png")
    assert result.exit_code == 0, result.stderr
    assert f"written to {out.resolve()}" in result.stdout
    assert re.search(r"^  mine: 1 figure$", result.stdout, re.M)
    assert "d5: warning: plugin 'broken' failed" in result.stderr
    assert not list(figures_folder(out).glob("*.pdf"))
    assert (figures_folder(out) / "mine-runs.png").is_file()


# -- selection --------------------------------------------------------------------------------


def test_selection_by_id_prefix_filters_and_kinds(tmp_path):
    with _store(tmp_path / "s.sqlite") as store:
        op1 = _op_run(store, tags=("nightly",))
        train = _train_run(store)
        dist = _train_run(store, distributed=True)
        with store.run("comm", "allreduce", environment=ENV) as comm:
            pass
        op2 = _op_run(store, tags=("nightly",))
        ids = lambda runs: [r.id for r in runs]  # noqa: E731
        assert ids(select_runs(store, [op2[:8], op1, op2])) == [op1, op2]
        assert ids(select_runs(store, last=2)) == [comm, op2]
        assert ids(select_runs(store, kind="train")) == [train]
        assert ids(select_runs(store, kind="dist")) == [dist, comm]
        assert ids(select_runs(store, kind="op", tag="nightly", last=1)) == [op2]
        assert ids(select_runs(store)) == [op1, train, dist, comm, op2]
        with pytest.raises(UsageError, match="tags: nightly"):
            select_runs(store, tag="weekly")


def test_kind_algorithms_selects_the_trial_records_of_algorithm_campaigns(tmp_path):
    with _store(tmp_path / "s.sqlite") as store:
        _train_run(store)
        with store.run("algorithm-trial", "cpu/digits-mlp/adam", environment=ENV) as trial:
            pass
        assert [r.id for r in select_runs(store, kind="algorithms")] == [trial]


# -- building ---------------------------------------------------------------------------------


class NotAFigure:
    @hookimpl
    def d5_report_figures(self, runs):
        return ["a caption, not a figure"]


def test_a_key_drawn_twice_keeps_the_first_drawn_and_names_both_plugins(db, tmp_path):
    manager = PluginManager({}, discover_installed=False)
    manager.register(Recorder("dup-key"), "first")
    manager.register(Recorder("dup-key"), "second")
    manager.register(NotAFigure(), "words")
    with _store(db) as store:
        runs = select_runs(store)
        document = build_report(store, runs, output=tmp_path / "r.html", selection="all",
                                manager=manager, jobs=1)  # fmt: skip
    (kept,) = [f for f in document.figures if f.figure.key == "dup-key"]
    other = ({"first", "second"} - {kept.plugin}).pop()  # pluggy calls the last registered first
    assert (
        f"figure 'dup-key' of plugin '{other}' left out: plugin '{kept.plugin}' drew a figure "
        "with that key first"
    ) in document.problems
    assert (
        "plugin 'words' returned a str from d5_report_figures, not a ReportFigure; left out"
    ) in document.problems


def test_figures_beyond_the_cap_are_left_out_and_said_each_section_keeping_some(
    db, tmp_path, monkeypatch
):
    class Many:
        @hookimpl
        def d5_report_figures(self, runs):
            sections = ("mine", "mine", "mine", "other")
            return [ReportFigure(f"many-{i}", f"n{i}", section, new_figure(2, 2), {"i": i})
                    for i, section in enumerate(sections)]  # fmt: skip

    monkeypatch.setattr(report_build, "MAX_FIGURES", 2)
    manager = PluginManager({}, discover_installed=False)
    manager.register(Many(), "many")
    with _store(db) as store:
        document = build_report(store, select_runs(store, kind="train"), output=tmp_path / "r.html",
                                selection="--kind train", manager=manager, figures=["many"],
                                formats=(), jobs=1)  # fmt: skip
    assert [f.figure.key for f in document.figures] == ["many-0", "many-3"]
    assert any(
        "2 of 4 figures left out" in p and "(many-1, many-2)" in p for p in document.problems
    )
    assert all(f.files == {} for f in document.figures)


def test_saved_figures_are_inline_svg_without_prolog_and_stale_copies_go(tmp_path):
    page = tmp_path / "p.html"
    folder = figures_folder(page)
    folder.mkdir()
    (folder / "old-figure.png").write_bytes(b"x")
    (folder / "notes.txt").write_text("mine")
    figures = []
    for key in ("a-one", "a-two"):
        fig = new_figure(2, 2)
        fig.add_subplot().plot([0, 1], [1, 0])
        figures.append(ReportFigure(key, key, "mine", fig, {}))
    saved = save_figures(figures, page, jobs=2)
    assert [s.error for s in saved] == [None, None]
    for s, key in zip(saved, ("a-one", "a-two"), strict=True):
        assert s.svg.startswith("<svg") and s.svg.endswith("</svg>")
        assert "<?xml" not in s.svg and "<!DOCTYPE" not in s.svg and "<!--" not in s.svg
        assert s.files == {"png": f"p_figures/{key}.png", "pdf": f"p_figures/{key}.pdf"}
    assert sorted(p.name for p in folder.iterdir()) == [
        "a-one.pdf", "a-one.png", "a-two.pdf", "a-two.png", "notes.txt"
    ]  # fmt: skip
    assert (
        svg_markup('<?xml version="1.0"?>\n<!DOCTYPE svg PUBLIC "x" "y">\n<!-- c --><svg/>')
        == "<svg/>"
    )


def test_a_figure_family_is_the_first_two_parts_of_its_key():
    assert figure_family("op-samples-gemm-3f2a") == "op-samples"
    assert figure_family("history-operators") == "history-operators"
    assert figure_family("mine") == "mine"
