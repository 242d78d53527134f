"""The fit of ``t(m) = L + G*m`` to a ping-pong sweep (d5core.lv3.comm_fit): what it
recovers from synthetic times, its residuals, its JSON, and how a stored fit is found
again (or refused in one line)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from d5core.errors import EXIT_USAGE, UsageError
from d5core.lv3.comm_fit import (
    CommFit,
    fit_document,
    fit_pingpong,
    fit_segments,
    load_fit,
    store_fit,
)
from d5core.results.store import ResultsStore

#: 8 B to 64 MiB, twice as large each step: the default ping-pong sweep.
SIZES = [8 << k for k in range(24)]


def _times(latency: float, per_byte: float, sizes=SIZES, noise=0.0, seed=0) -> list[float]:
    rng = np.random.default_rng(seed)
    return [(latency + per_byte * m) * (1 + noise * rng.standard_normal()) for m in sizes]


def test_the_fit_recovers_latency_and_time_per_byte_through_noise():
    latency, per_byte = 3e-6, 1 / 8e9
    fit = fit_pingpong(SIZES, _times(latency, per_byte, noise=0.03), communicator="mpi", ranks=2)
    assert fit.latency_s == pytest.approx(latency, rel=0.05)
    assert fit.seconds_per_byte == pytest.approx(per_byte, rel=0.05)
    assert fit.bandwidth_gbps == pytest.approx(8.0, rel=0.05)
    assert fit.max_abs_residual < 0.1
    assert (fit.communicator, fit.ranks, fit.sizes) == ("mpi", 2, tuple(SIZES))


def test_small_messages_weigh_as_much_as_large_ones():
    # Relative error: the 8-byte time decides L even though 64 MiB takes 10^4 times longer;
    # a plain least-squares fit would get L wrong by more than L itself.
    latency, per_byte = 2e-6, 1 / 5e9
    times = _times(latency, per_byte)
    times[-1] *= 1.02  # 2% off at 64 MiB is 268 µs, a hundred times L
    fit = fit_pingpong(SIZES, times, communicator="mpi", ranks=2)
    assert fit.latency_s == pytest.approx(latency, rel=0.02)
    a = np.column_stack([np.ones(len(SIZES)), np.array(SIZES, dtype=float)])
    plain_latency = np.linalg.lstsq(a, np.array(times), rcond=None)[0][0]
    assert abs(plain_latency - latency) > latency


def test_residuals_are_predicted_over_measured_minus_one():
    sizes, times = [8, 1024, 1 << 20], [2e-6, 3e-6, 1e-4]
    fit = fit_pingpong(sizes, times, communicator="gloo", ranks=4)
    for m, t, r in zip(sizes, times, fit.residuals, strict=True):
        assert r == pytest.approx((fit.latency_s + fit.seconds_per_byte * m) / t - 1)
    assert fit.max_abs_residual == pytest.approx(max(abs(r) for r in fit.residuals))
    assert fit.p2p_seconds(4096) == pytest.approx(fit.latency_s + 4096 * fit.seconds_per_byte)
    assert fit.measured_s == tuple(times)


def test_an_exact_line_has_zero_residuals():
    fit = fit_pingpong(SIZES, _times(5e-6, 1e-10), communicator="mpi", ranks=2)
    assert fit.latency_s == pytest.approx(5e-6, rel=1e-9)
    assert fit.seconds_per_byte == pytest.approx(1e-10, rel=1e-9)
    assert fit.max_abs_residual < 1e-9


def test_repeated_sizes_are_fitted_by_their_median():
    sizes = [8, 8, 8, 4096, 4096, 4096]
    times = [2e-6, 2e-6, 9e-3, 3e-6, 3e-6, 1.0]  # one outlier per size
    fit = fit_pingpong(sizes, times, communicator="mpi", ranks=2)
    assert fit.sizes == (8, 4096) and fit.measured_s == (2e-6, 3e-6)
    assert fit.max_abs_residual < 1e-9


def test_latency_and_time_per_byte_are_never_negative():
    falling = fit_pingpong([8, 1024, 65536], [5e-6, 4e-6, 3e-6], communicator="mpi", ranks=2)
    assert falling.seconds_per_byte == 0.0 and falling.latency_s > 0
    assert math.isinf(falling.bandwidth_gbps)
    proportional = fit_pingpong([1 << 20, 1 << 22], [1e-4, 4.4e-4], communicator="mpi", ranks=2)
    assert proportional.latency_s == 0.0 and proportional.seconds_per_byte > 0


@pytest.mark.parametrize(
    ("sizes", "times", "words"),
    [
        ([8], [1e-6], "at least 2 message sizes; got 1"),
        ([8, 8, 8], [1e-6, 2e-6, 3e-6], "at least 2 message sizes; got 1"),
        ([8, 64], [1e-6, 0.0], "positive, finite seconds"),
        ([8, 64], [1e-6, -1e-6], "positive, finite seconds"),
        ([8, 64], [1e-6, float("nan")], "positive, finite seconds"),
        ([8, 64], [1e-6, float("inf")], "positive, finite seconds"),
        ([-8, 64], [1e-6, 2e-6], "message size -8"),
        ([8, 64, 512], [1e-6, 2e-6], "3 sizes and 2 times"),
    ],
)
def test_bad_inputs_are_refused_in_one_line(sizes, times, words):
    with pytest.raises(UsageError, match=words) as err:
        fit_pingpong(sizes, times, communicator="mpi", ranks=2)
    assert "\n" not in str(err.value) and err.value.exit_code == EXIT_USAGE


def test_a_ping_pong_needs_two_ranks():
    with pytest.raises(UsageError, match="at least 2 ranks"):
        fit_pingpong([8, 64], [1e-6, 2e-6], communicator="mpi", ranks=1)


def test_json_round_trip():
    fit = fit_pingpong(SIZES, _times(3e-6, 1e-10, noise=0.05), communicator="mpi", ranks=2,
                       run_id="abc123")  # fmt: skip
    assert CommFit.from_json(fit.to_json()) == fit
    document = fit_document(fit)
    assert CommFit.from_json(document) == fit  # the segments are left aside
    assert len(document["segments"]) == 2


@pytest.mark.parametrize("missing", ["latency_s", "sizes", "communicator"])
def test_a_damaged_stored_fit_is_refused(missing):
    data = fit_pingpong([8, 64], [1e-6, 2e-6], communicator="mpi", ranks=2).to_json()
    del data[missing]
    with pytest.raises(UsageError, match=repr(missing)):
        CommFit.from_json(data)
    with pytest.raises(UsageError, match="different lengths"):
        CommFit.from_json({**fit_pingpong([8, 64], [1e-6, 2e-6], communicator="mpi",
                                          ranks=2).to_json(), "residuals": [0.0]})  # fmt: skip


def test_two_segments_find_the_protocol_switch():
    small = _times(2e-6, 1e-10, sizes=SIZES[:11])  # up to 8 KiB
    large = _times(20e-6, 2e-10, sizes=SIZES[11:])  # rendezvous from 16 KiB
    fit = fit_pingpong(SIZES, small + large, communicator="mpi", ranks=2)
    assert fit.max_abs_residual > 0.25
    segments = fit_segments(fit)
    assert segments is not None
    low, high = segments
    assert (low.first_bytes, low.last_bytes) == (8, 8 << 10)
    assert (high.first_bytes, high.last_bytes) == (16 << 10, 64 << 20)
    assert low.latency_s == pytest.approx(2e-6) and high.latency_s == pytest.approx(20e-6)
    assert high.seconds_per_byte == pytest.approx(2e-10)
    assert max(low.max_abs_residual, high.max_abs_residual) < 1e-9
    assert len(low.residuals) == 11 and len(high.residuals) == 13


def test_too_few_sizes_have_no_segments():
    fit = fit_pingpong(SIZES[:5], _times(2e-6, 1e-10, sizes=SIZES[:5]), communicator="mpi",
                       ranks=2)  # fmt: skip
    assert fit_segments(fit) is None and fit_document(fit)["segments"] is None


# -- stored with a run, and found again ------------------------------------------------


def _comm_run(store, collective, fit=None, communicator="mpi", kind="comm"):
    config = {"collective": collective, "communicator": communicator}
    with store.run(kind, f"comm {collective}", config=config, environment={}) as run_id:
        if fit is not None:
            store_fit(store, run_id, fit)
    return run_id


def _fit(communicator="mpi", latency=3e-6):
    return fit_pingpong(SIZES, _times(latency, 1e-10, noise=0.02), communicator=communicator,
                        ranks=2)  # fmt: skip


def test_a_stored_fit_reads_back_with_its_run_id_and_metrics(tmp_path):
    db = tmp_path / "r.sqlite"
    fit = _fit()
    with ResultsStore.open(db) as store:
        run_id = _comm_run(store, "pingpong", fit)
        metrics = {(k.name, k.labels.get("bytes")): k for k in store.metrics(run_id)}
        config = store.get_run(run_id).config
    assert load_fit(run_id, db) == CommFit.from_json({**fit.to_json(), "run_id": run_id})
    assert config["fit"]["segments"] is not None
    assert metrics[("fit_latency", None)].value == pytest.approx(fit.latency_s * 1e6)
    assert metrics[("fit_latency", None)].unit == "us"
    assert metrics[("fit_bandwidth", None)].value == pytest.approx(fit.bandwidth_gbps)
    assert metrics[("fit_ns_per_kb", None)].value == pytest.approx(fit.seconds_per_byte * 1e12)
    assert metrics[("fit_max_residual", None)].value == pytest.approx(fit.max_abs_residual)
    assert metrics[("fit_residual", 8)].value == pytest.approx(fit.residuals[0])
    assert sum(name == "fit_residual" for name, _ in metrics) == len(SIZES)


def test_without_a_run_id_the_newest_ping_pong_of_the_communicator_is_taken(tmp_path):
    db = tmp_path / "r.sqlite"
    with ResultsStore.open(db) as store:
        older = _comm_run(store, "pingpong", _fit("mpi", 3e-6))
        gloo = _comm_run(store, "pingpong", _fit("gloo", 30e-6), communicator="gloo")
        _comm_run(store, "allreduce")
    assert load_fit(None, db).run_id == gloo
    assert load_fit(None, db, "mpi").run_id == older
    assert load_fit(None, db, "gloo").latency_s == pytest.approx(30e-6, rel=0.05)


def _refused(run_id, db, communicator=None) -> str:
    with pytest.raises(UsageError) as err:
        load_fit(run_id, db, communicator)
    message = str(err.value)
    assert "\n" not in message and err.value.exit_code == EXIT_USAGE
    return message


def test_runs_without_a_fit_are_refused_in_one_line(tmp_path):
    db = tmp_path / "r.sqlite"
    with ResultsStore.open(db) as store:
        assert "--collective pingpong" in _refused(None, db)
        train = _comm_run(store, "pingpong", kind="train")
        allreduce = _comm_run(store, "allreduce")
        assert "no ping-pong run is stored" in _refused(None, db)
        mpi = _comm_run(store, "pingpong", _fit())
    assert "no run 'nosuchrun'" in _refused("nosuchrun", db)
    assert "'train' run, not a 'comm' run" in _refused(train, db)
    message = _refused(allreduce, db)
    assert "timed 'allreduce', not 'pingpong'" in message
    assert "d5 bench comm --collective pingpong" in message
    assert "not 'gloo'" in _refused(mpi, db, "gloo")
    assert "of the 'gloo' communicator" in _refused(None, db, "gloo")
