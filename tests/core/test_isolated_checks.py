"""Checks of user or plugin code run in a worker process with a time limit
(d5core.validate.isolated): whatever kills the worker, or keeps it too long, is a
one-line failure naming the signal and the phase, never the end of d5."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from d5core.errors import UsageError
from d5core.validate.isolated import check_timeout, run_isolated

HERE = Path(__file__).resolve().parent
TARGET = "test_isolated_checks:check"


def check(*, phase: Any, action: str) -> Any:
    """The check the workers run (imported there from this file, through PYTHONPATH)."""
    phase("forward")
    if action == "segfault":
        os.kill(os.getpid(), signal.SIGSEGV)
    if action == "abort":
        os.abort()
    if action == "corrupt":  # as glibc says it, then framework noise, then the abort
        os.write(2, b"free(): double free detected in tcache 2\nsome framework log line\n")
        os.abort()
    if action == "exit0":
        os._exit(0)
    if action == "sleep":
        while True:
            time.sleep(1)
    if action == "usage":
        raise UsageError("bad --shape: give one per input")
    if action == "raise":
        raise RuntimeError("the backend broke")
    phase("backward")
    return {"answer": 42}


@pytest.fixture(autouse=True)
def _importable_here(monkeypatch: pytest.MonkeyPatch) -> None:
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    monkeypatch.setenv("PYTHONPATH", path)


def test_a_check_that_returns_gives_its_result():
    outcome = run_isolated(TARGET, {"action": "none"}, timeout_s=120)
    assert outcome.data == {"answer": 42} and not outcome.failure
    assert outcome.phase == "backward"


@pytest.mark.parametrize("action, signal_name", [("segfault", "SIGSEGV"), ("abort", "SIGABRT")])
def test_a_worker_killed_by_a_signal_is_a_failure_naming_the_signal_and_phase(action, signal_name):
    outcome = run_isolated(TARGET, {"action": action}, timeout_s=120)
    assert outcome.data is None and not outcome.usage
    assert outcome.failure.startswith(f"the worker was killed by {signal_name} during forward")
    assert "\n" not in outcome.failure


def test_a_fatal_message_on_stderr_is_named_and_other_noise_is_not():
    outcome = run_isolated(TARGET, {"action": "corrupt"}, timeout_s=120)
    assert outcome.failure == (
        "the worker was killed by SIGABRT during forward (free(): double free detected in tcache 2)"
    )


def test_a_worker_that_exits_0_without_a_result_is_a_failure():
    outcome = run_isolated(TARGET, {"action": "exit0"}, timeout_s=120)
    assert outcome.failure == (
        "the worker exited with code 0 without reporting a result during forward"
    )


def test_a_worker_past_its_time_limit_is_killed_and_named():
    # the limit is reached in any case: the check never ends, however busy the machine
    outcome = run_isolated(TARGET, {"action": "sleep"}, timeout_s=3)
    assert outcome.data is None
    assert outcome.failure.startswith("the worker did not finish within its time limit of 3 s")


def test_a_usage_error_in_the_worker_stays_a_usage_error_in_its_own_words():
    outcome = run_isolated(TARGET, {"action": "usage"}, timeout_s=120)
    assert outcome.usage and outcome.failure == "bad --shape: give one per input"


def test_an_exception_in_the_worker_is_a_failure_with_its_type():
    outcome = run_isolated(TARGET, {"action": "raise"}, timeout_s=120)
    assert not outcome.usage and outcome.failure == "RuntimeError: the backend broke"


@pytest.mark.parametrize("value", [0.0, -1.0, float("nan"), float("inf")])
def test_a_time_limit_that_is_not_a_positive_number_is_refused(value):
    with pytest.raises(UsageError, match="--timeout must be a positive number of seconds"):
        check_timeout(value)
