"""Level 2 figures of real ``d5 run`` repeats: the digits recipe on numpy, twice."""

from __future__ import annotations

import io
from pathlib import Path

from d5core.levels.report import ReportRun
from d5core.lv2 import figures as training
from d5core.lv2.training_table import training_table
from d5core.results.store import ResultsStore

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"


def test_two_real_repeats_are_drawn_as_stored(d5_cli, tmp_path: Path) -> None:
    db = tmp_path / "results.sqlite"
    result = d5_cli(
        "run", str(RECIPE), "--set", "executor=numpy", "--set", "batch_size=64",
        "--repeat", "2", "--db", str(db),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    with ResultsStore.open(db) as store:
        records = store.list_runs(kind="train")
        assert len(records) == 2
        runs = [ReportRun.from_stored(s) for s in store.read_runs([r.id for r in records])]
        samples = {
            (r.id, m.metric): store.samples(m.id) for r in records for m in store.measurements(r.id)
        }
        (row,) = training_table(store, records, "executor")

    (fig,) = training.figures(runs)
    assert fig.section == "training" and set(fig.runs) == {r.id for r in records}
    assert fig.data["settings"] == ["executor=numpy"]
    assert fig.data["targets"] == {"target_accuracy": [0.9]}
    for metric in ("loss", "test_accuracy"):
        curve = fig.data["curves"][metric]
        assert curve["stride"] == 1
        lines = curve["settings"]["executor=numpy"]["runs"]
        for run in records:
            assert lines[run.id]["y"] == samples[(run.id, metric)]
            assert lines[run.id]["x"][-1] == len(samples[(run.id, metric)])
        band = curve["settings"]["executor=numpy"]["band"]
        common = min(len(samples[(r.id, metric)]) for r in records)
        assert len(band["x"]) == common
        for i in range(common):
            values = [samples[(r.id, metric)][i] for r in records]
            assert (band["low"][i], band["high"][i]) == (min(values), max(values))
    entry = fig.data["time_to_target"]["time_to_accuracy"]["executor=numpy"]
    assert entry["runs"] == 2 and entry["missed"] == 2 - row["reached_target"]
    assert entry["olympic_mean"] == row["time_to_accuracy"]["olympic_mean"]
    stored_times = sorted(t for r in runs if (t := r.metric_value("time_to_accuracy")) is not None)
    assert sorted(entry["times"]) == stored_times
    svg = io.BytesIO()
    fig.figure.savefig(svg, format="svg")
    text = svg.getvalue().decode()
    assert "time to accuracy" in text and "target accuracy 0.9" in text
