"""Level 3 figures (d5core.lv3.figures): what they draw is what the store holds.

``comm`` runs are stored through :func:`d5core.lv3.comm_sweep.store_sweep`, as
``d5 bench comm`` stores them; distributed training runs by hand, with the per-rank
metrics ``d5 run --ranks N`` stores (the core lane has no MPI to run either).
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from d5core.levels.report import ReportRun
from d5core.lv3 import figures as distributed
from d5core.lv3.comm_sweep import bus_factor, store_sweep, sweep_rows
from d5core.results.store import ResultsStore
from d5core.testing.report_runs import report_runs, stored_metric


class Store:
    """A tmp store of hand-made level 3 runs, read back as a report reads them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.ids: list[str] = []

    def comm(
        self,
        result: list[dict[str, Any]],
        *,
        collective: str = "allreduce",
        link_peak: float | None = None,
        host: str = "box",
    ) -> str:
        config = {"collective": collective, "communicator": "mpi", "link_peak_gbps": link_peak}
        with ResultsStore.open(self.path) as store:
            run_id = store.begin_run("comm", f"comm {collective}", config=config,
                                     environment={"hostname": host})  # fmt: skip
            for one in result:
                store_sweep(store, run_id, sweep_rows(one, collective), collective)
            store.finish_run(run_id)
        self.ids.append(run_id)
        return run_id

    def train(
        self,
        *,
        ranks: int,
        sent: list[float] | None = None,
        received: list[float] | None = None,
        comm_time: list[float] | None = None,
        wall: list[float] | None = None,
        throughput: float | None = None,
        scheme: str = "allreduce",
        per_rank_batch: int = 32,
        global_batch: int | None = None,
        name: str = "digits-mlp",
        host: str = "box",
        status: str = "complete",
    ) -> str:
        dist = {"ranks": ranks, "scheme": scheme, "scheme_options": {},
                "per_rank_batch_size": per_rank_batch,
                "global_batch_size": per_rank_batch * ranks if global_batch is None else global_batch}  # fmt: skip
        per_rank = {"rank_bytes_sent": sent, "rank_bytes_received": received,
                    "rank_comm_time": comm_time, "rank_wall_time": wall}  # fmt: skip
        with ResultsStore.open(self.path) as store:
            run_id = store.begin_run("train", name, config={"distributed": dist},
                                     environment={"hostname": host})  # fmt: skip
            for metric, values in per_rank.items():
                for r, v in enumerate(values or []):
                    store.add_metric(run_id, metric, v, labels={"rank": r})
            if throughput is not None:
                store.add_metric(run_id, "global_throughput", throughput, unit="samples/s")
            store.finish_run(run_id, status)
        self.ids.append(run_id)
        return run_id

    def read(self) -> list[ReportRun]:
        with ResultsStore.open(self.path) as store:
            return report_runs(store, self.ids)

    def metric(self, run_id: str, name: str, **labels: Any) -> float:
        with ResultsStore.open(self.path) as store:
            return stored_metric(store, run_id, name, **labels).value


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "r.sqlite")


def _sweep(ranks: int, sizes: list[int], seed: int = 0, raw: bool = True) -> dict[str, Any]:
    """A rank-0 result as :func:`d5core.lv3.comm_sweep.rank_sweep` returns it."""
    rng = np.random.default_rng(seed + ranks)
    entries = []
    for nbytes in sizes:
        base = 2e-6 + nbytes / 2e9
        samples = {"d5": [float(v) for v in base * (1.05 + 0.1 * rng.random(9))]}
        if raw:
            samples["raw"] = [float(v) for v in base * (1.0 + 0.1 * rng.random(9))]
        entries.append({"bytes": nbytes, "samples": samples})
    return {"ranks": ranks, "communicator": "mpi", "raw": raw, "sizes": entries}


def _by_key(figs: list[Any], prefix: str) -> list[Any]:
    return [f for f in figs if f.key.startswith(prefix)]


# -- collective bandwidth --------------------------------------------------------------


