"""The allocator policy: chosen by D5_ALLOCATOR, applied once per measuring process,
recorded in the environment, and visible in the page faults a measurement counts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from d5core.allocator import (
    ALLOCATOR_VAR,
    FAULT_COST_S,
    allocator_settings,
    page_fault_warning,
    requested_policy,
)
from d5core.environment import environment_differences
from d5core.errors import UsageError

GLIBC = allocator_settings()["library"].startswith("glibc")
needs_glibc = pytest.mark.skipif(not GLIBC, reason="the steady policy is glibc's mallopt")


def _fresh(code: str, **env: str) -> dict:
    """Run ``code`` in a new interpreter (the policy is set once per process) with
    ``env`` on top of a clean allocator environment; it prints one JSON line."""
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("MALLOC_") and k not in (ALLOCATOR_VAR, "LD_PRELOAD")}  # fmt: skip
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**base, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_policy_is_steady_unless_the_variable_says_system() -> None:
    assert requested_policy({}) == "steady"
    assert requested_policy({ALLOCATOR_VAR: ""}) == "steady"
    assert requested_policy({ALLOCATOR_VAR: " System "}) == "system"


def test_an_unknown_policy_is_refused_naming_the_variable_and_the_choices() -> None:
    with pytest.raises(UsageError, match=r"D5_ALLOCATOR='fast'.*steady or system"):
        requested_policy({ALLOCATOR_VAR: "fast"})


def test_the_command_refuses_an_unknown_policy_in_one_line() -> None:
    env = {**os.environ, ALLOCATOR_VAR: "fast"}
    done = subprocess.run(
        [sys.executable, "-m", "d5core", "list-plugins"],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "D5_ALLOCATOR='fast'" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


@needs_glibc
def test_steady_sets_both_thresholds_and_the_environment_records_them() -> None:
    out = _fresh("""
        import json
        from d5core.environment import capture_environment
        from d5core.allocator import apply_allocator_policy
        apply_allocator_policy()
        print(json.dumps(capture_environment()["allocator"]))
    """)
    assert out["policy"] == "steady" and out["applied"] is True
    assert out["mmap_threshold"] >= 32 * 1024 * 1024
    assert out["trim_threshold"] >= 1024 * 1024 * 1024


def test_a_user_choice_in_the_environment_is_left_alone_and_recorded() -> None:
    out = _fresh("""
        import json
        from d5core.allocator import apply_allocator_policy
        print(json.dumps(apply_allocator_policy()))
    """, MALLOC_ARENA_MAX="2")  # fmt: skip
    assert out["policy"] == "user"
    assert out["user"] == {"MALLOC_ARENA_MAX": "2"}
    assert "mmap_threshold" not in out


def test_runs_under_different_policies_are_told_apart() -> None:
    steady = {"allocator": {"policy": "steady", "library": "glibc 2.36", "applied": True}}
    system = {"allocator": {"policy": "system", "library": "glibc 2.36", "applied": True}}
    assert environment_differences(steady, system) == ["allocator.policy: 'steady' vs 'system'"]
    assert environment_differences(steady, {**steady}) == []


_MEASURE_BIG_ALLOCATIONS = """
    import json
    import numpy as np
    from d5core.measure.engine import MeasureOptions, measure
    # 40 MB per call: above the largest threshold glibc sets by itself (32 MiB), so
    # under its own policy every call maps fresh pages
    m = measure(lambda: np.ones(5_000_000), MeasureOptions(
        warmup=3, min_samples=6, max_samples=6))
    print(json.dumps({"faults": m.page_faults_per_call, "median": m.summary.median}))
"""


@needs_glibc
def test_the_steady_policy_reuses_memory_that_the_system_policy_faults_in_each_call() -> None:
    system = _fresh(_MEASURE_BIG_ALLOCATIONS, D5_ALLOCATOR="system")
    steady = _fresh(_MEASURE_BIG_ALLOCATIONS, D5_ALLOCATOR="steady")
    # the kernel may map many pages per fault (large folios, huge pages: 57 faults per
    # 40 MB call on one machine, 568 on another): compare the two, not a page count
    assert system["faults"] >= 10  # every call maps fresh memory
    assert steady["faults"] * 20 < system["faults"]  # the heap keeps it


def test_a_fault_warning_needs_a_noticeable_share_of_the_time() -> None:
    assert page_fault_warning("op", None, 1e-3) is None
    assert page_fault_warning("op", 0.5, 1e-9) is None  # under one fault per call
    # 100 faults at the floor cost are 25 µs: 2.5% of 1 ms warns, 0.25% of 10 ms does not
    assert page_fault_warning("op", 100, 1e-3) is not None
    assert page_fault_warning("op", 100, 10e-3) is None
    line = page_fault_warning("conv", 100, 100 * FAULT_COST_S)
    assert line is not None and line.startswith("conv: 100 page faults per call")


@needs_glibc
def test_page_faults_of_the_setup_between_samples_are_not_counted() -> None:
    out = _fresh("""
        import json
        import time
        import numpy as np
        from d5core.measure.engine import MeasureOptions, measure
        kept = []
        def setup():  # 40 MB of fresh pages before every sample, outside the timing
            kept[:] = [np.ones(5_000_000)]
        m = measure(lambda: time.sleep(0.002),  # slow enough for one call per sample
                    MeasureOptions(warmup=3, min_samples=6, max_samples=6), setup=setup)
        print(json.dumps({"faults": m.page_faults_per_call, "block": m.block_size}))
    """, D5_ALLOCATOR="system")  # fmt: skip
    assert out["block"] == 1
    assert out["faults"] is not None and out["faults"] < 1
