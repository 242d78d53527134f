"""What the native-kernel benchmarks (``native_gemm.py``, ``native_conv.py``) share: timing
sides in interleaved rounds, waiting for a quiet machine and re-measuring a row the load
rose during, the FMA peak every figure is a fraction of, and the table cells.

A *side* is one implementation of a row's operation (native, numpy, torch): a callable
that computes the result into buffers made beforehand. A *round* times a batch of calls
of every side, in an order that rotates from round to round, so a slow spell of the
machine hits each side alike; the table reports per side the median over rounds, and
per pair of sides the ratio of the medians with the range of the per-round ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import d5_kernels

from d5core.measure.fitness import MachineState, snapshot

__all__ = [
    "IDLE_GAP",
    "OPENBLAS_OVERRIDES",
    "OTHERS_NOTE",
    "LoadWatch",
    "Waiting",
    "add_common_arguments",
    "cores",
    "drop_openblas_overrides",
    "interleaved",
    "isa_line",
    "load1",
    "load_cells",
    "load_footer",
    "measure_peaks",
    "measure_row",
    "method_lines",
    "parse_list",
    "ratio_cell",
    "ratio_summary",
    "select_isa",
    "side_cell",
    "side_summary",
]

#: Seconds of idleness before each batch: the previous side's worker threads stop
#: spinning (OpenBLAS's spin for about 2^28 cycles after a call, tens of milliseconds;
#: OpenMP's for a while too) and so do not compete with this side's threads.
IDLE_GAP = 0.2
#: A call shorter than this gets one untimed call after the idle gap, which wakes the
#: side's sleeping threads; a longer call's wake-up is lost in its own time.
SHORT_CALL = 0.02
#: Environment variables that make OpenBLAS run other kernels than it would choose
#: (``OPENBLAS_CORETYPE``) or block for another cache (``OPENBLAS_L2_SIZE``). It reads
#: them once, when it loads, so a process that had them must start again without them.
OPENBLAS_OVERRIDES = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
#: How the re-executed process learns which of them its parent removed.
_REMOVED_MARK = "D5_BENCH_REMOVED_ENV"
#: Seconds between two looks at the load average while waiting for a quiet machine.
_POLL = 2.0


# -- command line ------------------------------------------------------------------------


def parse_list(text: str) -> list[str]:
    """``"a, b,c"`` as ``["a", "b", "c"]`` (empty items dropped)."""
    return [item.strip() for item in text.split(",") if item.strip()]


def add_common_arguments(parser: argparse.ArgumentParser, rounds: int) -> None:
    """The options both scripts take: threads, rounds, load limits, ISA, dtype, JSON."""
    parser.add_argument("--threads", default="1,2", help="thread counts (default 1,2)")
    parser.add_argument("--rounds", type=int, default=rounds, help=f"default {rounds}")
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        help="measure a row again, up to this many times, when the load rose to the core "
        "count during it and the wait budgets leave time to wait for a quiet machine "
        "(default 2)",
    )
    parser.add_argument(
        "--max-wait",
        type=float,
        default=120.0,
        help="seconds a row may wait, over all its attempts, for the load to fall under "
        "the core count (default 120); it is measured anyway after that, and marked",
    )
    parser.add_argument(
        "--wait-budget",
        type=float,
        default=300.0,
        help="seconds all rows together may wait (default 300), so that a machine busy "
        "for good does not hold the run for an hour",
    )
    parser.add_argument("--isa", default=None, help="force d5-kernels' generic, avx2 or avx512")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def select_isa(name: str | None) -> None:
    """Force d5-kernels' micro-kernels to ``name`` (``--isa``), if given."""
    if name:
        d5_kernels.set_isa(name)


def drop_openblas_overrides() -> list[str]:
    """Run this script without :data:`OPENBLAS_OVERRIDES`, so that OpenBLAS picks its
    own best kernels and blocking: when one is set, start the script again without it
    (``execve``; this call then never returns). Returns the names the parent removed,
    for the report."""
    present = [name for name in OPENBLAS_OVERRIDES if name in os.environ]
    if present:
        env = {k: v for k, v in os.environ.items() if k not in present}
        env[_REMOVED_MARK] = ",".join(present)
        sys.stdout.flush()
        sys.stderr.flush()
        # sys.executable, not the name the script was started with: a venv's Python
        # finds its environment from the path it is started by.
        os.execve(sys.executable, [sys.executable, *sys.orig_argv[1:]], env)
    return parse_list(os.environ.pop(_REMOVED_MARK, ""))


# -- the machine ---------------------------------------------------------------------------


def cores() -> int:
    """The machine's logical CPUs: the load average the rows must stay under."""
    return os.cpu_count() or 1


