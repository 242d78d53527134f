"""Issue 29: every table shows the fraction of the measured FMA peak, and that fraction is
of the peak of the threads a backend ran on: a backend on 1 thread of a 2-core machine is
judged against what 1 core can do, not against both.

The peak knows the cores it was measured on; ``d5 bench op`` divides each backend's
GFLOP/s by one core's share times its threads and stores that peak beside the fraction;
``d5 results table --kind op`` shows both per cell. No framework is called: runs are
stored by hand the way ``d5 bench op`` stores them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from d5core.cli.output import read_json
from d5core.lv0 import bench_run
from d5core.lv0.bench_common import Measured
from d5core.lv0.bench_op_cmd import peak_footer
from d5core.lv0.workloads import roofline
from d5core.lv0.workloads.roofline import Peak
from d5core.measure.fitness import BLAS_THREAD_SETTING, ThreadCount
from d5core.plugins import PluginManager
from d5core.results import ResultsStore
from d5core.testing.report_runs import store_nested

PEAK = Peak({"float32": 200.0, "float64": 100.0}, "measured: test loop", cores=2)


# -- the peak of the threads used ------------------------------------------------------


def test_the_peak_of_fewer_threads_is_the_per_core_share_times_the_threads():
    assert PEAK.per_core("float32") == 100.0
    assert PEAK.of_threads("float32", 1) == 100.0
    assert PEAK.of_threads("float64", 1) == 50.0


def test_more_threads_than_cores_or_unknown_threads_count_the_whole_peak():
    assert PEAK.of_threads("float32", 2) == 200.0
    assert PEAK.of_threads("float32", 8) == 200.0
    assert PEAK.of_threads("float32", None) == 200.0
    assert PEAK.of_threads("int8", 1) is None


def test_a_peak_set_by_the_user_counts_the_usable_cores(monkeypatch):
    monkeypatch.setenv(roofline.PEAK_ENV_VAR, "1000")
    monkeypatch.setattr(roofline, "usable_cores", lambda: 4)
    peak = roofline.cpu_peak()
    assert peak.cores == 4
    assert peak.of_threads("float32", 1) == 250.0


@pytest.fixture
def fresh_cache(monkeypatch, tmp_path):
    monkeypatch.delenv(roofline.PEAK_ENV_VAR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(roofline, "machine_busy", lambda: False)
    roofline._machine_peak.cache_clear()
    yield roofline.cache_path()
    roofline._machine_peak.cache_clear()


def test_a_cached_peak_keeps_the_cores_it_was_measured_on(monkeypatch, fresh_cache):
    measured = Peak({"float32": 300.0, "float64": 150.0}, "measured: fake loop", cores=3)
    monkeypatch.setattr(roofline, "measure_peak", lambda threads=None: measured)
    assert roofline.cpu_peak().cores == 3
    roofline._machine_peak.cache_clear()  # a new process reads the cache
    cached = roofline.cpu_peak()
    assert "cached in" in cached.source and cached.cores == 3


def test_a_peak_cached_without_its_cores_counts_the_usable_cores(monkeypatch, fresh_cache):
    roofline.write_cache(fresh_cache, roofline.machine_key(), {"float32": 240.0, "how": "old"})
    monkeypatch.setattr(roofline, "usable_cores", lambda: 2)
    peak = roofline.cpu_peak()
    assert (peak.gflops["float32"], peak.cores) == (240.0, 2)


def _threads(count: str | None) -> ThreadCount:
    return ThreadCount("b", None, BLAS_THREAD_SETTING, (count,), (None if count is None
                       else int(count),))  # fmt: skip


def test_bench_op_divides_each_backend_by_the_peak_of_the_threads_it_ran_on():
    measured = Measured(None, {"one": _threads("1"), "four": _threads("4"),  # type: ignore[arg-type]
                               "unknown": _threads(None)}, None)  # fmt: skip
    names = ["one", "four", "unknown", "unreported"]
    peaks = bench_run._peaks_of_threads(PEAK, "float32", measured, names)
    assert peaks == {
        "one": (100.0, 1),
        "four": (200.0, 2),
        "unknown": (200.0, 2),
        "unreported": (200.0, 2),
    }


def test_the_bench_op_footer_gives_the_per_core_peak_the_percentages_are_of():
    line = peak_footer(PEAK, "float32")
    assert "% peak: of the measured FMA peak of the threads the backend ran on" in line
    assert "100.0 GFLOP/s per core" in line and "200 GFLOP/s on all 2 cores" in line


# -- d5 results table --kind op ----------------------------------------------------------


LABELS = {"problem": "Gemm[512x512,512x512]", "direction": "forward", "dtype": "float32"}
FLOPS = 2 * 512**3


def _bench_op(db: Path, backends: dict[str, float], *, per_backend_peak: bool = True) -> str:
    """An operator run stored as ``d5 bench op`` stores one: times, GFLOP/s, the machine's
    peak and, per backend, its fraction and (since issue 29) the peak it is of."""
    env = {"cpu": {"model": "Test CPU", "usable_cores": 2}}
    with ResultsStore.open(db, manager=PluginManager({}, discover_installed=False)) as store:
        rid = store.begin_run("op", "bench Gemm", config={"op": "Gemm"}, environment=env)
        store.add_metric(rid, "peak_gflops", 230.0, labels={"dtype": "float32", "source": "t"})
        for backend, seconds in backends.items():
            labels = {"backend": backend, **LABELS}
            times = [[seconds, seconds], [seconds, seconds]]
            store_nested(store, rid, "time", times, labels=labels, unit="s")
            rates = [[FLOPS / t / 1e9 for t in values] for values in times]
            store_nested(store, rid, "gflops", rates, labels=labels, unit="GFLOP/s")
            of = 115.0 if per_backend_peak else 230.0
            store.add_metric(rid, "peak_fraction", FLOPS / seconds / 1e9 / of, labels=labels)
            if per_backend_peak:
                store.add_metric(rid, "peak_gflops", of, labels={**labels, "cores": 1})
        store.finish_run(rid)
    return rid


def _table(d5_cli: Any, db: Path, *args: str) -> Any:
    result = d5_cli("results", "table", "--last", "5", "--kind", "op", "--db", str(db), *args)
    assert result.exit_code == 0, result.output
    return result


def test_each_operator_cell_carries_its_stored_gflops_and_fraction_of_peak(d5_cli, tmp_path):
    db = tmp_path / "r.sqlite"
    _bench_op(db, {"native": FLOPS / 100e9, "numpy": FLOPS / 50e9})
    (row,) = read_json(_table(d5_cli, db, "--json").stdout)
    native, numpy = row["cells"]["native"], row["cells"]["numpy"]
    assert native["gflops"] == pytest.approx(100.0)
    assert native["peak_fraction"] == pytest.approx(100.0 / 115.0)
    assert (native["peak_gflops"], native["peak_cores"]) == (115.0, 1)
    assert numpy["peak_fraction"] == pytest.approx(50.0 / 115.0)


def test_the_operator_table_shows_gflops_and_percent_of_peak_and_says_what_of(d5_cli, tmp_path):
    db = tmp_path / "r.sqlite"
    _bench_op(db, {"native": FLOPS / 100e9})
    text = " ".join(_table(d5_cli, db).stdout.split())
    assert "100.0 GFLOP/s · 87% peak" in text
    assert "% peak: of the FMA peak of the threads the backend ran on" in text


def test_a_run_that_divided_by_the_whole_machine_says_so_in_its_cell(d5_cli, tmp_path):
    db = tmp_path / "r.sqlite"
    _bench_op(db, {"native": FLOPS / 100e9}, per_backend_peak=False)
    (row,) = read_json(_table(d5_cli, db, "--json").stdout)
    cell = row["cells"]["native"]
    assert (cell["peak_gflops"], cell["peak_cores"]) == (230.0, None)
    assert "43% peak of all cores" in " ".join(_table(d5_cli, db).stdout.split())
