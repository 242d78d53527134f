"""The operators section's figures draw exactly what ``d5 bench op`` stores.

Runs are stored by hand in a temporary database the way ``d5 bench op`` stores them
(samples with their process and the nested summary, GFLOP/s samples, the peak, the
memory bandwidth and each problem's FLOPs and compulsory bytes), then read back as a
report reads them. No framework is called.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from pathlib import Path

import pytest

from d5core.levels.report import ReportFigure, ReportRun
from d5core.lv0 import figures as operators
from d5core.results.store import ResultsStore
from d5core.testing.report_runs import nested_headline, report_runs, store_nested

#: Problem label -> (FLOPs, compulsory bytes) of the forward pass.
PROBLEMS = {
    "gemm m=64 n=64 k=64": (2 * 64**3, 3 * 64 * 64 * 4),
    "gemm m=256 n=64 k=256": (2 * 256 * 64 * 256, (256 * 256 + 256 * 64 + 256 * 64) * 4),
    "gemm m=512 n=512 k=512": (2 * 512**3, 3 * 512 * 512 * 4),
}
#: Seconds per call per process, by backend and problem.
TIMES = {
    "numpy": {
        "gemm m=64 n=64 k=64": [[2.0e-5, 2.1e-5, 2.2e-5], [2.3e-5, 2.0e-5], [2.1e-5, 2.4e-5]],
        "gemm m=256 n=64 k=256": [[1.1e-4, 1.2e-4], [1.0e-4, 1.3e-4, 1.1e-4], [1.2e-4, 1.1e-4]],
        "gemm m=512 n=512 k=512": [[2.0e-3, 2.2e-3], [2.1e-3, 2.3e-3], [2.0e-3, 2.4e-3, 2.1e-3]],
    },
    "torch": {
        "gemm m=64 n=64 k=64": [[5.0e-6, 6.0e-6], [5.5e-6, 5.2e-6, 5.1e-6], [6.1e-6, 5.4e-6]],
        "gemm m=256 n=64 k=256": [[6.0e-5, 6.2e-5], [6.1e-5, 6.4e-5], [6.3e-5, 6.0e-5, 6.5e-5]],
        "gemm m=512 n=512 k=512": [[1.5e-3, 1.6e-3, 1.4e-3], [1.5e-3, 1.7e-3], [1.6e-3, 1.5e-3]],
    },
}


def store_op_run(
    store: ResultsStore,
    *,
    op: str = "Gemm",
    problems: dict[str, tuple[int, int]] | None = None,
    times: dict[str, dict[str, list[list[float]]]] | None = None,
    sizes: bool = True,
    peak: float | None = 500.0,
    bandwidth: float | None = 40.0,
    host: str = "host-a",
    direction: str = "forward",
    dtype: str = "float32",
    extra_metrics: dict[str, float] | None = None,
    peak_of: dict[str, tuple[float, int]] | None = None,
) -> str:
    """Store an ``op`` run as ``d5 bench op`` does; ``sizes=False`` leaves out the
    problem metrics (a run made before they were stored); ``peak_of`` gives backends
    the peak of their threads (GFLOP/s, cores), their fraction of it stored beside it."""
    problems = PROBLEMS if problems is None else problems
    times = TIMES if times is None else times
    config = {"op": op, "backends": list(times), "problems": list(problems), "dtype": dtype}
    environment = {"hostname": host, "cpu": {"model": "Test CPU"}}
    run_id = store.begin_run("op", f"bench {op}", config=config, environment=environment)
    if peak is not None:
        store.add_metric(
            run_id, "peak_gflops", peak, labels={"dtype": dtype, "source": "test"}, unit="GFLOP/s"
        )
    if bandwidth is not None:
        store.add_metric(run_id, "peak_bandwidth", bandwidth, labels={"source": "t"}, unit="GB/s")
    if sizes:
        for problem, (flops, nbytes) in problems.items():
            labels = {"problem": problem, "direction": direction, "dtype": dtype}
            store.add_metric(run_id, "problem_flops", flops, labels=labels, unit="FLOP")
            store.add_metric(run_id, "problem_bytes", nbytes, labels=labels, unit="B")
    for backend, by_problem in times.items():
        for problem, per_process in by_problem.items():
            labels = {"backend": backend, "problem": problem, "direction": direction}
            labels["dtype"] = dtype
            store_nested(store, run_id, "time", per_process, labels=labels, unit="s")
            flops = problems[problem][0]
            if flops:
                rates = [[flops / t / 1e9 for t in values] for values in per_process]
                store_nested(store, run_id, "gflops", rates, labels=labels, unit="GFLOP/s")
            if flops and backend in (peak_of or {}):
                of, cores = (peak_of or {})[backend]
                median = statistics.median(statistics.median(v) for v in per_process)
                store.add_metric(run_id, "peak_fraction", flops / median / 1e9 / of, labels=labels)
                store.add_metric(run_id, "peak_gflops", of, labels={**labels, "cores": cores})
    for name, value in (extra_metrics or {}).items():
        store.add_metric(run_id, name, value)
    store.finish_run(run_id)
    return run_id


@pytest.fixture
def store(tmp_path: Path):
    with ResultsStore.open(tmp_path / "results.sqlite") as opened:
        yield opened


def by_kind(figures: Sequence[ReportFigure]) -> dict[str, list[ReportFigure]]:
    found: dict[str, list[ReportFigure]] = {}
    for figure in figures:
        found.setdefault(figure.key.split("-")[1], []).append(figure)
    return found


def stored(run: ReportRun, metric: str, backend: str, problem: str):
    (m,) = run.find(metric, backend=backend, problem=problem)
    return m


def test_the_samples_figure_draws_every_stored_sample_and_the_stored_median_ci(store):
    run_id = store_op_run(store)
    (run,) = report_runs(store, [run_id])
    drawn = by_kind(operators.figures([run]))
    (figure,) = drawn["samples"]
    assert figure.section == "operators"
    data = figure.data
    assert [p["problem"] for p in data["problems"]] == list(PROBLEMS)
    for panel in data["problems"]:
        assert [g["backend"] for g in panel["groups"]] == ["numpy", "torch"]
        for group in panel["groups"]:
            m = stored(run, "time", group["backend"], panel["problem"])
            assert group["samples"] == list(m.samples)
            flat = [v for vs in TIMES[group["backend"]][panel["problem"]] for v in vs]
            assert group["samples"] == flat
            headline = (group["median"], group["ci_low"], group["ci_high"])
            assert headline == nested_headline(m.summary)
    # a readable unit per panel: microseconds for the small GEMM, milliseconds for 512
    units = {p["problem"]: (p["unit"], p["scale"]) for p in data["problems"]}
    assert units["gemm m=64 n=64 k=64"] == ("µs", 1e6)
    assert units["gemm m=512 n=512 k=512"] == ("ms", 1e3)
    json.dumps(data)  # plain JSON types


def test_the_drawn_boxes_hold_the_stored_samples_in_the_panel_unit(store):
    (run,) = report_runs(store, [store_op_run(store)])
    (figure,) = by_kind(operators.figures([run]))["samples"]
    axes = [ax for ax in figure.figure.axes if ax.get_visible()]
    assert len(axes) == len(PROBLEMS)
    for ax, panel in zip(axes, figure.data["problems"], strict=True):
        assert ax.get_title() == panel["problem"]
        low, high = ax.get_ylim()
        assert low == pytest.approx(panel["y_range"][0] * panel["scale"])
        assert high == pytest.approx(panel["y_range"][1] * panel["scale"])
        # the median markers of the CI bars: one point each, in the panel's unit
        markers = [
            line.get_ydata()[0]
            for line in ax.lines
            if line.get_marker() == "o" and line.get_markersize() == 3
        ]
        wanted = [g["median"] * panel["scale"] for g in panel["groups"]]
        assert markers == pytest.approx(wanted)
        # the box of each group: its median line is the median of the drawn samples
        boxes = [
            line.get_ydata()[0]
            for line in ax.lines
            if len(line.get_ydata()) == 2
            and line.get_ydata()[0] == line.get_ydata()[1]
            and line.get_color() == "black"
        ]
        for group in panel["groups"]:
            expected = statistics.median(group["samples"]) * panel["scale"]
            assert any(math.isclose(b, expected, rel_tol=1e-9) for b in boxes)


def test_the_roofline_plots_stored_rates_at_stored_intensity_under_stored_roofs(store):
    run_id = store_op_run(store, peak=500.0, bandwidth=40.0)
    (run,) = report_runs(store, [run_id])
    (figure,) = by_kind(operators.figures([run]))["roofline"]
    data = figure.data
    assert data["dtype"] == "float32"
    assert data["not_drawn"] == []
    assert len(data["points"]) == len(PROBLEMS) * 2
    for point in data["points"]:
        flops, nbytes = PROBLEMS[point["problem"]]
        assert (point["flops"], point["bytes"]) == (flops, nbytes)
        assert point["intensity"] == flops / nbytes
        m = stored(run, "gflops", point["backend"], point["problem"])
        assert (point["gflops"], point["ci_low"], point["ci_high"]) == nested_headline(m.summary)
    (roof,) = data["roofs"]
    assert roof["peak_gflops"] == 500.0
    assert roof["peak_bandwidth"] == 40.0
    assert roof["ridge_intensity"] == 500.0 / 40.0
    assert roof["runs"] == [run_id]
    ax = figure.figure.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    # the compute roof is drawn at the stored peak, the memory roof as bandwidth x intensity
    roof_lines = [line for line in ax.lines if len(line.get_xdata()) == 2]
    flat = [(list(line.get_xdata()), list(line.get_ydata())) for line in roof_lines]
    assert ([12.5, data["x_range"][1]], [500.0, 500.0]) in flat
    low = data["x_range"][0]
    assert ([low, 12.5], [40.0 * low, 500.0]) in flat


def test_every_roofline_point_carries_its_stored_fraction_of_the_peak_of_its_threads(store):
    run_id = store_op_run(store, peak=500.0, peak_of={"torch": (250.0, 1)})
    (run,) = report_runs(store, [run_id])
    (figure,) = by_kind(operators.figures([run]))["roofline"]
    for point in figure.data["points"]:
        if point["backend"] == "torch":
            stored_fraction = run.metric_value(
                "peak_fraction", backend="torch", problem=point["problem"]
            )
            assert point["peak_fraction"] == stored_fraction
            assert (point["fraction_of"], point["peak_cores"]) == (250.0, 1)
            assert point["fraction_from"] == "stored"
        else:  # numpy stored no fraction: its GFLOP/s over the roof drawn
            assert point["peak_fraction"] == point["gflops"] / 500.0
            assert (point["fraction_of"], point["fraction_from"]) == (500.0, "roof")
    # the roof stays the machine's, and the 1-core peak is drawn as its own roof
    assert [r["peak_gflops"] for r in figure.data["roofs"]] == [500.0]
    assert figure.data["core_roofs"] == [{"cores": 1, "gflops": 250.0}]
    flat = [list(line.get_ydata()) for line in figure.figure.axes[0].lines]
    assert [250.0, 250.0] in flat
    assert "fraction of the compute roof it sits under" in figure.caption


def test_the_roofline_legend_gives_each_backend_its_median_fraction_of_peak(store):
    run_id = store_op_run(store, peak=500.0, peak_of={"torch": (250.0, 1)})
    (figure,) = by_kind(operators.figures(report_runs(store, [run_id])))["roofline"]
    points = figure.data["points"]
    expected = {
        b: statistics.median(p["peak_fraction"] for p in points if p["backend"] == b)
        for b in ("numpy", "torch")
    }
    assert figure.data["peak_fractions"] == pytest.approx(expected)
    legend = [t.get_text() for t in figure.figure.axes[0].get_legend().get_texts()]
    assert legend == [f"{b} ({100 * expected[b]:.0f}% of peak)" for b in ("numpy", "torch")]


def test_a_run_without_stored_bytes_is_named_in_the_roofline_caption(store):
    old = store_op_run(store, sizes=False)
    new = store_op_run(store)
    runs = report_runs(store, [old, new])
    (figure,) = by_kind(operators.figures(runs))["roofline"]
    assert figure.data["not_drawn"] == [old]
    assert old[:6] in figure.caption and "no stored problem bytes" in figure.caption
    assert {p["run"] for p in figure.data["points"]} == {new}


def test_machines_with_different_roofs_each_get_theirs_and_a_note(store):
    a = store_op_run(store, host="host-a", peak=500.0, bandwidth=40.0)
    b = store_op_run(store, host="host-b", peak=900.0, bandwidth=120.0)
    runs = report_runs(store, [a, b])
    (figure,) = by_kind(operators.figures(runs))["roofline"]
    roofs = [(r["machines"], r["peak_gflops"], r["peak_bandwidth"]) for r in figure.data["roofs"]]
    assert roofs == [(["host-a (Test CPU)"], 500.0, 40.0), (["host-b (Test CPU)"], 900.0, 120.0)]
    assert "2 different roofs" in figure.caption
    assert figure.notes and "2 different machines" in figure.notes[0]


def test_machines_with_the_same_roofs_share_one(store):
    a = store_op_run(store, host="host-a")
    b = store_op_run(store, host="host-b")
    (figure,) = by_kind(operators.figures(report_runs(store, [a, b])))["roofline"]
    (roof,) = figure.data["roofs"]
    assert roof["machines"] == ["host-a (Test CPU)", "host-b (Test CPU)"]
    assert roof["runs"] == [a, b]
    assert figure.notes and "2 different machines" in figure.notes[0]


def test_the_dispatch_curve_joins_each_backend_in_size_order(store):
    (run,) = report_runs(store, [store_op_run(store)])
    (figure,) = by_kind(operators.figures([run]))["dispatch"]
    data = figure.data
    assert data["size"] == "flops"
    assert [line["backend"] for line in data["lines"]] == ["numpy", "torch"]
    for line in data["lines"]:
        sizes = [p["size"] for p in line["points"]]
        assert sizes == sorted(PROBLEMS[p][0] for p in PROBLEMS)
        for point in line["points"]:
            assert point["size"] == PROBLEMS[point["problem"]][0]
            m = stored(run, "time", line["backend"], point["problem"])
            headline = (point["median"], point["ci_low"], point["ci_high"])
            assert headline == nested_headline(m.summary)
    ax = figure.figure.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    drawn = [line for line in ax.lines if line.get_marker() == "o"]
    for line, series in zip(drawn, data["lines"], strict=True):
        assert list(line.get_xdata()) == [p["size"] for p in series["points"]]
        assert list(line.get_ydata()) == pytest.approx(
            [p["median"] * data["scale"] for p in series["points"]]
        )


def test_the_dispatch_curve_uses_bytes_where_flops_are_not_counted(store):
    problems = {"Relu[1000]": (0, 8000), "Relu[100000]": (0, 800000)}
    times = {"numpy": {p: [[1e-6, 2e-6], [1.5e-6, 1.2e-6], [1.1e-6]] for p in problems}}
    (run,) = report_runs(store, [store_op_run(store, op="Relu", problems=problems, times=times)])
    drawn = by_kind(operators.figures([run]))
    (figure,) = drawn["dispatch"]
    assert figure.data["size"] == "bytes"
    assert [p["size"] for p in figure.data["lines"][0]["points"]] == [8000, 800000]
    # no GFLOP/s stored, no point on the roofline: it is not drawn at all
    assert "roofline" not in drawn


def test_many_problems_are_capped_per_figure_and_named(store):
    problems = {f"gemm {i}": (1000 * (i + 1), 100 * (i + 1)) for i in range(12)}
    times = {"numpy": {p: [[1e-5, 1.1e-5], [1.2e-5], [1.0e-5]] for p in problems}}
    (run,) = report_runs(store, [store_op_run(store, problems=problems, times=times)])
    (figure,) = by_kind(operators.figures([run]))["samples"]
    shown = operators.MAX_PROBLEMS_PER_FIGURE
    assert [p["problem"] for p in figure.data["problems"]] == list(problems)[:shown]
    assert figure.data["left_out_problems"] == list(problems)[shown:]
    assert f"{12 - shown} of 12 problems left out" in figure.caption


def test_only_the_newest_runs_of_a_group_are_drawn(store):
    ids = [store_op_run(store) for _ in range(operators.MAX_RUNS_PER_GROUP + 2)]
    runs = report_runs(store, ids)
    (figure,) = by_kind(operators.figures(runs))["samples"]
    newest = sorted(runs, key=lambda r: (r.created, r.id))
    assert figure.data["runs"] == [r.id for r in newest[-operators.MAX_RUNS_PER_GROUP :]]
    assert figure.data["left_out_runs"] == [r.id for r in newest[:2]]
    assert all(r.id[:6] in figure.caption for r in newest[:2])


def test_no_figure_without_op_runs(store):
    assert operators.figures([]) == []
    other = store.begin_run("net", "bench lenet5", config={"model": "lenet5"})
    store.add_measurement(other, "time", [0.1, 0.2, 0.3], labels={"executor": "numpy"})
    store.finish_run(other)
    assert operators.figures(report_runs(store, [other])) == []


def test_figure_keys_are_unique_and_valid(store):
    runs = report_runs(
        store,
        [
            store_op_run(store),
            store_op_run(store, direction="backward"),
            store_op_run(store, op="MatMul"),
            store_op_run(store, dtype="float64"),
        ],
    )
    drawn = operators.figures(runs)
    keys = [f.key for f in drawn]
    assert len(keys) == len(set(keys))
    # four groups with two figures each, and a roofline per dtype
    assert len(drawn) == 4 * 2 + 2


def test_only_the_newest_groups_are_drawn_and_the_others_named(store):
    ops = [f"Op{i}" for i in range(operators.MAX_GROUPS + 1)]
    ids = [store_op_run(store, op=op) for op in ops]
    drawn = operators.figures(report_runs(store, ids))
    samples = by_kind(drawn)["samples"]
    assert len(samples) == operators.MAX_GROUPS
    # runs are created in order, so the first operator's group is the oldest
    assert {f.data["op"] for f in samples} == set(ops[1:])
    assert "1 left out: Op0 forward (float32)" in drawn[0].caption


def test_names_with_dollar_signs_are_drawn_as_text(store):
    import io

    problems = {"cost $x^{ and $<b>": (1000, 100)}
    times = {"a$b": {"cost $x^{ and $<b>": [[1e-5, 1.1e-5], [1.2e-5], [1.0e-5]]}}
    run_id = store_op_run(store, op="$Op$", problems=problems, times=times)
    drawn = operators.figures(report_runs(store, [run_id]))
    assert len(drawn) == 3
    for figure in drawn:
        figure.figure.savefig(io.BytesIO(), format="png")  # mathtext would fail here
    samples = by_kind(drawn)["samples"][0]
    assert samples.data["problems"][0]["problem"] == "cost $x^{ and $<b>"
    assert samples.figure.axes[0].get_title() == r"cost \$x^{ and \$<b>"
