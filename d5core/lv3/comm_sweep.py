"""``d5 bench comm``: a collective's time against message size, d5's call against the
communication library's own, on several rank counts.

Two halves, like ``d5 run --ranks N`` (:mod:`d5core.lv3.launch`):

- the **parent** (:func:`launch_sweep`) starts the ranks once per rank count with the
  launcher a communication plugin offers, and reads back what rank 0 wrote;
- each **rank** (:func:`rank_sweep`) times, for every message size, d5's collective and
  the library's (:meth:`~d5core.levels.distributed.Communicator.raw_collective`)
  interleaved sample by sample, alternating which goes first. Before each sample the
  ranks meet at a barrier; a sample's time is the maximum over the ranks (one
  element-wise ``max`` allreduce per size, after its samples).

The point-to-point sweep (``pingpong``) is timed the same way, except that only ranks
0 and 1 exchange messages (the others meet the barrier and wait): rank 0 sends the
buffer to rank 1, which sends it back, and a sample is half of rank 0's round trip (the
one-way time). Its bytes are the message's, exactly what the communicator counts for a
send (checked on both ranks), and its bandwidth is that over the one-way time. Two more
series, per size, feed the cost models: the **exchange**, ranks 0 and 1 sending the
buffer to each other at once (``neighbor_exchange``; a sample is the slower rank's time),
as the rounds of a collective do, and the **reduction**, rank 0 adding two buffers of
the size in place, the arithmetic an allreduce adds to its messages: with the library's
own reduction kernel where the communicator offers it (``raw_collective("reduce_local")``,
MPI's ``MPI_Reduce_local``), else numpy's add. The stored
run also holds the fit of ``t(m) = L + G*m`` and of the two series' time per byte
(:mod:`d5core.lv3.comm_fit`).

Bandwidths follow nccl-tests (``docs/distributed.md``): the algorithm bandwidth is the
collective's data size (:func:`data_bytes`) over the median time, and the bus bandwidth
is that times :func:`bus_factor`.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from d5core.errors import EXIT_FAILED, CheckFailed, D5Error, UsageError

__all__ = [
    "BUS_FACTORS",
    "COLLECTIVES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MIN_BYTES",
    "DEFAULT_RANKS",
    "DTYPE",
    "PINGPONG",
    "PINGPONG_MAX_BYTES",
    "PINGPONG_MIN_BYTES",
    "PINGPONG_SYNCHRONISATION",
    "SWEEPS",
    "SYNCHRONISATION",
    "SweepSettings",
    "bandwidths",
    "bus_factor",
    "check_communicator",
    "check_sweep",
    "data_bytes",
    "default_communicator",
    "default_sizes",
    "launch_sweep",
    "message_sizes",
    "parse_ranks",
    "rank_sweep",
    "run_rank",
    "samples_for",
    "store_sweep",
    "sweep_rows",
    "synchronisation",
]

#: The collectives ``d5 bench comm`` can time.
COLLECTIVES: tuple[str, ...] = ("allreduce", "broadcast", "allgather")
#: The point-to-point sweep: messages between ranks 0 and 1, there and back.
PINGPONG = "pingpong"
#: Everything ``--collective`` takes: the collectives and the ping-pong.
SWEEPS: tuple[str, ...] = (*COLLECTIVES, PINGPONG)
#: Rank counts swept when ``--ranks`` is not given.
DEFAULT_RANKS: tuple[int, ...] = (2, 4)
#: The smallest and largest message by default (1 KiB to 4 MiB: seconds on 2 cores).
DEFAULT_MIN_BYTES = 1 << 10
DEFAULT_MAX_BYTES = 4 << 20
#: The ping-pong's smallest and largest message by default, 8 B to 64 MiB: from where
#: the latency dominates to where the bandwidth does.
PINGPONG_MIN_BYTES = 8
PINGPONG_MAX_BYTES = 64 << 20
#: The element type of the buffers.
DTYPE = "float32"
#: How the ranks are synchronised and how their times are summarised (stored with the run).
SYNCHRONISATION = (
    "barrier before each sample; a sample is the maximum over the ranks; d5 and the "
    "library's own call interleaved, alternating which goes first; median over samples"
)
#: How the ping-pong's ranks are synchronised and its times summarised.
PINGPONG_SYNCHRONISATION = (
    "barrier before each sample; rank 0 sends to rank 1, which sends it back; a sample is "
    "half of rank 0's round trip; d5 and the library's own calls interleaved, alternating "
    "which goes first; median over samples"
)
#: Untimed rounds before the samples of each size.
_WARMUP = 2
#: The tag of the ping-pong's messages.
_PINGPONG_TAG = 0x9D5
_clock = time.perf_counter_ns


def bus_factor(op: str, size: int) -> float:
    """nccl-tests' bus-bandwidth factor of collective ``op`` on ``size`` ranks.

    ``allreduce`` 2(n-1)/n; ``reduce_scatter``, ``allgather``, ``alltoall`` (n-1)/n;
    ``broadcast``, ``reduce`` (and anything else) 1.
    """
    n = size
    if op == "allreduce":
        return 2 * (n - 1) / n
    if op in ("reduce_scatter", "allgather", "alltoall"):
        return (n - 1) / n
    return 1.0


#: The factors of :func:`bus_factor`, as expressions of ``n``, for documentation.
BUS_FACTORS: dict[str, str] = {
    "allreduce": "2(n-1)/n",
    "reduce_scatter": "(n-1)/n",
    "allgather": "(n-1)/n",
    "alltoall": "(n-1)/n",
    "broadcast": "1",
    "reduce": "1",
}


@dataclass(frozen=True)
class SweepSettings:
    """What one sweep measures: the collective, the message sizes in bytes (each rank's
    buffer) and the samples per size (``None``: :func:`samples_for` decides)."""

    collective: str
    sizes: tuple[int, ...]
    samples: int | None = None

    def samples_of(self, nbytes: int) -> int:
        """The number of samples taken at ``nbytes``."""
        return self.samples if self.samples is not None else samples_for(nbytes)

    def to_json(self) -> dict[str, Any]:
        return {"collective": self.collective, "sizes": list(self.sizes), "samples": self.samples}


def parse_ranks(text: str) -> list[int]:
    """``"2,4"`` to ``[2, 4]`` (sorted, each once).

    :raises UsageError: for a count that is not an integer or is below 2.
    """
    found: list[int] = []
    for item in text.split(","):
        item = item.strip()
        try:
            n = int(item)
        except ValueError:
            raise UsageError(
                f"--ranks takes comma-separated integers such as 2,4, not {item!r}"
            ) from None
        if n < 2:
            raise UsageError(f"--ranks {n}: a collective needs at least 2 ranks")
        if n not in found:
            found.append(n)
    return sorted(found)


def message_sizes(min_bytes: int, max_bytes: int, factor: int = 4) -> list[int]:
    """``min_bytes``, then ``factor`` times larger each step up to ``max_bytes`` (always
    included).

    :raises UsageError: for a size that is not a positive multiple of 4 bytes (one
        float32), or ``min_bytes > max_bytes``.
    """
    item = np.dtype(DTYPE).itemsize
    for option, value in (("--min-bytes", min_bytes), ("--max-bytes", max_bytes)):
        if value <= 0 or value % item:
            raise UsageError(
                f"{option} {value}: give a positive multiple of {item} bytes ({DTYPE} elements)"
            )
    if min_bytes > max_bytes:
        raise UsageError(f"--min-bytes {min_bytes} is larger than --max-bytes {max_bytes}")
    sizes = [min_bytes]
    while sizes[-1] * factor <= max_bytes:
        sizes.append(sizes[-1] * factor)
    if sizes[-1] != max_bytes:
        sizes.append(max_bytes)
    return sizes


def default_sizes(collective: str) -> tuple[int, int, int]:
    """``(min_bytes, max_bytes, factor)`` swept by default for ``collective``: the
    collectives 1 KiB to 4 MiB, 4 times larger each step; the ping-pong 8 B to 64 MiB,
    twice as large each step (enough sizes to see where the protocol changes)."""
    if collective == PINGPONG:
        return PINGPONG_MIN_BYTES, PINGPONG_MAX_BYTES, 2
    return DEFAULT_MIN_BYTES, DEFAULT_MAX_BYTES, 4


def synchronisation(collective: str) -> str:
    """How the ranks of a sweep of ``collective`` are synchronised and summarised."""
    return PINGPONG_SYNCHRONISATION if collective == PINGPONG else SYNCHRONISATION


def check_sweep(collective: str) -> str:
    """``collective`` if ``d5 bench comm`` can time it (one of :data:`SWEEPS`).

    :raises UsageError: naming the ones it can.
    """
    if collective not in SWEEPS:
        raise UsageError(f"unknown collective {collective!r}; choose one of {', '.join(SWEEPS)}")
    return collective


def samples_for(nbytes: int) -> int:
    """Samples per implementation at ``nbytes``: fewer for large messages."""
    if nbytes <= 1 << 20:
        return 100
    if nbytes <= 4 << 20:
        return 40
    if nbytes <= 16 << 20:
        return 20
    return 12


def data_bytes(collective: str, nbytes: int, ranks: int) -> int:
    """The data size nccl-tests divides by the time: each rank's buffer (``nbytes``),
    except for ``allgather``, whose size is the gathered result (``ranks * nbytes``)."""
    return nbytes * ranks if collective == "allgather" else nbytes


def bandwidths(collective: str, nbytes: int, ranks: int, seconds: float) -> tuple[float, float]:
    """``(algbw, busbw)`` in GB/s (10^9 bytes per second) of one collective call of
    ``seconds`` on buffers of ``nbytes`` on ``ranks`` ranks."""
    algbw = data_bytes(collective, nbytes, ranks) / seconds / 1e9
    return algbw, algbw * bus_factor(collective, ranks)


# -- a rank --------------------------------------------------------------------------


def _d5_call(comm: Any, collective: str) -> Callable[[np.ndarray], Any]:
    """d5's call for ``collective`` on communicator ``comm``."""
    if collective == "allreduce":
        return lambda buf: comm.allreduce_inplace(buf)
    if collective == "broadcast":
        return lambda buf: comm.broadcast(buf, 0)
    if collective == "allgather":
        return lambda buf: comm.allgather(buf)
    raise UsageError(f"unknown collective {collective!r}; choose one of {', '.join(COLLECTIVES)}")


