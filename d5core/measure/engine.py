"""The measurement engine: warm up, choose single or blocked timing, sample until sure.

One :func:`measure` call times a callable the way ``docs/measurement.md`` describes:

1. warm-up calls, excluded from the samples and counted; the first of them is timed on
   its own (``first_call_s``: a framework's compile on first call);
2. calibration: a call long against the clock (``single_event_factor`` × resolution plus
   overhead) is timed on its own; a shorter one is timed in blocks grown until the cost
   of reading the clock is at most ``block_overhead_ratio`` of a block;
3. sampling until the confidence interval of the median lies within ``±rel_ci`` of the
   median, bounded by ``min_samples``, ``max_samples`` and ``time_budget_s``.

Every sample taken is reported; nothing is retried or dropped.
"""

from __future__ import annotations

import gc
import math
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from itertools import repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from d5core.allocator import apply_allocator_policy, page_faults
from d5core.bus import MEASURE_SAMPLE, MetricBus, get_bus
from d5core.measure.clock import Clock, default_clock
from d5core.measure.stats import Summary, normal_quantile, ranks_for_z, summarize

if TYPE_CHECKING:
    from d5core.measure.audit import OutputSample
    from d5core.plugins.manager import PluginManager

__all__ = [
    "MIN_SAMPLES",
    "MeasureOptions",
    "Measurement",
    "flush_cpu_caches",
    "measure",
    "synchronizer_for",
    "synchronizer_of",
    "timed_call",
]

#: No interval of the median reaches 95% with fewer samples.
MIN_SAMPLES = 6
#: The largest block the calibration grows to (a callable that does nothing at all).
_MAX_BLOCK = 10**8
#: Single calls timed to decide between single-event and blocked timing.
_PROBES = 3
_T = TypeVar("_T")


#: The most calls (warm-up or samples) and seconds one measurement may ask for: beyond
#: them an option is a mistake that would run for days, not a measurement.
MAX_CALLS = 10_000_000
MAX_SECONDS = 86_400.0


