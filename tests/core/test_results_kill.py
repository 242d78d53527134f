"""Killing a writer with SIGKILL mid-run never corrupts the store nor loses finished runs,
on both backends (an SQLite file and a PostgreSQL database, tests/conftest.py)."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from d5core.plugins import PluginManager
from d5core.results import ResultsStore
from d5core.testing.postgres import query_database

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs SIGKILL")

DONE_RUNS, DONE_MEASUREMENTS, DONE_SAMPLES, LOOP_SAMPLES = 3, 3, 500, 4000

WRITER = textwrap.dedent(
    f"""
    import sys
    from d5core.plugins import PluginManager
    from d5core.results import ResultsStore

    env = {{"cpu": {{"model": "Test CPU"}}}}
    with ResultsStore.open(sys.argv[1], manager=PluginManager({{}}, discover_installed=False)) as s:
        for r in range({DONE_RUNS}):
            run_id = s.begin_run("measure", f"done-{{r}}", environment=env, seed=r)
            for j in range({DONE_MEASUREMENTS}):
                values = [r * 1e6 + j * 1e3 + k for k in range({DONE_SAMPLES})]
                s.add_measurement(run_id, "time", values, labels={{"j": j}}, summary={{"n": len(values)}})
            s.add_metric(run_id, "runs_before", r)
            s.finish_run(run_id)
        run_id = s.begin_run("measure", "killed", environment=env)
        print("run", run_id, flush=True)
        j = 0
        while True:
            values = [j + k / 1e4 for k in range({LOOP_SAMPLES})]
            s.add_measurement(run_id, "time", values, labels={{"j": j}}, summary={{"n": len(values)}})
            j += 1
            if j == 3:
                print("looping", flush=True)
    """
)


def _lines(proc: subprocess.Popen[str]) -> queue.Queue[str]:
    """Lines of the child's standard output, read on a thread so waits can time out."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line.strip())

    threading.Thread(target=pump, daemon=True).start()
    return lines


@pytest.mark.parametrize("delay_s", [0.0, 0.013, 0.15])
def test_sigkill_mid_run_keeps_the_store_sound_and_finished_runs_whole(
    tmp_path, store_target, delay_s
):
    script, db = tmp_path / "writer.py", store_target
    script.write_text(WRITER)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lines = _lines(proc)
        first = lines.get(timeout=60)
        assert first.startswith("run "), first
        killed_id = first.split()[1]
        assert lines.get(timeout=60) == "looping"
        time.sleep(delay_s)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    if "://" not in db:
        assert query_database(db, "PRAGMA integrity_check") == [("ok",)]
    status = "SELECT status FROM runs WHERE id = ?"
    assert query_database(db, status, (killed_id,)) == [("running",)]

    with ResultsStore.open(db, manager=PluginManager({}, discover_installed=False)) as s:
        runs = {r.name: r for r in s.list_runs()}
        assert set(runs) == {f"done-{r}" for r in range(DONE_RUNS)} | {"killed"}

        for r in range(DONE_RUNS):
            run = runs[f"done-{r}"]
            assert run.status == "complete" and run.seed == r
            measurements = s.measurements(run.id)
            assert [m.labels["j"] for m in measurements] == list(range(DONE_MEASUREMENTS))
            for m in measurements:
                j = m.labels["j"]
                expected = [r * 1e6 + j * 1e3 + k for k in range(DONE_SAMPLES)]
                assert m.n == DONE_SAMPLES and s.samples(m.id) == expected
            assert [k.value for k in s.metrics(run.id)] == [float(r)]

        killed = runs["killed"]
        assert killed.status == "incomplete"
        assert f"pid {proc.pid}" in (killed.error or "")
        measurements = s.measurements(killed.id)
        assert len(measurements) >= 3
        for m in measurements:
            # Every stored measurement is whole: all of its samples or none of it.
            j = m.labels["j"]
            assert m.n == LOOP_SAMPLES
            assert s.samples(m.id) == [j + k / 1e4 for k in range(LOOP_SAMPLES)]
        assert [m.labels["j"] for m in measurements] == list(range(len(measurements)))

    assert query_database(db, status, (killed_id,)) == [("incomplete",)]
    orphans = query_database(
        db, "SELECT count(*) FROM samples WHERE measurement_id NOT IN (SELECT id FROM measurements)"
    )
    assert orphans == [(0,)]


def test_a_store_left_by_a_killed_writer_accepts_new_runs(store_target):
    db = store_target
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(db)], stdout=subprocess.PIPE, text=True
    )
    try:
        lines = _lines(proc)
        assert lines.get(timeout=60).startswith("run ")
        assert lines.get(timeout=60) == "looping"
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)
    with ResultsStore.open(db, manager=PluginManager({}, discover_installed=False)) as s:
        run_id = s.begin_run("measure", "after", environment={"cpu": {"model": "Test CPU"}})
        s.add_measurement(run_id, "time", [1.0, 2.0])
        s.finish_run(run_id)
        assert s.get_run(run_id).status == "complete"
        assert len(s.list_runs()) == DONE_RUNS + 2
