"""The machine's noise floor: its estimator, ``d5 calibrate``, and reading it back."""

from __future__ import annotations

import contextlib
import io
import math

import numpy as np
import pytest

from d5core.cli.app import run
from d5core.cli.output import read_json
from d5core.measure import noise as noise_mod
from d5core.measure.noise import (
    CALIBRATION_KIND,
    ensure_noise_floor,
    machine_fingerprint,
    machine_identity,
    noise_floor,
    shamos_log_spread,
    store_calibration,
)
from d5core.plugins import PluginManager
from d5core.results import ResultsStore


def _quiet(patch: pytest.MonkeyPatch, busy: list[str] | None = None) -> None:
    """Whatever else runs on this machine, calibrations here count as quiet (or as busy
    for the reason given): the policy under test, not the neighbours, decides."""
    patch.setattr(noise_mod, "competition", lambda *args, **kwargs: list(busy or []))


def _open(db) -> ResultsStore:
    return ResultsStore.open(db, manager=PluginManager({}, discover_installed=False))


def test_shamos_spread_estimates_the_sd_of_log_medians_and_ignores_one_outlier() -> None:
    rng = np.random.default_rng(0)
    medians = np.exp(rng.normal(0.0, 0.04, 4000))
    assert shamos_log_spread(medians[:2000]) == pytest.approx(0.04, rel=0.05)
    # The six GEMM invocations, one of them 1.7 times slower: the plain SD of the
    # logs (0.22) is driven by the outlier; the robust spread stays near the others' 0.027.
    six = [1.575, 1.609, 1.642, 2.710, 1.609, 1.528]
    assert np.std(np.log(six), ddof=1) > 0.2
    assert shamos_log_spread(six) < 0.06
    assert shamos_log_spread([1.0, 1.0, 1.0]) == 0.0
    with pytest.raises(ValueError, match="at least two processes"):
        shamos_log_spread([1.0])
    with pytest.raises(ValueError, match="positive finite"):
        shamos_log_spread([1.0, -1.0])


