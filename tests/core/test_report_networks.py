"""The networks section's figures draw exactly what ``d5 bench net`` stores.

Runs are stored by hand in a temporary database the way ``d5 bench net`` stores them
(samples with their process, the nested summary made by the same public functions),
then read back as a report reads them.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from pathlib import Path

import pytest

from d5core.levels.report import ReportFigure
from d5core.lv1 import figures as networks
from d5core.results.store import ResultsStore
from d5core.testing.report_runs import (
    nested_headline,
    report_runs,
    store_nested,
    stored_measurement,
    stored_metric,
)

#: Step times per process, in seconds, by executor.
STEPS = {
    "numpy": [[0.010, 0.011, 0.012, 0.010], [0.011, 0.013, 0.012], [0.010, 0.012, 0.011]],
    "torch": [[0.004, 0.005, 0.0045], [0.005, 0.0042, 0.0048, 0.0044], [0.0046, 0.0043]],
}

#: Per-node samples (node, op_type, direction, samples), by executor.
NODES = {
    "numpy": [
        ("conv0", "Conv", "forward", [0.004, 0.005, 0.0045]),
        ("conv1", "Conv", "forward", [0.003, 0.0031, 0.0029]),
        ("relu0", "Relu", "forward", [0.0005, 0.0006, 0.0004]),
        ("gemm0", "Gemm", "forward", [0.001, 0.0011, 0.0012]),
    ],
    "torch": [
        ("conv0", "Conv", "forward", [0.002, 0.0021, 0.0019]),
        ("conv0", "Conv", "backward", [0.001, 0.0012, 0.0011]),
        ("gemm0", "Gemm", "forward", [0.0004, 0.0005, 0.0003]),
    ],
}


def store_net_run(
    store: ResultsStore,
    *,
    model: str = "lenet5",
    batch: int = 8,
    mode: str = "inference",
    steps: dict[str, list[list[float]]] | None = None,
    nodes: dict[str, list[tuple[str, str, str, list[float]]]] | None = None,
    host: str = "host-a",
    scale: float = 1.0,
) -> str:
    """Store a ``net`` run as ``d5 bench net`` does; ``scale`` multiplies every time."""
    steps = STEPS if steps is None else steps
    config = {"model": model, "executors": list(steps), "batch": batch, "mode": mode}
    environment = {"hostname": host, "cpu": {"model": "Test CPU"}}
    run_id = store.begin_run("net", f"bench {model}", config=config, environment=environment)
    for executor, per_process in steps.items():
        labels = {"executor": executor, "mode": mode, "batch": batch}
        times = [[v * scale for v in values] for values in per_process]
        store_nested(store, run_id, "time", times, labels=labels, unit="s")
        rates = [[batch / v for v in values] for values in times]
        store_nested(store, run_id, "throughput", rates, labels=labels, unit="samples/s")
        node_sum = 0.0
        for node, op_type, direction, samples in (nodes or {}).get(executor, []):
            node_labels = {**labels, "node": node, "op_type": op_type, "direction": direction}
            store.add_measurement(run_id, "node_time", samples, labels=node_labels)
            node_sum += statistics.median(samples)
        if nodes and executor in nodes:
            store.add_metric(run_id, "node_time_sum", node_sum, labels=labels, unit="s")
    store.finish_run(run_id)
    return run_id


@pytest.fixture
def store(tmp_path: Path) -> ResultsStore:
    with ResultsStore.open(tmp_path / "results.sqlite") as opened:
        yield opened


def by_key(found: Sequence[ReportFigure], prefix: str) -> list[ReportFigure]:
    return [f for f in found if f.key.startswith(prefix)]


def test_steps_figure_draws_the_stored_samples_medians_and_cis(store: ResultsStore) -> None:
    run_id = store_net_run(store)
    found = networks.figures(report_runs(store, [run_id]))
    (steps,) = by_key(found, "net-steps-")
    assert steps.section == "networks" and steps.runs == (run_id,)
    assert steps.notes == ()
    data = steps.data
    json.dumps(data)  # plain JSON types only
    assert (data["model"], data["mode"], data["batch"]) == ("lenet5", "inference", 8)
    assert [s["executor"] for s in data["series"]] == ["numpy", "torch"]
    for series in data["series"]:
        executor = series["executor"]
        time = stored_measurement(store, run_id, "time", executor=executor)
        assert series["time"]["samples"] == store.samples(time.id)
        assert series["time"]["samples"] == [v for p in STEPS[executor] for v in p]
        median, low, high = nested_headline(time.summary)
        assert (series["time"]["median"], series["time"]["ci_low"], series["time"]["ci_high"]) == (
            median, low, high,
        )  # fmt: skip
        # three processes: the between-process interval, not the pooled samples' one
        assert median == statistics.median([statistics.median(p) for p in STEPS[executor]])
        rate = stored_measurement(store, run_id, "throughput", executor=executor)
        assert tuple(series["throughput"].values()) == nested_headline(rate.summary)
    numpy_rate = data["series"][0]["throughput"]["median"]
    torch_rate = data["series"][1]["throughput"]["median"]
    assert data["series"][0]["ratio"] == 1.0
    assert data["series"][1]["ratio"] == pytest.approx(torch_rate / numpy_rate)
    assert data["bases"] == [
        {
            "run": run_id,
            "executor": "numpy",
            "throughput": numpy_rate,
        }
    ]


def test_a_ratio_names_its_base_and_the_base_absolute_figure(store: ResultsStore) -> None:
    run_id = store_net_run(store)
    (steps,) = by_key(networks.figures(report_runs(store, [run_id])), "net-steps-")
    base_rate = steps.data["bases"][0]["throughput"]
    named = f"numpy = 1.00 ({base_rate:,.0f} samples/s)"
    assert named in steps.caption
    rate_ax = steps.figure.axes[1]
    assert named in " ".join(rate_ax.get_title().split())
    ratio = steps.data["series"][1]["ratio"]
    assert f"{ratio:.2f}×" in [t.get_text() for t in rate_ax.texts]


def test_the_base_is_the_first_executor_the_run_lists(store: ResultsStore) -> None:
    run_id = store_net_run(store, steps={"torch": STEPS["torch"], "numpy": STEPS["numpy"]})
    (steps,) = by_key(networks.figures(report_runs(store, [run_id])), "net-steps-")
    assert [s["executor"] for s in steps.data["series"]] == ["torch", "numpy"]
    assert steps.data["bases"][0]["executor"] == "torch"
    assert "torch = 1.00" in steps.caption


def test_breakdown_draws_the_stored_node_medians_against_the_step(store: ResultsStore) -> None:
    run_id = store_net_run(store, nodes=NODES)
    found = networks.figures(report_runs(store, [run_id]))
    (breakdown,) = by_key(found, "net-breakdown-")
    data = breakdown.data
    json.dumps(data)
    # forward and backward are told apart: torch stored both directions
    assert "Conv (backward)" in data["segments"] and "Conv (forward)" in data["segments"]
    for series in data["series"]:
        executor = series["executor"]
        assert len(series["nodes"]) == len(NODES[executor])
        for node in series["nodes"]:
            record = stored_measurement(
                store, run_id, "node_time", executor=executor, node=node["node"],
                direction=node["direction"],
            )  # fmt: skip
            assert node["median"] == record.summary["median"]
            assert node["op_type"] == record.labels["op_type"]
        metric = stored_metric(store, run_id, "node_time_sum", executor=executor)
        assert series["node_sum"] == pytest.approx(metric.value)
        assert sum(series["segments"].values()) == pytest.approx(series["node_sum"])
        time = stored_measurement(store, run_id, "time", executor=executor)
        step = nested_headline(time.summary)
        assert tuple(series["step"].values()) == step
        shares = series["share_of_step"]
        assert sum(shares.values()) == pytest.approx(series["node_sum"] / step[0])
    numpy_series = data["series"][0]["segments"]
    assert numpy_series["Conv (forward)"] == pytest.approx(0.0045 + 0.003)
    assert numpy_series["Conv (backward)"] == 0.0


def test_breakdown_groups_small_op_types_as_other(store: ResultsStore) -> None:
    many = [(f"n{i}", f"Op{i}", "forward", [0.001 * (i + 1)] * 3) for i in range(12)]
    run_id = store_net_run(store, steps={"numpy": STEPS["numpy"]}, nodes={"numpy": many})
    (breakdown,) = by_key(networks.figures(report_runs(store, [run_id])), "net-breakdown-")
    segments = breakdown.data["segments"]
    assert len(segments) == networks.MAX_SEGMENTS and segments[-1] == "other"
    assert segments[0] == "Op11"  # the largest first
    values = breakdown.data["series"][0]["segments"]
    assert values["other"] == pytest.approx(sum(0.001 * (i + 1) for i in range(5)))
    assert "'other'" in breakdown.caption


def test_no_breakdown_figure_without_node_times(store: ResultsStore) -> None:
    run_id = store_net_run(store)
    found = networks.figures(report_runs(store, [run_id]))
    assert by_key(found, "net-breakdown-") == []


def test_throughput_against_batch_needs_two_batch_sizes(store: ResultsStore) -> None:
    first = store_net_run(store, batch=8)
    assert by_key(networks.figures(report_runs(store, [first])), "net-batch-scaling") == []
    second = store_net_run(store, batch=32, scale=2.0)
    again = store_net_run(store, batch=8, scale=0.5)  # newer, same batch: drawn instead
    found = networks.figures(report_runs(store, [first, second, again]))
    (scaling,) = by_key(found, "net-batch-scaling")
    (panel,) = scaling.data["panels"]
    assert (panel["model"], panel["mode"]) == ("lenet5", "inference")
    for executor, points in panel["executors"].items():
        assert [p["batch"] for p in points] == [8, 32]
        assert [p["run"] for p in points] == [again, second]
        for point in points:
            record = stored_measurement(
                store, point["run"], "throughput", executor=executor, batch=point["batch"]
            )
            drawn = (point["median"], point["ci_low"], point["ci_high"])
            assert drawn == nested_headline(record.summary)
    assert set(scaling.runs) == {second, again}
    assert "newest" in scaling.caption


def test_several_runs_of_one_network_are_labelled_and_capped(store: ResultsStore) -> None:
    ids = [store_net_run(store, scale=1 + i / 10) for i in range(networks.MAX_RUNS_PER_PROBLEM + 1)]
    (steps,) = by_key(networks.figures(report_runs(store, ids)), "net-steps-")
    drawn = ids[1:]
    assert list(steps.runs) == drawn
    assert steps.data["runs_left_out"] == [ids[0]]
    assert ids[0] in steps.caption
    labels = [s["label"] for s in steps.data["series"]]
    assert labels == [f"{e} ({r[:6]})" for r in drawn for e in ("numpy", "torch")]
    assert [b["run"] for b in steps.data["bases"]] == drawn
    for series in steps.data["series"]:
        record = stored_measurement(store, series["run"], "time", executor=series["executor"])
        assert series["time"]["samples"] == store.samples(record.id)


def test_the_number_of_figures_is_bounded(store: ResultsStore) -> None:
    ids = [
        store_net_run(store, batch=b, steps={"numpy": STEPS["numpy"]})
        for b in range(1, networks.MAX_PROBLEMS + 4)
    ]
    found = networks.figures(report_runs(store, ids))
    steps = by_key(found, "net-steps-")
    assert len(steps) == networks.MAX_PROBLEMS
    assert sorted(f.data["batch"] for f in steps) == list(range(4, networks.MAX_PROBLEMS + 4))
    assert all("3 further network setting(s)" in f.caption for f in steps)
    (scaling,) = by_key(found, "net-batch-scaling")
    assert len(scaling.data["panels"][0]["executors"]["numpy"]) == networks.MAX_PROBLEMS + 3


def test_runs_of_two_machines_are_noted(store: ResultsStore) -> None:
    a = store_net_run(store, host="host-a")
    b = store_net_run(store, host="host-b")
    (steps,) = by_key(networks.figures(report_runs(store, [a, b])), "net-steps-")
    assert len(steps.notes) == 1 and "2 different machines" in steps.notes[0]


def test_keys_are_unique_for_names_that_slug_alike(store: ResultsStore) -> None:
    a = store_net_run(store, model="nets/a.onnx")
    b = store_net_run(store, model="nets_a.onnx")
    found = networks.figures(report_runs(store, [a, b]))
    keys = [f.key for f in found]
    assert len(keys) == len(set(keys)) == 2
    assert {f.data["model"] for f in found} == {"nets/a.onnx", "nets_a.onnx"}


def test_other_kinds_of_run_are_ignored(store: ResultsStore) -> None:
    run_id = store.begin_run("op", "bench gemm", environment={"hostname": "h"})
    store.add_measurement(run_id, "time", [0.1, 0.2, 0.3], labels={"backend": "numpy"})
    store.finish_run(run_id)
    assert networks.figures(report_runs(store, [run_id])) == []
    assert networks.figures([]) == []


def test_wide_spreads_get_a_log_axis_and_cut_intervals_are_said(store: ResultsStore) -> None:
    # two processes far apart: the between-process interval spans many decades
    steps = {"numpy": [[0.001, 0.0011, 0.0012], [0.2, 0.21, 0.22]], "torch": STEPS["torch"]}
    run_id = store_net_run(store, steps=steps)
    (steps_figure,) = by_key(networks.figures(report_runs(store, [run_id])), "net-steps-")
    time_ax = steps_figure.figure.axes[0]
    assert time_ax.get_yscale() == "log"
    assert "logarithmic" in steps_figure.caption
    low, high = time_ax.get_ylim()
    numpy_time = steps_figure.data["series"][0]["time"]
    assert numpy_time["ci_high"] * 1e3 > high  # the stored interval runs past the axes...
    assert "cut there" in steps_figure.caption  # ...and the caption says so
    assert low <= 1.0 and high >= 220.0  # every sample (in ms) is inside


def test_close_spreads_keep_a_linear_axis(store: ResultsStore) -> None:
    run_id = store_net_run(store)
    (steps_figure,) = by_key(networks.figures(report_runs(store, [run_id])), "net-steps-")
    assert steps_figure.figure.axes[0].get_yscale() == "linear"
    assert steps_figure.data["time_unit"] == "ms" and steps_figure.data["time_scale"] == 1e3
    assert "logarithmic" not in steps_figure.caption