def test_bandwidth_figure_draws_the_stored_medians_and_their_cis(store):
    sizes = [1024, 4096, 65536]
    results = [_sweep(2, sizes), _sweep(4, sizes)]
    run_id = store.comm(results)
    (fig,) = distributed.figures(store.read())
    assert fig.section == "distributed" and fig.runs == (run_id,)
    data = fig.data
    assert [p["ranks"] for p in data["panels"]] == [2, 4]
    assert data["raw_baseline"] is True and data["link_peak_gbps"] is None
    assert "no link peak is known" in fig.caption
    for panel, result in zip(data["panels"], results, strict=True):
        n = panel["ranks"]
        assert sorted(panel["series"]) == ["d5", "raw"]
        for impl, series in panel["series"].items():
            assert series["bytes"] == sizes
            for i, entry in enumerate(result["sizes"]):
                median = statistics.median(entry["samples"][impl])
                labels = {"bytes": sizes[i], "ranks": n, "impl": impl}
                assert series["algbw"][i] == pytest.approx(sizes[i] / median / 1e9)
                assert series["algbw"][i] == pytest.approx(store.metric(run_id, "algbw", **labels))
                assert series["busbw"][i] == pytest.approx(store.metric(run_id, "busbw", **labels))
                assert series["busbw"][i] == pytest.approx(
                    series["algbw"][i] * bus_factor("allreduce", n)
                )
                assert series["algbw_low"][i] <= series["algbw"][i] <= series["algbw_high"][i]
    # what is drawn: one errorbar line per implementation and panel, through the data
    top_left = fig.figure.axes[0]
    drawn = [line for line in top_left.get_lines() if line.get_marker() == "o"]
    ys = sorted([float(v) for v in line.get_ydata()] for line in drawn)
    want = sorted(data["panels"][0]["series"][i]["algbw"] for i in ("d5", "raw"))
    assert ys == want


def test_allgather_bandwidth_counts_the_gathered_result(store):
    run_id = store.comm([_sweep(4, [4096])], collective="allgather")
    (fig,) = distributed.figures(store.read())
    series = fig.data["panels"][0]["series"]["d5"]
    median = statistics.median(_sweep(4, [4096])["sizes"][0]["samples"]["d5"])
    assert series["algbw"][0] == pytest.approx(4 * 4096 / median / 1e9)
    assert series["busbw"][0] == pytest.approx(series["algbw"][0] * 3 / 4)
    assert series["algbw"][0] == pytest.approx(
        store.metric(run_id, "algbw", bytes=4096, ranks=4, impl="d5")
    )


def test_link_peak_and_missing_baseline_are_drawn_and_said(store):
    store.comm([_sweep(2, [1024, 4096], raw=False)], link_peak=12.5)
    (fig,) = distributed.figures(store.read())
    assert fig.data["link_peak_gbps"] == 12.5
    assert fig.data["raw_baseline"] is False
    assert list(fig.data["panels"][0]["series"]) == ["d5"]
    assert "no raw baseline" in fig.caption and "12.5 GB/s" in fig.caption
    bus = fig.figure.axes[1]
    assert any(list(line.get_ydata()) == [12.5, 12.5] for line in bus.get_lines())


def test_bandwidth_figures_are_capped_and_the_caption_says_so(store):
    for seed in range(distributed.MAX_BANDWIDTH_FIGURES + 2):
        store.comm([_sweep(2, [1024], seed=seed)])
    figs = distributed.figures(store.read())
    assert len(figs) == distributed.MAX_BANDWIDTH_FIGURES
    assert all("2 older comm runs not drawn" in f.caption for f in figs)
    assert set(f.runs[0] for f in figs) == set(store.ids[2:])
    assert len({f.key for f in figs}) == len(figs)


def test_rank_counts_beyond_the_panel_cap_are_named(store):
    counts = list(range(2, 2 + distributed.MAX_RANK_PANELS + 1))
    store.comm([_sweep(n, [1024]) for n in counts])
    (fig,) = distributed.figures(store.read())
    assert [p["ranks"] for p in fig.data["panels"]] == counts[: distributed.MAX_RANK_PANELS]
    assert fig.data["omitted_ranks"] == counts[distributed.MAX_RANK_PANELS :]
    assert f"Rank counts {counts[-1]} not drawn" in fig.caption


# -- distributed training ---------------------------------------------------------------


def test_volume_and_time_figures_draw_the_stored_per_rank_metrics(store):
    a = store.train(ranks=2, sent=[100.0, 200.0], received=[150.0, 150.0],
                    comm_time=[0.5, 0.7], wall=[2.0, 2.5], throughput=100.0)  # fmt: skip
    b = store.train(ranks=3, sent=[10.0, 20.0, 30.0], received=[30.0, 20.0, 10.0],
                    comm_time=[0.1, 0.2, 0.3], wall=[1.0, 1.0, 1.6], scheme="dpsgd",
                    throughput=120.0)  # fmt: skip
    figs = distributed.figures(store.read())
    (volume,) = _by_key(figs, "distributed-comm-volume")
    entries = {e["run"]: e for e in volume.data["runs"]}
    assert entries[a]["sent"] == [100.0, 200.0] and entries[a]["received"] == [150.0, 150.0]
    assert entries[b]["sent"] == [10.0, 20.0, 30.0] and entries[b]["scheme"] == "dpsgd"
    heights = sorted(p.get_height() for p in volume.figure.axes[0].patches)
    assert heights == sorted([100.0, 200.0, 10.0, 20.0, 30.0])
    (times,) = _by_key(figs, "distributed-compute-comm")
    e = {x["run"]: x for x in times.data["runs"]}[a]
    assert e["comm_mean"] == pytest.approx(0.6)
    assert (e["comm_min"], e["comm_max"]) == (0.5, 0.7)
    assert e["rest_mean"] == pytest.approx(((2.0 - 0.5) + (2.5 - 0.7)) / 2)
    assert (e["wall_min"], e["wall_max"]) == (2.0, 2.5)
    assert e["comm_mean"] + e["rest_mean"] == pytest.approx(e["wall_mean"])
    # grouped by scheme: allreduce before dpsgd
    assert [x["scheme"] for x in times.data["runs"]] == ["allreduce", "dpsgd"]
    # two rank counts with the same per-rank batch, but of two schemes: no scaling series
    assert not _by_key(figs, "distributed-scaling")