def load1() -> float:
    """The 1-minute load average (0 where the system does not give it)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def isa_line() -> str:
    """The micro-kernels d5-kernels runs, those the CPU offers, and the environment
    variables that choose them, if set."""
    text = f"d5-kernels ISA {d5_kernels.isa()} (CPU runs {', '.join(d5_kernels.available_isas())})"
    chosen = [
        f"{n}={os.environ[n]}" for n in ("D5_KERNELS_ISA", "D5_NATIVE_ISA") if n in os.environ
    ]
    return text + (f"; {', '.join(chosen)}" if chosen else "")


def measure_peaks(dtypes: Sequence[str], seconds: float = 0.2, tries: int = 3) -> dict[str, float]:
    """One core's FMA peak in GFLOP/s per dtype, with the widest FMA the CPU runs (the
    machine's limit, whatever ``--isa`` forces): the best of ``tries`` measurements,
    since competition only ever lowers it."""
    widest = d5_kernels.available_isas()[-1]
    return {
        dtype: max(d5_kernels.peak_gflops(widest, dtype, seconds) for _ in range(tries))
        for dtype in dtypes
    }


# -- load ------------------------------------------------------------------------------------


@dataclass
class LoadWatch:
    """The 1-minute load average sampled while one row is measured (after each round)."""

    cores: int
    samples: list[float] = field(default_factory=list)

    def sample(self) -> None:
        self.samples.append(load1())

    @property
    def highest(self) -> float:
        return max(self.samples, default=0.0)

    @property
    def stayed_under(self) -> bool:
        return self.highest < self.cores


def wait_for_quiet(limit: int, max_wait: float) -> float:
    """Sleep until the 1-minute load average is under ``limit``, for at most
    ``max_wait`` seconds; returns the seconds waited."""
    start = time.monotonic()
    while load1() >= limit and time.monotonic() - start < max_wait:
        time.sleep(min(_POLL, max(0.0, max_wait - (time.monotonic() - start))))
    return time.monotonic() - start


def others_share(before: MachineState, after: MachineState) -> float | None:
    """The share of all cores' time other processes used between two snapshots
    (``None`` when /proc cannot be read)."""
    if before.cpu is None or after.cpu is None:
        return None
    if before.own_ticks is None or after.own_ticks is None:
        return None
    total = after.cpu.total - before.cpu.total
    others = (after.cpu.busy - before.cpu.busy) - (after.own_ticks - before.own_ticks)
    return max(0.0, others / total) if total > 0 else None


@dataclass
class Waiting:
    """How long rows may wait for a quiet machine: ``per_row`` seconds over all of a
    row's attempts, ``total`` over the whole run (``spent`` so far)."""

    per_row: float
    total: float
    spent: float = 0.0

    def wait(self, limit: int, row_spent: float) -> float:
        """Wait for the load to fall under ``limit`` as long as both budgets allow."""
        allowed = max(0.0, min(self.per_row - row_spent, self.total - self.spent))
        waited = wait_for_quiet(limit, allowed)
        self.spent += waited
        return waited

    def exhausted(self, row_spent: float) -> bool:
        """Whether a row that waited ``row_spent`` seconds may wait no longer."""
        return min(self.per_row - row_spent, self.total - self.spent) <= 0

    def report(self) -> dict[str, float]:
        """The budgets and the seconds spent, for the JSON report and the footer."""
        return {"per_row_s": self.per_row, "budget_s": self.total, "spent_s": round(self.spent, 1)}


def measure_row(
    measure: Callable[[LoadWatch], dict[str, Any]], retries: int, waiting: Waiting
) -> dict[str, Any]:
    """Measure a row on a quiet machine: wait (within ``waiting``'s budgets) for the load
    average to fall under the core count, measure (``measure`` samples the load through
    the watch it is given), and measure again, up to ``retries`` times, when the load
    rose to the core count or above meanwhile (while the budgets leave time to wait).
    Returns the first attempt that stayed under, else the one with the lowest load,
    with the load and the other processes' CPU share it was measured at, and the
    number of attempts made."""
    limit = cores()
    best: dict[str, Any] | None = None
    waited = 0.0
    for attempt in range(1, retries + 2):
        waited += waiting.wait(limit, waited)
        watch = LoadWatch(limit, [load1()])
        before = snapshot()
        row = measure(watch)
        watch.sample()
        row.update(
            load=watch.highest,
            load_under_cores=watch.stayed_under,
            others_cpu=others_share(before, snapshot()),
            attempts=attempt,
            waited_s=round(waited, 1),
        )
        if best is None or row["load"] < best["load"]:
            best = row
        # Measured again at once, a busy row would most likely be busy again: a retry
        # needs time left to wait for a quiet machine.
        if watch.stayed_under or waiting.exhausted(waited):
            break
    assert best is not None
    best["attempts"] = attempt
    return best