@dataclass
class MeasureOptions:
    """How :func:`measure` samples; every field is stored with the measurement.

    :param warmup: calls made and discarded before anything is timed.
    :param warmup_time_s: keep warming up at least this long (on top of ``warmup``).
    :param min_samples: samples always taken (at least 6, whatever the time budget).
    :param max_samples: samples never exceeded.
    :param rel_ci: stop once the CI of the median lies within ± this fraction of it.
    :param confidence: the level of that CI.
    :param time_budget_s: stop sampling once this much time has passed since the start
        (warm-up and calibration included), provided ``min_samples`` were taken.
    :param device: where the callable runs; other than ``"cpu"``, the plugins'
        ``d5_synchronize`` hook is called before every clock read.
    :param cold_cache: time every call on its own after evicting the CPU caches (by
        writing a buffer twice the size of the last-level cache); ``False`` measures
        warm caches.
    :param block_overhead_ratio: blocks grow until the clock's cost is at most this
        fraction of a block.
    :param single_event_factor: a call at least this many times the clock's resolution
        plus overhead is timed on its own.
    :param disable_gc: switch Python's cyclic garbage collector off while timing, as
        :mod:`timeit` does, so that collections triggered by other code do not land
        in the samples.
    """

    warmup: int = 3
    warmup_time_s: float = 0.0
    min_samples: int = 10
    max_samples: int = 1000
    rel_ci: float = 0.01
    confidence: float = 0.95
    time_budget_s: float = 5.0
    device: str = "cpu"
    cold_cache: bool = False
    block_overhead_ratio: float = 1e-4
    single_event_factor: float = 1000.0
    disable_gc: bool = True

    def __post_init__(self) -> None:
        problems = []
        if not (0 <= self.warmup <= MAX_CALLS and 0 <= self.warmup_time_s <= MAX_SECONDS):
            problems.append(f"warmup must be 0..{MAX_CALLS} calls and 0..{MAX_SECONDS:g} s")
        if self.max_samples > MAX_CALLS:
            problems.append(f"max_samples must be at most {MAX_CALLS}, got {self.max_samples}")
        if not self.time_budget_s >= 0:
            problems.append(f"time_budget_s must be >= 0, got {self.time_budget_s}")
        if self.min_samples < MIN_SAMPLES:
            problems.append(
                f"min_samples must be at least {MIN_SAMPLES} (no 95% interval of the median "
                f"exists with fewer), got {self.min_samples}"
            )
        if self.max_samples < self.min_samples:
            problems.append(
                f"max_samples ({self.max_samples}) is below min_samples ({self.min_samples})"
            )
        if not self.rel_ci >= 0:
            problems.append(f"rel_ci must be >= 0, got {self.rel_ci}")
        if not 0 < self.confidence < 1:
            problems.append(f"confidence must be between 0 and 1, got {self.confidence}")
        if not self.block_overhead_ratio > 0 or not self.single_event_factor > 0:
            problems.append("block_overhead_ratio and single_event_factor must be positive")
        if problems:
            raise ValueError("; ".join(problems))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary of every option."""
        return asdict(self)


@dataclass
class Measurement:
    """The outcome of :func:`measure`: every sample, its summary, and how it was taken.

    ``samples`` are seconds per call in the order taken (a block's time divided by
    ``block_size``). ``warmup_runs`` and ``calibration_runs`` count the calls that were
    made but not sampled. ``stopped_by`` is ``"ci"``, ``"max_samples"`` or
    ``"time_budget"``.
    """

    name: str
    samples: list[float]
    summary: Summary
    warmup_runs: int
    blocked: bool
    block_size: int
    stopped_by: str
    timer_resolution_ns: float
    timer_overhead_ns: float
    options: MeasureOptions
    calibration_runs: int = 0
    synchronized: bool = False
    synchronize_overhead_ns: float = 0.0
    elapsed_s: float = 0.0
    #: Page faults (minor and major, every thread of the process) per timed call:
    #: memory the calls took fresh from the kernel. ``None`` where not counted.
    page_faults_per_call: float | None = None
    #: What the measured code said about itself (an operator's
    #: :meth:`~d5core.levels.operators.Operator.details`, such as its timed layout).
    details: dict[str, Any] = field(default_factory=dict)
    #: Seconds of the first warm-up call, synchronised on its own: a framework's
    #: compile-on-first-call and lazy set-up. Never a sample; ``None`` without warm-up.
    first_call_s: float | None = None

    @property
    def prepare_s(self) -> float | None:
        """Seconds the callable took to prepare (``details["prepare_s"]``, said by the
        job that built it: :func:`timed_call`); never a sample."""
        return _seconds(self.details.get("prepare_s"))

    @property
    def compile_s(self) -> float | None:
        """Seconds the measured code says it spent compiling (``details["compile_s"]``,
        from an operator's ``details()``), where it says so."""
        return _seconds(self.details.get("compile_s"))

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dictionary: raw samples, summary, options and timing method."""
        out = {f: getattr(self, f) for f in self.__dataclass_fields__}
        out["summary"] = self.summary.to_json()
        out["options"] = self.options.to_json()
        out["samples"] = list(self.samples)
        return out


def _seconds(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def timed_call(
    make: Callable[[], _T],
    synchronize: Callable[[], None] | None = None,
    clock: Clock | None = None,
) -> tuple[_T, float]:
    """Call ``make()`` once, synchronised before and after, and return what it returned
    and the seconds it took: how long preparing a callable to time takes (its compile
    ahead of time), which the job stores as ``details["prepare_s"]``."""
    read = (clock if clock is not None else default_clock()).read
    if synchronize is not None:
        synchronize()
    t0 = read()
    made = make()
    if synchronize is not None:
        synchronize()
    return made, (read() - t0) / 1e9


def _is_cpu(device: str) -> bool:
    return device == "cpu" or device.startswith("cpu:")


def synchronizer_for(
    device: str, manager: PluginManager | None = None, *, asynchronous: bool = False
) -> Callable[[], None] | None:
    """A function that waits for ``device`` through the plugins' ``d5_synchronize`` hook.

    ``None`` for the CPU, where calls are synchronous, unless ``asynchronous`` says the
    framework queues work on the CPU too (MXNet's engine returns before its operators
    have run). The hook's caller is looked up once; each call is one pluggy hook call (so
    wrappers and tracing see it). An implementation that raises makes the measurement
    fail: a timing without synchronisation is wrong (the hook is marked ``propagates``).

    :param manager: the plugin manager; the process-wide one by default.
    """
    if _is_cpu(device) and not asynchronous:
        return None
    if manager is None:
        from d5core.plugins.manager import get_plugin_manager

        manager = get_plugin_manager()
    hook = manager.hook.d5_synchronize
    if not hook.get_hookimpls():
        warnings.warn(
            f"no plugin implements d5_synchronize: timings on {device!r} may miss work "
            f"still queued on the device",
            RuntimeWarning,
            stacklevel=2,
        )

    def synchronize() -> None:
        hook(device=device)

    return synchronize


def synchronizer_of(runner: Any, manager: PluginManager | None = None) -> Callable[[], None] | None:
    """:func:`synchronizer_for` an operator or a graph executor: its ``device``, and its
    ``asynchronous`` flag (``False`` when it has none)."""
    return synchronizer_for(
        str(getattr(runner, "device", "cpu")),
        manager,
        asynchronous=bool(getattr(runner, "asynchronous", False)),
    )


def _last_level_cache_bytes() -> int:
    best = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            size = (index / "size").read_text().strip()
        except OSError:
            continue
        unit = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1:], 1)
        digits = size.rstrip("KMG")
        if digits.isdigit():
            best = max(best, int(digits) * unit)
    return best or 64 << 20


def flush_cpu_caches(buffer: np.ndarray[Any, Any] | None = None) -> np.ndarray[Any, Any]:
    """Evict the CPU caches by writing a buffer twice the last-level cache size.

    :return: the buffer used, to pass again and save allocating it.
    """
    if buffer is None:
        buffer = np.zeros(2 * _last_level_cache_bytes() // 8, dtype=np.int64)
    buffer += 1
    return buffer


def _sync_overhead(synchronize: Callable[[], None], read: Callable[[], int]) -> float:
    per_call = []
    for _ in range(5):
        t0 = read()
        for _ in range(10):
            synchronize()
        per_call.append((read() - t0) / 10)
    return float(np.median(per_call))


def _time_block(
    fn: Callable[[], object],
    block: int,
    read: Callable[[], int],
    synchronize: Callable[[], None] | None,
) -> int:
    loop = repeat(None, block)
    if synchronize is not None:
        synchronize()
    t0 = read()
    for _ in loop:
        fn()
    if synchronize is not None:
        synchronize()
    return read() - t0


def _calibrate(
    fn: Callable[[], object],
    read: Callable[[], int],
    synchronize: Callable[[], None] | None,
    cost_ns: float,
    opts: MeasureOptions,
    deadline: int,
) -> tuple[int, int]:
    """Choose the block size; return it and the calls it took."""
    calls, single = 0, math.inf
    while calls < _PROBES:  # the fastest of a few single calls: robust to interrupts
        single = min(single, _time_block(fn, 1, read, synchronize))
        calls += 1
        if single >= opts.single_event_factor * cost_ns or read() >= deadline:
            break
    if opts.cold_cache or single >= opts.single_event_factor * cost_ns:
        return 1, calls
    target = cost_ns / opts.block_overhead_ratio
    block, taken = 1, float(single)
    while block < _MAX_BLOCK:
        # Aim 20% past the target; grow at most tenfold per step (the first timings are
        # dominated by the clock itself) and at least twofold.
        grow = min(max(1.2 * target / max(taken, 1.0), 2.0), 10.0)
        block = min(math.ceil(block * grow), _MAX_BLOCK)
        taken = _time_block(fn, block, read, synchronize)
        calls += block
        if taken >= target:  # confirm: an interrupt must not pass for a long block
            taken = min(taken, _time_block(fn, block, read, synchronize))
            calls += block
            if taken >= target:
                break
    return block, calls


def _before_each_sample(
    setup: Callable[[], object] | None, cold_cache: bool
) -> Callable[[], object] | None:
    """What runs before each sample, outside the timed region: cache eviction, setup."""
    if not cold_cache:
        return setup
    buffer = flush_cpu_caches()

    def before() -> None:
        flush_cpu_caches(buffer)
        if setup is not None:
            setup()

    return before


def _ci_within(raw: list[int], z: float, rel: float) -> bool:
    """Whether the Le Boudec interval of the median of ``raw`` is within ±rel of it."""
    ordered = sorted(raw)
    n = len(ordered)
    lo, hi = ranks_for_z(n, z)
    median = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2.0
    limit = rel * median
    return median - ordered[lo - 1] <= limit and ordered[hi - 1] - median <= limit


def measure(
    fn: Callable[[], object],
    options: MeasureOptions | None = None,
    *,
    name: str = "",
    synchronize: Callable[[], None] | None = None,
    bus: MetricBus | None = None,
    clock: Clock | None = None,
    setup: Callable[[], object] | None = None,
    keep: OutputSample | None = None,
) -> Measurement:
    """Time ``fn()`` and summarise the time per call; see the module docstring.

    :param fn: the code to time; prepare its inputs beforehand (conversions and
        allocations belong outside the timed region).
    :param options: how to sample; :class:`MeasureOptions` defaults otherwise.
    :param name: stored with the measurement and in the events.
    :param synchronize: called before each clock read; by default the plugins'
        ``d5_synchronize`` for a device other than the CPU.
    :param bus: where a :data:`~d5core.bus.MEASURE_SAMPLE` event is published after each
        sample when anybody listens (outside the timed region); the process-wide bus
        by default.
    :param clock: the clock to read; :func:`~d5core.measure.clock.default_clock` by
        default (tests pass a simulated one).
    :param setup: called before each sample, outside the timed region (with blocks,
        once per block).
    :param keep: the samples (``keep.positions``) whose last call's return value is
        kept in ``keep.outputs``, to check after timing
        (:attr:`d5core.measure.invocations.PreparedJob.check`). Keeping costs one reference,
        taken inside the timed region of those samples only; nothing is copied.
    """
    opts = options if options is not None else MeasureOptions()
    apply_allocator_policy()  # once per process; the policy is recorded with the run
    clk = clock if clock is not None else default_clock()
    bus = bus if bus is not None else get_bus()
    if synchronize is None and not _is_cpu(opts.device):
        synchronize = synchronizer_for(opts.device)
    read = clk.read
    start = read()
    budget_ns = opts.time_budget_s * 1e9
    deadline = start + (int(budget_ns) if math.isfinite(budget_ns) else 10**30)
    z = normal_quantile(opts.confidence)
    gc_was_enabled = gc.isenabled()
    if opts.disable_gc:
        gc.disable()
    try:
        warm_until = start + int(opts.warmup_time_s * 1e9)
        warm, first_ns = 0, None
        if opts.warmup or opts.warmup_time_s > 0:  # the first call, timed on its own
            if synchronize is not None:
                synchronize()
            t0 = read()
            fn()
            if synchronize is not None:
                synchronize()
            first_ns, warm = read() - t0, 1
        while warm < opts.warmup or (opts.warmup_time_s > 0 and read() < warm_until):
            fn()
            warm += 1
        sync_ns = 0.0
        if synchronize is not None:
            synchronize()
            sync_ns = _sync_overhead(synchronize, read)
        cost_ns = clk.cost_ns + sync_ns
        block, calibration = _calibrate(fn, read, synchronize, cost_ns, opts, deadline)

        before = _before_each_sample(setup, opts.cold_cache)
        # Page faults are counted around each timed block where something runs between
        # samples (setup, cache eviction), else once around the whole sampling: a
        # getrusage call just before the clock read costs the next call about 1 µs.
        faults_start = page_faults()
        counting_faults = faults_start >= 0
        per_block = counting_faults and before is not None
        faults = 0
        raw: list[int] = []
        append = raw.append
        publishing = bus.wants(MEASURE_SAMPLE)
        keeping = keep.positions if keep is not None else frozenset()
        keep_out = keep.outputs if keep is not None else None
        min_n, max_n, rel = opts.min_samples, opts.max_samples, opts.rel_ci
        next_check = min_n
        stopped_by = "max_samples"
        while True:
            if before is not None:
                before()
            loop = repeat(None, block)  # iterates without making int objects, as timeit
            if synchronize is not None:
                synchronize()
            if per_block:
                f0 = page_faults()
            if keeping and len(raw) in keeping:
                # A sampled call: the block's last call keeps its return value.
                loop = repeat(None, block - 1)
                t0 = read()
                for _ in loop:
                    fn()
                kept = fn()
                if synchronize is not None:
                    synchronize()
                t1 = read()
                keep_out.append(kept)  # type: ignore[union-attr]
                del kept
            else:
                t0 = read()
                for _ in loop:
                    fn()
                if synchronize is not None:
                    synchronize()
                t1 = read()
            if per_block:
                faults += page_faults() - f0
            append(t1 - t0)
            n = len(raw)
            if publishing:
                bus.publish(
                    MEASURE_SAMPLE, name=name, index=n - 1, duration_ns=t1 - t0, block_size=block
                )
            if n >= next_check or n >= max_n:
                if _ci_within(raw, z, rel):
                    stopped_by = "ci"
                    break
                if n >= max_n:
                    break
                next_check = n + max(1, n // 10)
            if t1 >= deadline and n >= min_n:
                stopped_by = "time_budget"
                break
        end = read()
        if counting_faults and not per_block:
            faults = page_faults() - faults_start
    finally:
        if opts.disable_gc and gc_was_enabled:
            gc.enable()

    samples = [t / block / 1e9 for t in raw]
    counted = len(raw) * block
    return Measurement(
        name=name,
        samples=samples,
        summary=summarize(samples, opts.confidence),
        warmup_runs=warm,
        blocked=block > 1,
        block_size=block,
        stopped_by=stopped_by,
        timer_resolution_ns=clk.resolution_ns,
        timer_overhead_ns=clk.overhead_ns,
        options=opts,
        calibration_runs=calibration,
        synchronized=synchronize is not None,
        synchronize_overhead_ns=sync_ns,
        elapsed_s=(end - start) / 1e9,
        page_faults_per_call=faults / counted if counted and counting_faults else None,
        first_call_s=None if first_ns is None else first_ns / 1e9,
    )
