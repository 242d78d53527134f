"""The networks section's figures of a real ``d5 bench net`` run."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from d5core.cli.output import read_json
from d5core.levels.report import ReportRun
from d5core.lv1 import figures as networks
from d5core.results.store import ResultsStore


def test_figures_of_a_real_bench_net_run_show_every_executor(tmp_path: Path, d5_cli) -> None:
    db = tmp_path / "results.sqlite"
    result = d5_cli(
        "bench", "net", "mlp", "--executors", "numpy,torch", "--batch", "4", "--processes", "2",
        "--time-budget", "0.05", "--warmup", "1", "--breakdown", "--json", "--db", str(db),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = read_json(result.stdout)
    run_id = rows[0]["run_id"]
    with ResultsStore.open(db) as store:
        runs = [ReportRun.from_stored(s) for s in store.read_runs([run_id])]
        records = store.measurements(run_id)
        samples = {m.labels["executor"]: store.samples(m.id) for m in records if m.metric == "time"}
        rates = {
            m.labels["executor"]: m.summary["nested"] for m in records if m.metric == "throughput"
        }

    found = networks.figures(runs)
    assert [f.key.split("-")[1] for f in found] == ["steps", "breakdown"]
    steps, breakdown = found
    assert [s["executor"] for s in steps.data["series"]] == ["numpy", "torch"]
    assert [s["executor"] for s in breakdown.data["series"]] == ["numpy", "torch"]
    for series, row in zip(steps.data["series"], rows, strict=True):
        assert series["time"]["samples"] == samples[series["executor"]]
        assert series["time"]["median"] == row["median"]
        # the stored throughput samples' headline (median of the process medians)
        rate = rates[series["executor"]]
        assert series["throughput"] == {
            "median": rate["median"], "ci_low": rate["ci_low"], "ci_high": rate["ci_high"],
        }  # fmt: skip
    assert steps.data["bases"][0]["executor"] == "numpy"
    for series, row in zip(breakdown.data["series"], rows, strict=True):
        medians = {(n["node"], n["direction"]): n["median"] for n in row["breakdown"]}
        assert {(n["node"], n["direction"]): n["median"] for n in series["nodes"]} == medians
        assert series["node_sum"] == pytest.approx(row["breakdown_sum"])
    for figure in found:
        svg = io.StringIO()
        figure.figure.savefig(svg, format="svg")
        assert "numpy" in svg.getvalue() and "torch" in svg.getvalue()
