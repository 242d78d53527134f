"""Issue 28, section 4 ("busy-machine runs"): a value measured on a busy machine is
marked wherever it is shown, with a line saying what the mark means: every
``d5 results table`` kind (op, net, train), ``d5 results list``, ``d5 results compare``
(operator and inference runs) and every figure and the runs table of ``d5 report``.

Load is simulated: ``os.getloadavg`` returns what the test says when the store begins
and finishes each run."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from d5core.cli.output import read_json
from d5core.plugins import PluginManager
from d5core.results import ResultsStore
from d5core.results.load import BUSY_LEGEND, BUSY_MARK, LoadAverage, busy_note, was_busy

ENV = {"packages": {"d5core": "0.1.0"}, "cpu": {"model": "Test CPU", "logical_cores": 4}}
QUIET = (0.2, 0.2, 0.2)
BUSY = (9.0, 6.0, 3.0)  # 2.25 per core on 4 cores
OP_LABELS = {"problem": "gemm m=512 n=16 k=512", "direction": "forward", "dtype": "float32"}


@pytest.fixture
def load(monkeypatch) -> Iterator[list[tuple[float, float, float]]]:
    """Each read of the load average returns (and removes) the first item of the list."""
    values: list[tuple[float, float, float]] = []
    monkeypatch.setattr(os, "getloadavg", lambda: values.pop(0))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    yield values


def _open(db: Path) -> ResultsStore:
    return ResultsStore.open(db, manager=PluginManager({}, discover_installed=False))


def _op(db: Path, load: list, busy: bool, backend: str, seconds: float) -> str:
    """An operator benchmark stored as ``d5 bench op`` stores one, at a quiet or busy load."""
    load[:] = [BUSY if busy else QUIET, QUIET]
    with _open(db) as store, store.run("op", "bench Gemm", config={"op": "Gemm"},
                                       environment=ENV) as rid:  # fmt: skip
        samples = [seconds * (1 + i / 100) for i in range(9)]
        store.add_measurement(rid, "time", samples, labels={"backend": backend, **OP_LABELS})
    return rid


def _net(db: Path, load: list, busy: bool, executor: str) -> str:
    load[:] = [QUIET, BUSY if busy else QUIET]
    with _open(db) as store, store.run("net", "bench lenet5", config={"model": "lenet5"},
                                       environment=ENV) as rid:  # fmt: skip
        labels = {"executor": executor, "mode": "inference", "batch": 32}
        store.add_measurement(rid, "time", [1e-3] * 8, labels=labels)
    return rid


def _train(db: Path, load: list, busy: bool) -> str:
    load[:] = [BUSY if busy else QUIET, QUIET]
    settings = {"executor": "numpy", "target_accuracy": 0.9}
    with _open(db) as store, store.run("train", "digits-mlp", config={"settings": settings},
                                       environment=ENV, recipe_hash="h") as rid:  # fmt: skip
        store.add_metric(rid, "time_to_accuracy", 3.0, unit="s")
        store.add_metric(rid, "final_test_accuracy", 0.95)
    return rid


def _flat(text: str) -> str:
    return " ".join(text.split())


# -- the rule ------------------------------------------------------------------------------


def test_a_run_is_busy_when_its_start_or_end_load_is_above_one_per_core():
    quiet, busy = LoadAverage(*QUIET, cores=4), LoadAverage(*BUSY, cores=4)
    assert not was_busy(quiet, quiet) and not was_busy(None, None)
    assert was_busy(busy, None) and was_busy(quiet, busy)
    assert busy_note("abc", quiet, quiet) is None
    note = busy_note("abc", busy, quiet)
    assert note is not None and note.startswith(f"{BUSY_MARK} run abc: the machine was busy")


# -- d5 results table ------------------------------------------------------------------------


def test_the_operator_table_marks_a_cell_measured_on_a_busy_machine(tmp_path, load, d5_cli):
    db = tmp_path / "r.sqlite"
    _op(db, load, False, "numpy", 1e-4)
    busy = _op(db, load, True, "torch", 1.6e-2)  # the Gemm at "16 ms" under load
    doc = d5_cli("results", "table", "--last", "5", "--kind", "op", "--json", "--db", str(db))
    assert doc.exit_code == 0, doc.stderr
    (row,) = read_json(doc.stdout)
    assert row["cells"]["torch"]["busy"] is True and row["cells"]["torch"]["run_id"] == busy
    assert row["cells"]["torch"]["load_per_core"] == pytest.approx(2.25)
    assert row["cells"]["numpy"]["busy"] is False
    assert busy in doc.stderr and BUSY_LEGEND in _flat(doc.stderr)

    text = d5_cli("results", "table", "--last", "5", "--kind", "op", "--db", str(db))
    assert text.exit_code == 0, text.stderr
    assert text.stdout.count(BUSY_MARK) >= 2  # the cell and the legend line
    assert _flat(BUSY_LEGEND) in _flat(text.stdout)


def test_a_table_of_quiet_runs_has_no_busy_mark_or_legend(tmp_path, load, d5_cli):
    db = tmp_path / "r.sqlite"
    _op(db, load, False, "numpy", 1e-4)
    text = d5_cli("results", "table", "--last", "5", "--kind", "op", "--db", str(db))
    assert text.exit_code == 0, text.stderr
    assert BUSY_MARK not in text.stdout and BUSY_MARK not in text.stderr


def test_the_network_table_marks_a_cell_measured_on_a_busy_machine(tmp_path, load, d5_cli):
    db = tmp_path / "r.sqlite"
    _net(db, load, False, "numpy")
    busy = _net(db, load, True, "torch")
    doc = d5_cli("results", "table", "--last", "5", "--kind", "net", "--json", "--db", str(db))
    (row,) = read_json(doc.stdout)
    assert (row["cells"]["torch"]["busy"], row["cells"]["numpy"]["busy"]) == (True, False)
    assert busy in doc.stderr
    text = d5_cli("results", "table", "--last", "5", "--kind", "net", "--db", str(db)).stdout
    assert BUSY_MARK in text and _flat(BUSY_LEGEND) in _flat(text)


def test_the_training_table_counts_and_marks_busy_runs(tmp_path, load, d5_cli):
    db = tmp_path / "r.sqlite"
    _train(db, load, False)
    busy = _train(db, load, True)
    doc = d5_cli("results", "table", "--last", "5", "--json", "--db", str(db))
    assert doc.exit_code == 0, doc.stderr
    (row,) = read_json(doc.stdout)
    assert row["busy_runs"] == [busy] and busy in doc.stderr
    text = d5_cli("results", "table", "--last", "5", "--db", str(db)).stdout
    assert f"1 {BUSY_MARK}" in text and _flat(BUSY_LEGEND) in _flat(text)


def test_the_list_of_runs_marks_a_busy_run(tmp_path, load, d5_cli):
    db = tmp_path / "r.sqlite"
    _op(db, load, False, "numpy", 1e-4)
    _op(db, load, True, "numpy", 1e-4)
    out = d5_cli("results", "list", "--db", str(db)).stdout
    assert out.count(f"complete {BUSY_MARK}") == 1
    assert _flat(BUSY_LEGEND) in _flat(out)


# -- d5 results compare ------------------------------------------------------------------------


def test_compare_marks_the_figures_of_the_busy_side(tmp_path, load, d5_cli):
    db = tmp_path / "r.sqlite"
    quiet = _op(db, load, False, "numpy", 1e-4)
    busy = _op(db, load, True, "numpy", 1.6e-2)
    doc = read_json(d5_cli("results", "compare", quiet, busy, "--json", "--db", str(db)).stdout)
    assert (doc["load"]["baseline"]["busy"], doc["load"]["candidate"]["busy"]) == (False, True)
    out = d5_cli("results", "compare", quiet, busy, "--db", str(db)).stdout
    (line,) = [x for x in out.splitlines() if x.startswith("│ time")]
    cells = [c.strip() for c in line.split("│")]
    assert BUSY_MARK not in cells[3] and BUSY_MARK in cells[4]  # baseline, candidate
    assert _flat(BUSY_LEGEND) in _flat(out)


def test_an_inference_comparison_marks_a_busy_run(tmp_path, load):
    from d5core.report.comparison import compare_runs

    rng = np.random.default_rng(0)
    latencies = [float(v) for v in rng.uniform(1e-3, 1.2e-3, 50)]
    load[:] = [QUIET, QUIET, BUSY, BUSY]
    with _open(tmp_path / "r.sqlite") as store:
        ids = []
        for _ in range(2):
            with store.run("inference", "inference lenet5 server", environment=ENV) as rid:
                store.add_measurement(rid, "latency", latencies, unit="s", better="lower",
                                      labels={"executor": "numpy"})  # fmt: skip
                store.add_metric(rid, "qps", 100.0, unit="samples/s", better="higher")
            ids.append(rid)
        c = compare_runs(store, *ids)
    assert (c.load["baseline"]["busy"], c.load["candidate"]["busy"]) == (False, True)
    assert any(w.startswith(f"candidate {ids[1]}: the machine was busy") for w in c.warnings())


# -- d5 report ------------------------------------------------------------------------------


def test_every_report_figure_of_a_busy_run_and_the_runs_table_carry_the_mark(
    tmp_path, load, d5_cli, d5_plugin_manager
):
    db = tmp_path / "r.sqlite"
    quiet = _op(db, load, False, "numpy", 1e-4)
    busy = _op(db, load, True, "numpy", 1.6e-2)
    out = tmp_path / "r.html"
    result = d5_cli("report", quiet, busy, "--db", str(db), "-o", str(out), "--json",
                    "--formats", "png")  # fmt: skip
    assert result.exit_code == 0, result.stderr
    figures = read_json(result.stdout, "report")["figures"]
    page = out.read_text(encoding="utf-8")
    blocks = page.split('<figure class="d5-figure"')[1:]
    assert len(blocks) == len(figures) >= 2
    for block in blocks:  # each figure here draws both runs
        assert f"⚠ {BUSY_MARK} run {busy}: the machine was busy" in block
        assert f"{BUSY_MARK} run {quiet}" not in block
    runs_table = page[page.index('<section id="runs">') :]
    runs_table = runs_table[: runs_table.index("</section>")]
    assert runs_table.count('class="busy"') == 1 and f"⚠ {BUSY_LEGEND}" in runs_table


def test_a_plugin_figure_of_a_busy_run_gets_the_note_too(tmp_path, load):
    from matplotlib.figure import Figure

    from d5core.levels.report import ReportFigure
    from d5core.report.build import busy_notes
    from d5core.testing.report_runs import report_runs

    db = tmp_path / "r.sqlite"
    ids = [_op(db, load, busy, "numpy", 1e-4) for busy in (False, True, True, True, True)]
    with _open(db) as store:
        runs = {r.id: r for r in report_runs(store, ids)}
    figure = ReportFigure("mine", "mine", "operators", Figure(), {}, runs=tuple(ids))
    notes = busy_notes(figure, runs)
    assert [n.split(":")[0] for n in notes[:3]] == [f"{BUSY_MARK} run {i}" for i in ids[1:4]]
    assert notes[3] == "and 1 more busy run(s)" and notes[4] == BUSY_LEGEND
    assert busy_notes(dataclass_replace(figure, runs=(ids[0],)), runs) == ()


def dataclass_replace(figure, **changes):
    import dataclasses

    return dataclasses.replace(figure, **changes)


def test_the_picture_of_a_busy_figure_says_so_for_its_png_and_pdf_copies(tmp_path, load):
    from matplotlib.figure import Figure

    from d5core.levels.report import ReportFigure
    from d5core.report.build import mark_busy_runs
    from d5core.testing.report_runs import report_runs

    db = tmp_path / "r.sqlite"
    ids = [_op(db, load, busy, "numpy", 1e-4) for busy in (False, True, True, True, True)]
    with _open(db) as store:
        runs = report_runs(store, ids)
    busy, quiet = (ReportFigure(k, k, "operators", Figure(), {}, runs=tuple(r)) for k, r in
                   (("busy", ids), ("quiet", ids[:1])))  # fmt: skip
    mark_busy_runs([busy, quiet], runs)
    assert [t.get_text() for t in busy.figure.texts] == [
        f"{BUSY_MARK}: 4 run(s) measured on a busy machine"
    ]
    assert quiet.figure.texts == [] and quiet.notes == ()
    assert len(busy.notes) == 5
