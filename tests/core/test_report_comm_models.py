"""The report's prediction figure (d5core.lv3.model_figures): from a stored ping-pong
fit, what each installed scheme's cost model predicts from 2 to 4,096 ranks, exactly as
``d5 model comm`` computes it; a scheme whose model fails is named, the others drawn.

The schemes come from a fake plugin (the core lane has no MPI plugin)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from d5core.lv3 import figures as distributed
from d5core.lv3 import model_figures
from d5core.lv3.comm_fit import fit_pingpong
from d5core.lv3.cost_table import cost_rows, parse_params
from d5core.lv3.launch import scheme_class
from d5core.plugins import PluginManager, reset_plugin_manager
from d5core.results.store import ResultsStore
from d5core.testing import FakeSite
from d5core.testing.report_runs import report_runs

PLUGIN = '''
from d5core.api import CommCost
from d5core.hookspecs import hookimpl
from d5core.levels.distributed import DistributedOptimizer

d5_plugin_api = ">=1.0"


class Linear(DistributedOptimizer):
    """P - 1 messages of all the bytes."""

    name = "linear"

    @classmethod
    def communication_cost(cls, *, ranks, params, itemsize, latency_s, seconds_per_byte,
                           options, exchange_s_per_byte=None, reduce_s_per_byte=0.0):
        total = params if isinstance(params, int) else sum(params.values())
        nbytes = total * itemsize * (ranks - 1)
        return CommCost.of(messages=ranks - 1, critical_bytes=nbytes, bytes_sent=nbytes,
                           latency_s=latency_s, seconds_per_byte=seconds_per_byte,
                           algorithm="linear", formula="(P-1)(L + B G)")


class Broken(DistributedOptimizer):
    """A model that fails beyond 64 ranks."""

    name = "broken"

    @classmethod
    def communication_cost(cls, *, ranks, params, itemsize, latency_s, seconds_per_byte,
                           options, exchange_s_per_byte=None, reduce_s_per_byte=0.0):
        if ranks > 64:
            raise RuntimeError("no model beyond 64 ranks")
        return Linear.communication_cost(
            ranks=ranks, params=params, itemsize=itemsize, latency_s=latency_s,
            seconds_per_byte=seconds_per_byte, options=options)


class Silent(DistributedOptimizer):
    """No model (the default)."""

    name = "silent"


@hookimpl
def d5_distribution_schemes():
    return ["linear", "broken", "silent"]
'''


@pytest.fixture
def schemes(d5_site: FakeSite) -> Iterator[PluginManager]:
    d5_site.add(
        "d5-plugin-fakemodels",
        entry_points={
            "d5.hooks": {"fakemodels": "fakemodels"},
            "d5.optimizers": {
                "linear": "fakemodels:Linear",
                "broken": "fakemodels:Broken",
                "silent": "fakemodels:Silent",
            },
        },
        modules={"fakemodels.py": PLUGIN},
    )
    manager = d5_site.manager({"D5_LOAD_PLUGINS": "d5-plugin-fakemodels"})
    reset_plugin_manager(manager)
    try:
        yield manager
    finally:
        reset_plugin_manager(None)


def _fit():
    sizes = [8, 1024, 1 << 20]
    return fit_pingpong(sizes, [2e-6 + 1e-10 * s for s in sizes], communicator="mpi", ranks=2)


def _stored(path: Path, collective: str = "pingpong", with_fit: bool = True) -> str:
    config: dict[str, object] = {"collective": collective, "communicator": "mpi"}
    if with_fit:
        config["fit"] = _fit().to_json()
    with ResultsStore.open(path) as store:
        run_id = store.begin_run("comm", f"comm {collective}", config=config,
                                 environment={"hostname": "box"})  # fmt: skip
        store.finish_run(run_id)
    return run_id


def _runs(path: Path, ids: list[str]):
    with ResultsStore.open(path) as store:
        return report_runs(store, ids)


def test_the_figure_draws_what_d5_model_comm_predicts_for_each_scheme(
    schemes: PluginManager, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    run_id = _stored(db)
    (figure,) = model_figures.figures(_runs(db, [run_id]))
    data = figure.data
    assert data["ranks"] == [2**k for k in range(1, 13)]
    assert data["fit"]["run"] is None and data["fit"]["latency_s"] == pytest.approx(2e-6)
    for panel in data["panels"]:
        params = parse_params(panel["params"])
        assert panel["count"] == params.total
        assert set(panel["series"]) == {"linear"}  # broken failed, silent has no model
        want = cost_rows(scheme_class("linear"), data["ranks"], params, 4, _fit(), {})
        assert panel["series"]["linear"] == [row.cost.seconds for row in want]
    assert [p["params"] for p in data["panels"]] == ["resnet20", "100M"]
    assert data["failed"] == {"broken": "no model beyond 64 ranks"}
    assert figure.notes == ("scheme 'broken' not drawn: no model beyond 64 ranks",)
    assert figure.runs == (run_id,)


def test_runs_without_a_ping_pong_fit_draw_no_prediction(
    schemes: PluginManager, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    ids = [_stored(db, collective="allreduce"), _stored(db, with_fit=False)]
    assert model_figures.figures(_runs(db, ids)) == []


def test_only_the_newest_ping_pong_runs_are_drawn_and_the_rest_counted(
    schemes: PluginManager, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    ids = [_stored(db) for _ in range(model_figures.MAX_MODEL_FIGURES + 1)]
    drawn = model_figures.figures(_runs(db, ids))
    assert [f.runs for f in drawn] == [(i,) for i in ids[1:]]
    assert all("1 older ping-pong runs not drawn" in f.caption for f in drawn)


def test_the_distributed_section_holds_the_prediction(
    schemes: PluginManager, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    run_id = _stored(db)
    keys = [f.key for f in distributed.figures(_runs(db, [run_id]))]
    assert any(k.startswith("distributed-model-") for k in keys)


def test_without_a_scheme_with_a_model_nothing_is_drawn(
    d5_plugin_manager: PluginManager, tmp_path: Path
) -> None:
    db = tmp_path / "r.sqlite"
    assert model_figures.figures(_runs(db, [_stored(db)])) == []