def test_scaling_needs_two_rank_counts(store):
    store.train(ranks=2, throughput=100.0)
    store.train(ranks=2, throughput=110.0)
    figs = distributed.figures(store.read())
    assert not _by_key(figs, "distributed-scaling")
    assert distributed.scaling_groups(store.read()) == []


def test_weak_scaling_has_the_ideal_line_from_the_smallest_rank_count(store):
    ids = {n: store.train(ranks=n, throughput=t) for n, t in ((2, 100.0), (4, 180.0), (8, 300.0))}
    extra = store.train(ranks=2, throughput=120.0)
    (fig,) = _by_key(distributed.figures(store.read()), "distributed-scaling")
    (group,) = fig.data["groups"]
    assert group["scaling"] == "weak" and group["batch"] == {"per_rank_batch_size": 32}
    assert group["ranks"] == [2, 4, 8]
    assert group["runs"][0] == sorted([ids[2], extra])
    by_id = {ids[2]: 100.0, extra: 120.0}
    assert group["throughput"][0] == [by_id[i] for i in group["runs"][0]]
    assert group["runs"][1:] == [[ids[4]], [ids[8]]] and group["throughput"][1:] == [
        [180.0],
        [300.0],
    ]
    assert group["median"] == [110.0, 180.0, 300.0]
    assert group["base_ranks"] == 2 and group["base_throughput"] == 110.0
    assert group["ideal"] == pytest.approx([110.0, 220.0, 440.0])
    assert group["efficiency"] == pytest.approx([1.0, 180 / 220, 300 / 440])
    assert "110 samples/s on 2 ranks" in fig.caption
    ideal = [line for line in fig.figure.axes[0].get_lines() if line.get_linestyle() == "--"]
    assert [list(line.get_ydata()) for line in ideal] == [pytest.approx(group["ideal"])]


def test_strong_scaling_is_read_from_a_fixed_global_batch(store):
    store.train(ranks=2, per_rank_batch=64, global_batch=128, throughput=100.0)
    store.train(ranks=4, per_rank_batch=32, global_batch=128, throughput=150.0)
    store.train(ranks=4, per_rank_batch=32, global_batch=128, throughput=50.0, status="failed")
    (group,) = distributed.scaling_groups(store.read())
    assert group["scaling"] == "strong" and group["batch"] == {"global_batch_size": 128}
    assert group["median"] == [100.0, 150.0]  # the failed run is left out
    assert group["ideal"] == pytest.approx([100.0, 200.0])


def test_other_schemes_and_recipes_do_not_mix(store):
    store.train(ranks=2, throughput=100.0, scheme="allreduce")
    store.train(ranks=4, throughput=150.0, scheme="dpsgd")
    store.train(ranks=4, throughput=150.0, name="other")
    assert distributed.scaling_groups(store.read()) == []


def test_runs_of_two_machines_are_noted(store):
    store.train(ranks=2, sent=[1.0, 2.0], received=[2.0, 1.0], host="a")
    store.train(ranks=2, sent=[1.0, 2.0], received=[2.0, 1.0], host="b")
    (volume,) = _by_key(distributed.figures(store.read()), "distributed-comm-volume")
    assert volume.notes and "2 different machines" in volume.notes[0]


def test_runs_of_other_levels_draw_nothing(store):
    with ResultsStore.open(store.path) as st:
        rid = st.begin_run("op", "bench gemm", environment={"hostname": "h"})
        st.add_measurement(rid, "time", [1.0, 2.0, 3.0], labels={"backend": "numpy"})
        st.finish_run(rid)
        plain = st.begin_run("train", "digits", config={}, environment={"hostname": "h"})
        st.add_metric(plain, "global_throughput", 5.0)
        st.finish_run(plain)
    store.ids += [rid, plain]
    assert distributed.figures(store.read()) == []