def load_footer(report: Mapping[str, Any]) -> str:
    """Whether every row of ``report`` was measured with the load under the core count,
    and the rule (from the report's ``rows``, ``retries`` and ``waiting``)."""
    rows, waiting = report["rows"], report["waiting"]
    over = [row for row in rows if not row["load_under_cores"]]
    rule = (
        f"each row waited (up to {waiting['per_row_s']:.0f} s; {waiting['spent_s']:.0f} s "
        f"of the run's {waiting['budget_s']:.0f} s spent) for the 1-minute load average to "
        f"fall under the core count ({cores()}) and was measured again (up to "
        f"{report['retries']} times) when it rose to it or above; 'load' is the highest "
        "value sampled during the row"
    )
    if not over:
        return f"The load average stayed under the core count during every row: {rule}."
    return (
        f"The load average did NOT stay under the core count during {len(over)} of "
        f"{len(rows)} rows (marked 'no'; their figures are less trustworthy): {rule}."
    )


# -- timing ----------------------------------------------------------------------------------


def per_call(run: Callable[[], object], seconds: float, estimate: float) -> float:
    """Seconds per call of ``run`` over a batch of about ``seconds`` (at least one call),
    after :data:`IDLE_GAP` seconds of idleness; ``estimate`` is a previous call's time."""
    time.sleep(IDLE_GAP)
    if estimate < SHORT_CALL:
        run()
    reps = max(1, round(seconds / max(estimate, 1e-7)))
    start = time.perf_counter()
    for _ in range(reps):
        run()
    return (time.perf_counter() - start) / reps


def _one_call(run: Callable[[], object]) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def interleaved(
    sides: Mapping[str, Callable[[], object]], rounds: int, seconds: float, watch: LoadWatch
) -> dict[str, list[float]]:
    """Seconds per call of every side in each of ``rounds`` rounds. Each round times a
    batch of each side, the first side rotating from round to round; the load is
    sampled after every round."""
    names = list(sides)
    estimates = {name: _one_call(sides[name]) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            times[name].append(per_call(sides[name], seconds, estimates[name]))
            estimates[name] = times[name][-1]
        watch.sample()
    return times


# -- figures -----------------------------------------------------------------------------


def side_summary(times: Sequence[float], flops: float, roof: float) -> dict[str, float]:
    """A side's median GFLOP/s over rounds, its fraction of ``roof`` (GFLOP/s) and its
    median milliseconds per call."""
    gflops = statistics.median(flops / t / 1e9 for t in times)
    return {
        "gflops": gflops,
        "peak_fraction": gflops / roof,
        "ms": statistics.median(times) * 1e3,
    }


def ratio_summary(
    native: Sequence[float], other: Sequence[float], flops: float
) -> dict[str, float]:
    """Native's speed over the other side's: the ratio of the median GFLOP/s, and the
    lowest and highest ratio within one round (the same moment of the machine)."""
    per_round = [b / a for a, b in zip(native, other, strict=True)]
    medians = statistics.median(flops / t for t in native) / statistics.median(
        flops / t for t in other
    )
    return {"ratio": medians, "min": min(per_round), "max": max(per_round)}


def side_cell(side: Mapping[str, float]) -> str:
    """``123.4 (91%)``: GFLOP/s and the fraction of the FMA peak."""
    return f"{side['gflops']:.1f} ({100 * side['peak_fraction']:.0f}%)"


def ratio_cell(ratio: Mapping[str, float]) -> str:
    """``0.97 [0.93, 1.01]``: the ratio of medians and the per-round range."""
    return f"{ratio['ratio']:.2f} [{ratio['min']:.2f}, {ratio['max']:.2f}]"


def method_lines(report: Mapping[str, Any], ratios: str) -> list[str]:
    """The header lines both scripts print after their own: the peak every % is of, and
    how the rounds are run and summarised (``ratios`` says what the ratio columns are)."""
    peaks = ", ".join(f"{d} {g:.1f}" for d, g in report["peak_gflops_per_core"].items())
    return [
        f"FMA peak per core (GFLOP/s, {report['peak_isa']}): {peaks}; % = share of that "
        "peak times the threads",
        f"{report['rounds']} interleaved rounds (rotating order, {IDLE_GAP} s idle before "
        f"each batch): medians; {ratios}, the ratio of the medians [lowest, highest "
        "per-round ratio]",
        "",
    ]


#: What the tables' last column is.
OTHERS_NOTE = (
    "others' CPU: the share of all cores' time other processes used during the row (/proc/stat)."
)


def load_cells(row: Mapping[str, Any]) -> str:
    """A table row's last three cells: the highest load sampled during it, whether it
    stayed under the core count, and other processes' share of the CPU."""
    others = row["others_cpu"]
    return (
        f"| {row['load']:.2f} | {'yes' if row['load_under_cores'] else 'no'} "
        f"| {'?' if others is None else f'{100 * others:.0f}%'} |"
    )