def _d5_pingpong(comm: Any) -> Callable[[np.ndarray], Any]:
    """A round trip of d5's point-to-point calls: rank 0 sends the buffer to rank 1,
    which sends what it received back; other ranks do nothing."""
    rank = comm.rank

    def round_trip(buf: np.ndarray) -> None:
        if rank == 0:
            comm.send(buf, 1, _PINGPONG_TAG)
            comm.recv_from(buf.shape, buf.dtype, 1, _PINGPONG_TAG)
        elif rank == 1:
            got, _ = comm.recv_from(buf.shape, buf.dtype, 0, _PINGPONG_TAG)
            comm.send(got, 0, _PINGPONG_TAG)

    return round_trip


def _sample(
    comm: Any,
    calls: Sequence[tuple[str, Callable[[np.ndarray], Any]]],
    nbytes: int,
    count: int,
    progress: Callable[[], None],
) -> dict[str, np.ndarray]:
    """``count`` samples of each call on a buffer of ``nbytes``: this rank's seconds."""
    buf = np.ones(nbytes // np.dtype(DTYPE).itemsize, dtype=DTYPE)
    local = {name: np.zeros(count, dtype=np.float64) for name, _ in calls}
    for i in range(_WARMUP + count):
        order = list(calls) if i % 2 == 0 else list(reversed(calls))
        for name, fn in order:
            buf.fill(1.0)
            comm.barrier()
            t0 = _clock()
            fn(buf)
            dt = _clock() - t0
            if i >= _WARMUP:
                local[name][i - _WARMUP] = dt / 1e9
        progress()
    return local


def _combine(comm: Any, local: Mapping[str, np.ndarray], one_way: bool) -> dict[str, list[float]]:
    """Every rank's samples from each rank's own (``local``): the maximum over the
    ranks, or with ``one_way`` half of rank 0's (a round trip)."""
    if one_way:
        return {
            name: [float(v) / 2 for v in np.asarray(comm.broadcast(times, 0))]
            for name, times in local.items()
        }
    return {
        name: [float(v) for v in np.asarray(comm.allreduce(times, "max"))]
        for name, times in local.items()
    }


def _check_counted(comm: Any, before: Mapping[str, Any], nbytes: int, messages: int) -> None:
    """On ranks 0 and 1 of a ping-pong, d5's counters grew by exactly ``messages`` of
    ``nbytes`` sent and as many received.

    :raises CheckFailed: naming the rank and the counts when they did not.
    """
    if comm.rank > 1:
        return
    after = comm.counters()
    want = messages * nbytes
    for key in ("bytes_sent", "bytes_received"):
        got = int(after[key]) - int(before[key])
        if got != want:
            raise CheckFailed(
                f"rank {comm.rank}: the communicator counted {got} {key.replace('_', ' ')} "
                f"for {messages} messages of {nbytes} bytes ({want} expected); its point-to-"
                "point counts must be the bytes that moved"
            )


def _exchange_samples(
    comm: Any, nbytes: int, count: int, progress: Callable[[], None]
) -> list[float]:
    """``count`` samples of ranks 0 and 1 sending a buffer of ``nbytes`` to each other at
    once (d5's ``neighbor_exchange``); a sample is the slower rank's seconds. Other
    ranks meet the barriers only."""
    rank = comm.rank
    buf = np.ones(nbytes // np.dtype(DTYPE).itemsize, dtype=DTYPE)
    local = np.zeros(count, dtype=np.float64)
    for i in range(_WARMUP + count):
        comm.barrier()
        t0 = _clock()
        if rank < 2:
            comm.neighbor_exchange(buf, [1 - rank])
        dt = _clock() - t0
        if i >= _WARMUP:
            local[i - _WARMUP] = dt / 1e9 if rank < 2 else 0.0
        progress()
    return [float(v) for v in np.asarray(comm.allreduce(local, "max"))]


def _reduce_samples(comm: Any, nbytes: int, count: int) -> list[float]:
    """``count`` samples of adding a buffer of ``nbytes`` into another in place, on rank
    0: the arithmetic of a reduction, without messages. The library's own kernel when the
    communicator offers one (``raw_collective("reduce_local")``: an allreduce adds with
    it, not with numpy), else numpy's add. Empty on other ranks (rank 0's result is the
    one kept)."""
    if comm.rank != 0:
        return []
    n = nbytes // np.dtype(DTYPE).itemsize
    into, other = np.ones(n, dtype=DTYPE), np.ones(n, dtype=DTYPE)
    raw_of = getattr(comm, "raw_collective", None)
    kernel = raw_of("reduce_local") if callable(raw_of) else None
    if kernel is None:
        def add(a: np.ndarray) -> None:
            np.add(into, a, out=into)
    else:
        add = kernel
    out = []
    for i in range(_WARMUP + count):
        t0 = _clock()
        add(other)
        dt = _clock() - t0
        if i >= _WARMUP:
            out.append(max(dt, 1) / 1e9)  # a clock that did not move: one nanosecond
    return out


def rank_sweep(
    comm: Any, settings: SweepSettings, progress: Callable[[], None] = lambda: None
) -> dict[str, Any]:
    """Time ``settings`` on this rank's communicator ``comm`` (every rank calls this).

    :param progress: called after every round (a heartbeat for the parent's watchdog).
    :return: on every rank, ``{"ranks", "communicator", "raw", "sizes": [{"bytes",
        "samples": {"d5": [...], "raw": [...]}}]}``; ``"raw"`` is whether the library's
        own call was timed (only ``"d5"`` samples when not). A ping-pong's sizes also
        hold ``"exchange"`` (seconds, every rank) and ``"reduce"`` (seconds, rank 0's;
        empty on other ranks).
    :raises CheckFailed: for a ping-pong whose bytes the communicator counted wrong.
    """
    collective = settings.collective
    pingpong = collective == PINGPONG
    d5_call = _d5_pingpong(comm) if pingpong else _d5_call(comm, collective)
    calls: list[tuple[str, Callable[[np.ndarray], Any]]] = [("d5", d5_call)]
    raw_of = getattr(comm, "raw_collective", None)
    raw = raw_of(collective) if callable(raw_of) else None
    if raw is not None:
        calls.append(("raw", raw))
    sizes = []
    for nbytes in settings.sizes:
        count = settings.samples_of(nbytes)
        before = comm.counters()
        local = _sample(comm, calls, nbytes, count, progress)
        if pingpong:  # before anything else moves bytes
            _check_counted(comm, before, nbytes, _WARMUP + count)
        entry: dict[str, Any] = {"bytes": nbytes, "samples": _combine(comm, local, pingpong)}
        if pingpong:
            entry["exchange"] = _exchange_samples(comm, nbytes, count, progress)
            entry["reduce"] = _reduce_samples(comm, nbytes, count)
        sizes.append(entry)
    return {
        "ranks": int(comm.size),
        "communicator": str(getattr(comm, "name", "") or type(comm).__name__),
        "raw": raw is not None,
        "sizes": sizes,
    }


def _write_json(path: Path, data: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data))
    tmp.replace(path)


def run_rank(ctx: Any, settings: SweepSettings, out: Path | None) -> dict[str, Any] | None:
    """One rank of a sweep, in place under a launcher; rank 0 writes the result to
    ``out`` (when given) and returns it; other ranks return ``None``.

    ``ctx`` is the rank's :class:`~d5core.lv3.launch.RankContext`: its
    heartbeat and exit status let the parent watch the job.
    """
    ctx.start()
    code, error = 0, None
    try:
        result = rank_sweep(ctx.communicator(), settings, ctx.mark_progress)
        if ctx.rank != 0:
            return None
        if out is not None:
            _write_json(out, result)
        return result
    except BaseException as exc:
        code = exc.exit_code if isinstance(exc, D5Error) else EXIT_FAILED
        error = " ".join(str(exc).split()) or type(exc).__name__
        if not isinstance(exc, D5Error):
            error = f"{type(exc).__name__}: {error}"
        raise
    finally:
        ctx.finish(code, error)


# -- the parent ----------------------------------------------------------------------


def launch_sweep(
    ranks: int,
    settings: SweepSettings,
    *,
    communicator: str,
    rank_timeout: float,
    stop: Any = None,
    timeout: float | None = None,
) -> tuple[dict[str, Any] | None, Any]:
    """Run the sweep on ``ranks`` ranks under the communication plugin's launcher;
    ``timeout``: the seconds the job may run in all (``None``: no limit).

    :return: ``(result, outcome)``: rank 0's result (``None`` when the job did not end
        well) and the launch's :class:`~d5core.lv3.launch.LaunchOutcome`.
    """
    from d5core.lv3.launch import launch

    with tempfile.TemporaryDirectory(prefix="d5-comm-") as tmp:
        out = Path(tmp) / "result.json"
        argv = [
            "bench", "comm", "--collective", settings.collective,
            "--sizes", ",".join(str(s) for s in settings.sizes),
            "--communicator", communicator, "--rank-out", str(out),
        ]  # fmt: skip
        if settings.samples is not None:
            argv += ["--samples", str(settings.samples)]
        outcome = launch(ranks, argv, rank_timeout=rank_timeout, stop=stop, timeout=timeout,
                         communicator=communicator)  # fmt: skip
        if outcome.code != 0 or outcome.signum is not None:
            return None, outcome
        try:
            return dict(json.loads(out.read_text())), outcome
        except (OSError, ValueError) as exc:
            raise CheckFailed(
                f"rank 0 of {ranks} ended without writing its results ({exc})"
            ) from None


def sweep_rows(result: Mapping[str, Any], collective: str) -> list[dict[str, Any]]:
    """One row per (message size, implementation) of a rank-0 ``result``: ``ranks``,
    ``bytes``, ``impl``, ``samples``, the ``median`` with its CI (``ci_low``,
    ``ci_high``, seconds) and the medians' ``algbw`` and ``busbw`` (GB/s)."""
    from d5core.measure.stats import summarize

    n = int(result["ranks"])
    rows = []
    for size in result["sizes"]:
        nbytes = int(size["bytes"])
        for impl, samples in size["samples"].items():
            summary = summarize(samples)
            algbw, busbw = bandwidths(collective, nbytes, n, summary.median)
            rows.append({
                "ranks": n, "bytes": nbytes, "impl": impl, "samples": list(samples),
                "summary": summary, "median": summary.median, "ci_low": summary.ci_low,
                "ci_high": summary.ci_high, "algbw": algbw, "busbw": busbw,
            })  # fmt: skip
    return rows


def store_sweep(
    store: Any, run_id: str, rows: Sequence[Mapping[str, Any]], collective: str
) -> None:
    """Store :func:`sweep_rows`: a ``time`` measurement (every sample, in seconds) and
    ``algbw`` and ``busbw`` metrics (GB/s, of the median) per row, each labelled
    ``{collective, bytes, ranks, impl}``."""
    for row in rows:
        labels = {"collective": collective, "bytes": int(row["bytes"]),
                  "ranks": int(row["ranks"]), "impl": str(row["impl"])}  # fmt: skip
        store.add_measurement(run_id, "time", row["samples"], labels=labels, unit="s",
                              summary=row["summary"])  # fmt: skip
        store.add_metric(run_id, "algbw", row["algbw"], labels=labels, unit="GB/s")
        store.add_metric(run_id, "busbw", row["busbw"], labels=labels, unit="GB/s")


def default_communicator() -> str:
    """The ``d5.communication`` entry the default launcher's ranks use."""
    from d5core.lv3.launch import rank_launcher

    return str(rank_launcher().communicator)


def check_communicator(name: str | None) -> str:
    """``name`` if it is an installed ``d5.communication`` entry that a plugin can start
    ranks for (``None``: the default launcher's own, :func:`default_communicator`).

    :raises UsageError: naming the installed ones, or saying that no launcher starts it.
    """
    from d5core.lv3.launch import rank_launcher
    from d5core.plugins import get_plugin_manager

    if name is None:
        return default_communicator()
    installed = list(get_plugin_manager().names("d5.communication"))
    if name not in installed:
        raise UsageError(
            f"--communicator {name!r} is not installed; choose one of {', '.join(installed)}"
        )
    rank_launcher(name)  # a plugin that starts its ranks, or one line saying none does
    return name
