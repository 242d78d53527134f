"""Measuring in fresh worker processes: rounds, randomized order, failures, pinning."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from d5core.errors import UsageError
from d5core.measure.engine import MeasureOptions
from d5core.measure.invocations import (
    Job,
    PreparedJob,
    build_job,
    job_kinds,
    job_target,
    parse_cpus,
    run_invocations,
)
from d5core.measure.nested import NestedSummary
from d5core.measure.standard_jobs import copy, gemm, pyloop, spin

# Tiny budgets: each worker spends most of its second importing d5.
QUICK = MeasureOptions(warmup=1, min_samples=6, max_samples=50, time_budget_s=0.02)
SPIN_S = 2e-4


def test_each_round_is_a_fresh_process_running_every_job_in_a_seeded_random_order() -> None:
    jobs = [Job("spin", {"seconds": SPIN_S}, name=f"spin{i}") for i in range(3)]
    seen = []
    result = run_invocations(jobs, processes=3, options=QUICK, seed=7, on_process=seen.append)

    assert result.stopped_by == "processes" and len(result.rounds) == 3
    assert [r.index for r in seen] == [0, 1, 2]
    pids = {r.pid for r in result.rounds}
    assert len(pids) == 3 and os.getpid() not in pids
    orders = [r.order for r in result.rounds]
    assert all(sorted(o) == [0, 1, 2] for o in orders)
    # The same seed draws the same orders; the orders are recorded with every run.
    import random

    rng = random.Random(7)
    assert orders == [rng.sample([0, 1, 2], 3) for _ in range(3)]
    for job_index, job in enumerate(result.jobs):
        assert job.error is None and len(job.runs) == 3
        for run in job.runs:
            record = result.rounds[run.round]
            assert record.order[run.position] == job_index
            assert run.pid == record.pid and run.round_size == 3
            m = run.measurement
            assert len(run.samples) == m.summary.n >= 6 and m.name == f"spin{job_index}"
            assert m.warmup_runs >= 1 and m.stopped_by in ("ci", "time_budget", "max_samples")
            assert m.options == QUICK
        assert isinstance(job.summary, NestedSummary)
        assert job.summary.n_processes == 3
        assert job.summary.median == pytest.approx(SPIN_S, rel=0.2)


def test_a_failing_job_is_reported_alone_and_left_out_of_later_rounds() -> None:
    jobs = [
        Job("spin", {"seconds": SPIN_S}),
        Job("gemm", {"n": -1}, name="bad gemm"),
        Job("faulthandler:_sigsegv", name="crash"),
    ]
    result = run_invocations(jobs, processes=3, options=QUICK, seed=1)
    good, bad, crash = result.jobs
    assert good.error is None and len(good.runs) >= 2 and good.summary is not None
    assert bad.error == "ValueError: n must be positive, got -1" and bad.runs == []
    assert crash.error is not None
    assert crash.error.startswith("the worker process was killed by SIGSEGV while running it")
    # Each failing job failed once and was not tried again.
    failures = [f for r in result.rounds for f in r.failures]
    assert sorted(failures) == [1, 2]


def test_a_worker_that_cannot_start_fails_every_job_with_its_error() -> None:
    jobs = [Job("spin", {"seconds": SPIN_S}), Job("pyloop", {"iterations": 10})]
    result = run_invocations(jobs, processes=3, options=QUICK, env={"PYTHONHOME": "/nonexistent"})
    assert result.stopped_by == "failed" and len(result.rounds) == 1
    for job in result.jobs:
        assert job.error.startswith(
            "the worker process exited with code 1 before running any job: "
        )


def test_a_worker_past_its_time_limit_is_killed_and_its_job_fails() -> None:
    # The limit counts from the worker's handshake and has no start limit here, so how
    # long the machine takes to start a Python process does not matter (issue 28, 8).
    slow = Job("spin", {"seconds": 1.0}, name="slow")  # 7 calls of 1 s: far past 2 s
    result = run_invocations(
        [slow], processes=2, options=QUICK, timeout_s=2.0, start_timeout_s=None
    )
    assert result.jobs[0].error == "the worker process timed out after 2 s while running it"
    assert result.stopped_by == "failed" and len(result.rounds) == 1


def test_the_time_limit_counts_per_job_from_the_handshake() -> None:
    # Five jobs of about 1 s each (7 calls of 0.15 s): the round outlasts the 4-s limit,
    # no job does, so none is killed.
    jobs = [Job("spin", {"seconds": 0.15}, name=f"quick{i}") for i in range(5)]
    result = run_invocations(jobs, processes=1, options=QUICK, timeout_s=4.0)
    assert [j.error for j in result.jobs] == [None] * 5
    assert all(len(j.runs) == 1 for j in result.jobs)
    assert result.rounds[0].elapsed_s > 4.0


def test_a_worker_that_never_makes_its_handshake_is_killed_at_the_start_limit(
    tmp_path: Path,
) -> None:
    # A sitecustomize that hangs: the worker never says "start".
    (tmp_path / "sitecustomize.py").write_text("import time\ntime.sleep(120)\n")
    result = run_invocations(
        [Job("spin", {"seconds": SPIN_S})],
        processes=1,
        options=QUICK,
        env={"PYTHONPATH": str(tmp_path)},
        start_timeout_s=1.0,
    )
    assert result.jobs[0].error == "the worker process did not start within 1 s"


def test_time_limits_that_are_not_positive_finite_numbers_are_refused() -> None:
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(UsageError, match="--timeout"):
            run_invocations([Job("spin")], processes=1, timeout_s=bad)


def test_rounds_stop_once_every_between_process_interval_is_narrow_enough() -> None:
    job = Job("spin", {"seconds": SPIN_S})
    result = run_invocations([job], processes=6, options=QUICK, min_processes=2, rel_ci=0.5)
    assert result.stopped_by == "ci" and len(result.rounds) == 2
    assert result.jobs[0].summary.ci_rel_halfwidth <= 0.5


def test_workers_are_pinned_to_the_cpus_asked_for_and_it_is_recorded() -> None:
    cpu = min(os.sched_getaffinity(0))
    result = run_invocations(
        [Job("spin", {"seconds": SPIN_S})],
        processes=1,
        options=QUICK,
        cpus=[cpu],
        env={"OMP_NUM_THREADS": "1"},
    )
    assert result.cpus == [cpu] and result.rounds[0].cpus == [cpu]
    assert result.env == {"OMP_NUM_THREADS": "1"}
    assert result.jobs[0].summary.label == "between-run variance unknown"


def test_worker_keeps_its_protocol_clean_of_what_jobs_print() -> None:
    request = {
        "version": 1,
        "jobs": [
            {"index": 0, "target": "builtins:print", "args": {"end": "from python\n"}},
            {"index": 1, "target": "os:system", "args": {"command": "echo from a child"}},
        ],
        "options": QUICK.to_json(),
        "cpus": None,
    }
    out = subprocess.run(
        [sys.executable, "-m", "d5core.measure._worker"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        check=True,
    )
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert [e["event"] for e in events] == ["start", "result", "result", "done"]
    assert "from python" in out.stderr and "from a child" in out.stderr
    # Neither builder returned a callable: a one-line error for each job.
    assert (
        events[1]["error"] == "TypeError: builder builtins:print returned NoneType, not a callable"
    )
    assert events[2]["error"] == "TypeError: builder os:system returned int, not a callable"


def test_job_kinds_resolve_to_builders_and_unknown_ones_are_refused() -> None:
    assert job_target("gemm") == job_kinds()["gemm"] == "d5core.measure.standard_jobs:gemm"
    assert job_target("my.module:build") == "my.module:build"
    with pytest.raises(UsageError, match="unknown job kind 'nosuch'; use one of copy, gemm"):
        job_target("nosuch")
    with pytest.raises(UsageError, match="unknown job kind"):
        run_invocations([Job("nosuch")], processes=1)
    with pytest.raises(UsageError, match="must be JSON"):
        run_invocations([Job("spin", {"seconds": object()})], processes=1)
    with pytest.raises(UsageError, match=r"--processes must be 1\.\.10000"):
        run_invocations([Job("spin")], processes=0)
    with pytest.raises(UsageError, match="nothing to measure"):
        run_invocations([], processes=1)


def test_build_job_accepts_callables_and_prepared_jobs() -> None:
    prepared = build_job("d5core.measure.standard_jobs:spin", {"seconds": 1e-6})
    assert isinstance(prepared, PreparedJob) and prepared.setup is None
    prepared.fn()


def test_cpu_lists_parse_ranges_and_refuse_what_cannot_be_used() -> None:
    available = sorted(os.sched_getaffinity(0))
    assert parse_cpus(f"{available[0]}") == [available[0]]
    assert parse_cpus(",".join(str(c) for c in available)) == available
    with pytest.raises(UsageError, match="expected CPU numbers and ranges"):
        parse_cpus("a-b")
    with pytest.raises(UsageError, match="runs backwards"):
        parse_cpus("3-1")
    with pytest.raises(UsageError, match="CPU 4096 is not available to d5"):
        parse_cpus("4096")


def test_standard_jobs_compute_what_they_say() -> None:
    import numpy as np

    out = gemm(n=4, seed=1)()
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((4, 4)), rng.standard_normal((4, 4))
    np.testing.assert_allclose(out, a @ b)
    assert pyloop(iterations=10)() == 45
    copy(mib=0.01)()
    spin(seconds=1e-6)()
    with pytest.raises(ValueError, match="mib must be positive"):
        copy(mib=0)