def test_fingerprint_depends_on_cpu_cores_memory_and_host_only() -> None:
    ident = machine_identity()
    assert set(ident) == {"cpu_model", "logical_cores", "memory_gib", "hostname"}
    assert machine_fingerprint() == machine_fingerprint(ident)
    assert len(machine_fingerprint()) == 16
    assert machine_fingerprint({**ident, "hostname": "elsewhere"}) != machine_fingerprint(ident)


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """One real calibration through the command line (3 brief processes), as JSON."""
    db = tmp_path_factory.mktemp("calibrate") / "results.sqlite"
    out, err = io.StringIO(), io.StringIO()
    with (
        pytest.MonkeyPatch.context() as patch,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        _quiet(patch)
        code = run(["calibrate", "--processes", "3", "--brief", "--json", "--db", str(db)])
    assert code == 0, err.getvalue()
    return db, read_json(out.getvalue(), "calibrate"), err.getvalue()


def test_calibrate_measures_three_workloads_in_fresh_processes(calibrated) -> None:
    _db, doc, _ = calibrated
    assert doc["fingerprint"] == machine_fingerprint() and doc["brief"] is True
    assert doc["processes"] == 3
    names = [w["name"] for w in doc["workloads"]]
    assert names == ["gemm", "copy", "pyloop"]
    for w in doc["workloads"]:
        assert w["error"] is None
        s = w["summary"]
        assert s["n_processes"] == 3 and len(s["process_medians"]) == 3
        assert s["ci_low"] <= s["median"] <= s["ci_high"]
        expected = math.expm1(shamos_log_spread(s["process_medians"]))
        assert w["floor"] == pytest.approx(expected)
    assert doc["machine_floor"] == max(doc["floors"].values())


def test_calibration_is_stored_with_process_ids_floors_and_fitness(calibrated) -> None:
    db, doc, _ = calibrated
    with _open(db) as store:
        (run,) = store.list_runs(kind=CALIBRATION_KIND)
        assert run.id == doc["run_id"] and run.status == "complete"
        assert run.config["fingerprint"] == doc["fingerprint"]
        assert run.config["env"]["OMP_NUM_THREADS"] == "1"
        assert set(run.config["fitness"]) == {"before", "after"}
        assert run.config["warnings"] == doc["warnings"]
        measurements = store.measurements(run.id)
        assert len(measurements) == 9  # three workloads in three processes
        pids = {m.labels["pid"] for m in measurements}
        assert len(pids) == 3
        assert {m.labels["process"] for m in measurements} == {0, 1, 2}
        assert all(m.n == len(store.samples(m.id)) > 0 for m in measurements)
        floors = {k.labels["workload"]: k.value for k in store.metrics(run.id)}
        assert floors == {**doc["floors"], "machine": doc["machine_floor"]}


def test_noise_floor_reads_the_latest_fresh_calibration_of_this_machine(calibrated) -> None:
    db, doc, _ = calibrated
    with _open(db) as store:
        found = noise_floor(store)
        assert found is not None and found.run_id == doc["run_id"]
        assert found.machine_floor == doc["machine_floor"] and found.processes == 3
        assert 0.0 <= found.age_days < 1.0
        assert noise_floor(store, max_age_days=0.0) is None  # older than zero days
        assert noise_floor(store, "0" * 16) is None  # another machine
        # Fresh: no new calibration is run.
        assert ensure_noise_floor(store).run_id == doc["run_id"]
        assert len(store.list_runs(kind=CALIBRATION_KIND)) == 1


def test_the_first_time_a_machine_is_seen_a_brief_calibration_runs(tmp_path, monkeypatch) -> None:
    _quiet(monkeypatch)
    told = []
    with _open(tmp_path / "results.sqlite") as store:
        found = ensure_noise_floor(store, processes=3, on_status=told.append)
        (run,) = store.list_runs(kind=CALIBRATION_KIND)
        assert found.run_id == run.id and run.config["brief"] is True
        assert found.fingerprint == machine_fingerprint()
    assert told == [
        "measuring this machine's noise floor (first time this machine is seen): a brief "
        "calibration in 3 processes"
    ]


def test_calibrate_prints_a_table_and_refuses_too_few_processes(d5_cli, tmp_path) -> None:
    result = d5_cli("calibrate", "--processes", "2", "--db", str(tmp_path / "r.sqlite"))
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "d5: error: --processes must be at least 3 for a calibration (the spread between "
        "processes needs them), got 2"
    )
    result = d5_cli("calibrate", "--cpus", "4096", "--db", str(tmp_path / "r.sqlite"))
    assert result.exit_code == 2 and "CPU 4096 is not available to d5" in result.stderr


BUSY = "other processes used 61% of the CPU while measuring (more than 10%)"


def test_a_calibration_taken_on_a_busy_machine_is_stored_but_never_the_floor(
    tmp_path, monkeypatch
) -> None:
    from d5core.measure.compare import DEFAULT_MIN_EFFECT

    _quiet(monkeypatch, [BUSY])
    with _open(tmp_path / "results.sqlite") as store:
        first = ensure_noise_floor(store, processes=3)
        (run,) = store.list_runs(kind=CALIBRATION_KIND)
        assert run.config["busy"] == [BUSY]
        assert noise_floor(store) is None
        assert noise_floor(store, include_busy=True).run_id == run.id
        assert first.source == "default" and first.machine_floor == DEFAULT_MIN_EFFECT
        assert BUSY in first.warnings[0] and "d5 calibrate" in first.warnings[0]

        # Not calibrated again while the busy one is recent: the default stands in.
        def refuse(**kwargs):
            raise AssertionError("calibrated again")

        monkeypatch.setattr(noise_mod, "calibrate", refuse)
        again = ensure_noise_floor(store, processes=3)
        assert again.source == "default" and again.run_id == run.id


def test_a_quiet_calibration_wins_over_a_newer_busy_one(tmp_path, monkeypatch) -> None:
    with _open(tmp_path / "results.sqlite") as store:
        _quiet(monkeypatch)
        quiet = ensure_noise_floor(store, processes=3)
        _quiet(monkeypatch, [BUSY])
        store_calibration(store, noise_mod.calibrate(processes=3, brief=True))
        assert len(store.list_runs(kind=CALIBRATION_KIND)) == 2
        found = ensure_noise_floor(store, processes=3)
        assert found.source == "calibration" and found.run_id == quiet.run_id
