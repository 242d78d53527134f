"""The settings of one inference scenario run under MLPerf LoadGen.

:class:`ScenarioSettings` holds what ``d5 bench net --scenario`` and inference recipes
choose: the scenario, the mode, the load (target QPS for server, samples per query for
multi-stream, expected QPS for offline), how long LoadGen runs (minimum duration and
query count), the seed of every random choice LoadGen makes, and the threads of the
system under test.

The defaults are short but valid on a CPU: every scenario of ``lenet5`` came out VALID
on numpy, torch, onnxruntime, tensorflow and mxnet with them on a 2-core machine, in
about two seconds of load each. Where a setting is left ``None``, the worker derives it
from a short calibration of the executor on the model before LoadGen starts (see
:mod:`d5core.loadgen.loadgen`), and the result records the value used.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from d5core.errors import UsageError

__all__ = [
    "DEFAULT_MIN_DURATION_S",
    "DEFAULT_MIN_QUERY_COUNT",
    "DEFAULT_SAMPLES_PER_QUERY",
    "DEFAULT_SAMPLE_COUNT",
    "DEFAULT_SERVER_LATENCY_MS",
    "DEFAULT_SERVER_MIN_QUERY_COUNT",
    "LOADGEN_BYTES_PER_SAMPLE",
    "MAX_DURATION_S",
    "MAX_SAMPLES_ISSUED",
    "MAX_THREADS",
    "MODES",
    "SCENARIOS",
    "ScenarioSettings",
    "available_memory",
    "default_threads",
    "format_bytes",
    "thread_environment",
]

#: The four LoadGen scenarios, as d5 names them.
SCENARIOS: tuple[str, ...] = ("single-stream", "multi-stream", "server", "offline")
#: ``performance`` (LoadGen's PerformanceOnly) or ``accuracy`` (AccuracyOnly).
MODES: tuple[str, ...] = ("performance", "accuracy")
#: Samples per multi-stream query when none is given (MLPerf's own default).
DEFAULT_SAMPLES_PER_QUERY = 8
#: Seconds of load at least: LoadGen's 10 minutes are far too long for a quick check,
#: and two seconds give every scenario of a small model enough queries to be VALID.
DEFAULT_MIN_DURATION_S = 2.0
#: Queries at least (samples in offline, where one query carries them all).
DEFAULT_MIN_QUERY_COUNT = 100
#: The server scenario's default: LoadGen's early-stopping estimate of the p99 latency
#: needs some 460 queries before it can pass at all, so a server run of 100 queries is
#: INVALID however fast the system is.
DEFAULT_SERVER_MIN_QUERY_COUNT = 800
#: Samples in the query sample library when none is given.
DEFAULT_SAMPLE_COUNT = 128
#: The server scenario's latency bound (its 99th percentile) when none is given:
#: LoadGen's own default.
DEFAULT_SERVER_LATENCY_MS = 100.0
#: The longest ``--min-duration`` (and ``--latency-bound``): a day. MLPerf's own runs
#: last ten minutes; LoadGen counts in nanoseconds, and 1e300 s overflowed it (exit 3).
MAX_DURATION_S = 86_400.0
#: The most samples one run may issue: more is not a benchmark but a hang.
MAX_SAMPLES_ISSUED = 10**9
#: What LoadGen and d5 keep per sample issued, in bytes, on the high side: LoadGen's
#: query and sample metadata (it lays out every query before the first is issued), the
#: response's entry in its logs, and the latency d5 reads back from the trace. A server
#: run at ``--target-qps 1e12`` grew its worker to 9.8 GB before issuing anything.
LOADGEN_BYTES_PER_SAMPLE = 512
#: The most threads a system under test may be given.
MAX_THREADS = 4096
_MAX_SEED = 2**64 - 1  # LoadGen's seeds are 64-bit unsigned


def available_memory() -> int:
    """Bytes of memory this machine has available now (psutil's estimate)."""
    import psutil

    return int(psutil.virtual_memory().available)


def format_bytes(nbytes: float) -> str:
    """``9.8 GB``: a byte count in decimal units."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.3g} {unit}"
    return f"{nbytes:.0f} B"


def _positive(value: float | None, option: str, what: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"{option} must be a finite number ({what}), got {value!r}")
    if value <= 0:
        raise UsageError(f"{option} must be positive ({what}), got {value:g}")


def _at_most(value: float | None, most: float, option: str, what: str) -> None:
    if value is not None and value > most:
        raise UsageError(f"{option} {value:g} is more than d5 runs ({what}: at most {most:g})")


def _count(value: int | None, option: str, what: str, *, low: int = 1) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise UsageError(f"{option} must be a whole number ({what}), got {value!r}")
    if value < low:
        raise UsageError(f"{option} must be at least {low} ({what}), got {value}")


@dataclass(frozen=True)
class ScenarioSettings:
    """What one LoadGen run of one executor is asked to do.

    :param scenario: one of :data:`SCENARIOS`.
    :param mode: ``performance`` or ``accuracy`` (every sample once, outputs logged).
    :param target_qps: server: the rate of the Poisson arrivals, queries per second;
        ``None``: 0.3 times the rate of the calibration's fastest one-sample call,
        at most 500.
    :param latency_bound_ms: server: the bound LoadGen checks the 99th percentile
        against (``None``: :data:`DEFAULT_SERVER_LATENCY_MS`); single-stream and
        multi-stream: an optional bound d5 checks the 90th (single-stream) or 99th
        (multi-stream) percentile against, a failed check when exceeded.
    :param samples_per_query: multi-stream: samples in every query
        (``None``: :data:`DEFAULT_SAMPLES_PER_QUERY`).
    :param expected_qps: offline: the samples per second LoadGen sizes its one query
        by (``None``: the batched rate of the calibration's fastest call).
    :param min_duration_s: LoadGen runs at least this long.
    :param min_query_count: and issues at least this many queries.
    :param seed: LoadGen's sample-selection, sample-index and schedule seeds, and the
        seed of the generated sample inputs.
    :param threads: BLAS, OpenMP and framework threads of the system under test;
        ``None``: one per core the worker may use, less one for LoadGen
        (:func:`default_threads`).
    :param performance_sample_count: samples in the query sample library
        (``None``: :data:`DEFAULT_SAMPLE_COUNT`).
    """

    scenario: str
    mode: str = "performance"
    target_qps: float | None = None
    latency_bound_ms: float | None = None
    samples_per_query: int | None = None
    expected_qps: float | None = None
    min_duration_s: float = DEFAULT_MIN_DURATION_S
    min_query_count: int = DEFAULT_MIN_QUERY_COUNT
    seed: int = 0
    threads: int | None = None
    performance_sample_count: int | None = None

    def check(self) -> ScenarioSettings:
        """Refuse settings LoadGen cannot run; return ``self``.

        :raises UsageError: one line naming the setting, its value and what it must be.
        """
        if self.scenario not in SCENARIOS:
            raise UsageError(
                f"unknown scenario {self.scenario!r}; choose one of {', '.join(SCENARIOS)}"
            )
        if self.mode not in MODES:
            raise UsageError(f"unknown mode {self.mode!r}; choose performance or accuracy")
        _positive(self.target_qps, "--target-qps", "queries per second of the server")
        _positive(self.latency_bound_ms, "--latency-bound", "milliseconds")
        _count(self.samples_per_query, "--samples-per-query", "samples in a multi-stream query")
        _positive(self.expected_qps, "--expected-qps", "samples per second offline")
        _positive(self.min_duration_s, "--min-duration", "seconds of load")
        _count(self.min_query_count, "--min-query-count", "queries LoadGen issues at least")
        _count(self.seed, "--seed", "LoadGen's and the inputs' seed", low=0)
        _count(self.threads, "--threads", "threads of the system under test")
        _count(self.performance_sample_count, "performance_sample_count", "samples in the library")
        self._check_fits()
        for name, scenarios in (
            ("target_qps", ("server",)),
            ("samples_per_query", ("multi-stream",)),
            ("expected_qps", ("offline",)),
        ):
            if getattr(self, name) is not None and self.scenario not in scenarios:
                option = "--" + name.replace("_", "-")
                raise UsageError(
                    f"{option} applies to the {scenarios[0]} scenario only, not to "
                    f"{self.scenario}; leave it out"
                )
        if self.latency_bound_ms is not None and self.scenario == "offline":
            raise UsageError(
                "--latency-bound does not apply to the offline scenario (it has no latency "
                "constraint); leave it out"
            )
        return self

    def _check_fits(self) -> None:
        """Refuse a run whose length, query count or LoadGen's memory cannot fit."""
        _at_most(self.min_duration_s, MAX_DURATION_S, "--min-duration", "seconds of load")
        if self.latency_bound_ms is not None:
            _at_most(self.latency_bound_ms, MAX_DURATION_S * 1e3, "--latency-bound", "ms")
        _at_most(self.threads, MAX_THREADS, "--threads", "threads of the system under test")
        _at_most(self.seed, _MAX_SEED, "--seed", "LoadGen's seeds are 64-bit")
        samples, how = self.issued_estimate()
        if samples > MAX_SAMPLES_ISSUED:
            raise UsageError(
                f"{how} ask for {samples:.3g} samples, more than d5 issues in one run "
                f"({MAX_SAMPLES_ISSUED:.0e}); lower them"
            )
        need = samples * LOADGEN_BYTES_PER_SAMPLE
        free = available_memory()
        if need > free:
            raise UsageError(
                f"{how} ask for {samples:.3g} samples, for which LoadGen would need about "
                f"{format_bytes(need)} ({LOADGEN_BYTES_PER_SAMPLE} B "
                f"each) where {format_bytes(free)} is available; lower them"
            )

    def issued_estimate(self) -> tuple[float, str]:
        """The samples LoadGen issues at least, as far as the settings alone tell, and the
        settings that tell it (for a message): the minimum query count (times the samples
        per query in multi-stream), or the server's target QPS or offline's expected QPS
        times the minimum duration. A rate derived from the warm-up is not known here."""
        queries = float(self.min_query_count)
        how = f"--min-query-count {self.min_query_count}"
        rate = self.target_qps if self.scenario == "server" else None
        if self.scenario == "offline":
            rate = self.expected_qps
        if rate is not None and rate * self.min_duration_s > queries:
            flag = "--target-qps" if self.scenario == "server" else "--expected-qps"
            queries = rate * self.min_duration_s
            how = f"{flag} {rate:g} for --min-duration {self.min_duration_s:g} s"
        if self.scenario == "multi-stream":
            how += f" of --samples-per-query {self.query_size}"
            return queries * self.query_size, how
        return queries, how

    @property
    def sample_count(self) -> int:
        """Samples in the query sample library."""
        return self.performance_sample_count or DEFAULT_SAMPLE_COUNT

    @property
    def query_size(self) -> int:
        """Samples in one query: samples per query in multi-stream, 1 in single-stream
        and server (offline issues one query of every sample it runs)."""
        if self.scenario == "multi-stream":
            return self.samples_per_query or DEFAULT_SAMPLES_PER_QUERY
        return 1

    def with_values(self, **changes: Any) -> ScenarioSettings:
        """A copy with ``changes`` applied (checked)."""
        return replace(self, **changes).check()

    def to_json(self) -> dict[str, Any]:
        """Every field, JSON-ready."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScenarioSettings:
        """The settings :meth:`to_json` wrote (unknown keys are refused).

        :raises UsageError: for an unknown key or a missing scenario.
        """
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise UsageError(
                f"unknown scenario setting {unknown[0]!r}; known: {', '.join(sorted(known))}"
            )
        if "scenario" not in data:
            raise UsageError("scenario settings need a 'scenario'")
        return cls(**dict(data))


def default_threads() -> int:
    """The threads of the system under test when none are asked for: one per core this
    process may use, less one left to LoadGen's issuing and logging threads and to the
    thread that completes queries (at least one). On a 2-core machine with both cores
    given to the framework, its pool fought LoadGen's threads: onnxruntime's offline
    rate fell to a fifth of its warm-up rate, and mxnet's multi-stream p99 went from
    under 1 ms to 276 ms (INVALID)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    return max(1, cores - 1)


def thread_environment(threads: int | None) -> dict[str, str]:
    """The variables that size the system under test's thread pools: OpenMP, OpenBLAS,
    MKL (and numexpr) threads, ``threads`` each (:func:`default_threads` when ``None``).
    The framework plugins size their own pools by ``OMP_NUM_THREADS``."""
    if threads is None:
        threads = default_threads()
    value = str(threads)
    return {
        "OMP_NUM_THREADS": value,
        "OPENBLAS_NUM_THREADS": value,
        "MKL_NUM_THREADS": value,
        "NUMEXPR_NUM_THREADS": value,
    }
