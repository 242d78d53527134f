"""Eight real d5 commands writing to one results store at once, on SQLite and on
PostgreSQL: every run is stored exactly once, complete, with all of its samples, and no
writer ever sees "database is locked" (issue 34, item 3). On PostgreSQL, a writer killed
with SIGKILL mid-run leaves its run ``incomplete``, as on SQLite.

The writers are the cheapest real commands that store runs: ``d5 bench op Gemm`` on the
numpy reference (its samples stored in one transaction once the worker has measured
them) and ``d5 run recipes/digits-mlp.toml`` (its samples streamed into the store at
every test pass and every second, many small transactions).
``benchmarks/store_writers.py`` measures the same writers' throughput. The stores come
from tests/conftest.py (``store_target``: a new SQLite file, then a new database on the
session's private PostgreSQL server).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from d5core.results import ResultsStore

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "recipes" / "digits-mlp.toml"
D5 = str(Path(sys.executable).with_name("d5"))
WRITERS = 8
#: How many samples each ``d5 bench op`` writer stores per measurement.
BENCH_SAMPLES = 40
#: How long the eight writers may take together on a loaded 2-core machine.
WRITERS_S = 600
#: How long a killed writer may take to begin its run.
START_S = 120.0


def _environ() -> dict[str, str]:
    # only the numpy plugin: each command starts in about half the time; a fixed noise
    # floor: no calibration run beside the writers' own
    return {**os.environ, "D5_LOAD_PLUGINS": "d5-plugin-numpy", "D5_NOISE_FLOOR": "0.03"}


def _writer(i: int, db: str) -> tuple[list[str], dict[str, str]]:
    """The ``i``-th writer and its environment: ``d5 bench op`` for even ``i``, ``d5 run``
    for odd; the store given as ``--db`` to writers 0, 1, 4, 5 and as ``D5_DB`` to the
    others (both ways select a store, a file or a URL alike)."""
    if i % 2 == 0:
        args = [D5, "bench", "op", "Gemm", "--backends", "numpy", "--shape", "16x16,16x16",
                "--processes", "1", "--min-samples", str(BENCH_SAMPLES), "--max-samples",
                str(BENCH_SAMPLES), "--seed", str(i), "--json"]  # fmt: skip
    else:
        args = [D5, "run", str(RECIPE), "--seed", str(i), "--json"]
    if i % 4 < 2:
        return [*args, "--db", db], _environ()
    return args, {**_environ(), "D5_DB": db}


def _run_ids(document: Any) -> list[str]:
    """Every ``run_id`` a ``--json`` document names, however deep."""
    if isinstance(document, dict):
        own = [document["run_id"]] if isinstance(document.get("run_id"), str) else []
        return own + [r for key, v in document.items() if key != "run_id" for r in _run_ids(v)]
    if isinstance(document, list):
        return [r for item in document for r in _run_ids(item)]
    return []


def test_eight_concurrent_writers_store_every_run_once_and_whole(store_target):
    writers = [_writer(i, store_target) for i in range(WRITERS)]
    procs = [
        subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        for args, env in writers
    ]
    outputs: list[tuple[int, str, str]] = []
    deadline = time.monotonic() + WRITERS_S
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            outputs.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    for i, (code, out, err) in enumerate(outputs):
        assert code == 0, f"writer {i} ({' '.join(writers[i][0][1:3])}) exited {code}: {err}"
        # SQLite's own words, and the store's when it gives up waiting for the lock
        for words in ("database is locked", "stayed locked"):
            assert words not in (out + err).lower(), f"writer {i}: {err}"
    reported = [_run_ids(json.loads(out)) for _, out, _ in outputs]
    assert [len(ids) for ids in reported] == [1] * WRITERS
    ids = [r for (r,) in reported]
    assert len(set(ids)) == WRITERS

    with ResultsStore.open(store_target) as store:
        runs = store.list_runs(limit=None)
        assert sorted(r.id for r in runs) == sorted(ids)  # each once, nothing else
        for i, run_id in enumerate(ids):
            run = store.get_run(run_id)
            assert run.status == "complete", (run_id, run.status, run.error)
            assert run.kind == ("op" if i % 2 == 0 else "train")
            measurements = store.measurements(run_id)
            assert measurements, f"run {run_id} stored no measurement"
            for m in measurements:
                # every sample of every measurement, none twice
                assert len(store.samples(m.id)) == m.n > 0, (run_id, m.metric)
            metrics = {m.metric for m in measurements}
            if i % 2 == 0:
                assert {"time", "gflops"} <= metrics
                assert all(m.n == BENCH_SAMPLES for m in measurements)
            else:
                assert {"loss", "step_time"} <= metrics
                losses = next(m for m in measurements if m.metric == "loss")
                steps = next(m for m in measurements if m.metric == "step_time")
                assert losses.n == steps.n


@pytest.mark.parametrize("command", ["bench op", "run"])
def test_a_writer_killed_mid_run_leaves_its_postgresql_run_incomplete(
    postgres_db, command, tmp_path
):
    if command == "bench op":
        # a measurement that would go on for ten minutes
        args = [D5, "bench", "op", "Gemm", "--backends", "numpy", "--shape", "64x64,64x64",
                "--processes", "1", "--time-budget", "600", "--max-samples", "10000000",
                "--rel-ci", "0"]  # fmt: skip
    else:
        # a learning rate that never reaches the target, and epochs enough for minutes
        # (the recipe's own 30 can end within the second the test waits)
        recipe = tmp_path / "digits-long.toml"
        recipe.write_text(RECIPE.read_text().replace("epochs = 30", "epochs = 3000"))
        args = [D5, "run", str(recipe), "--set", "lr=1e-9", "--set", "batch_size=16"]
    with ResultsStore.open(postgres_db) as store:
        done = store.begin_run("measure", "finished before", environment={"cpu": {"model": "T"}})
        store.add_measurement(done, "time", [1.0, 2.0, 3.0])
        store.finish_run(done)
    proc = subprocess.Popen(
        [*args, "--db", postgres_db],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=_environ(),
    )
    try:
        run_id = None
        deadline = time.monotonic() + START_S
        while run_id is None and time.monotonic() < deadline and proc.poll() is None:
            with ResultsStore.open(postgres_db) as store:
                running = [r.id for r in store.list_runs(limit=None) if r.status == "running"]
            run_id = running[0] if running else None
            time.sleep(0.1)
        assert run_id is not None, f"no run began (d5 exited {proc.poll()})"
        time.sleep(1.0)  # mid-run: its worker measures, or it trains
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL

    with ResultsStore.open(postgres_db) as store:
        killed = store.get_run(run_id)
        assert killed.status == "incomplete"
        assert f"pid {proc.pid}" in (killed.error or "")
        for m in store.measurements(run_id):
            assert len(store.samples(m.id)) == m.n  # what was stored is whole
        assert store.get_run(done).status == "complete"
        assert sorted(r.id for r in store.list_runs(limit=None)) == sorted([done, run_id])
    # a second reader sees the same: the mark is stored, not recomputed per reader
    with ResultsStore.open(postgres_db) as store:
        assert store.get_run(run_id).status == "incomplete"
