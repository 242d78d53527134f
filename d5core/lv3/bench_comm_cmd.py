"""``d5 bench comm``: collective bandwidth against message size, d5 against the raw
communication library, stored as one run of kind ``comm``; or (``--collective
pingpong``) the one-way time of a message between two ranks, with the fit of
``t(m) = L + G*m`` (:mod:`d5core.lv3.comm_fit`).

The ranks are started the way ``d5 run --ranks N`` starts them (the communication
plugin's ``d5_rank_launcher``); each rank runs this same command with the hidden
``--rank-out`` option, and rank 0 hands its samples back through that file. This
module reads the options and shows the run; the runner :mod:`d5core.lv3.comm_run`
launches, stores, and checks the store before any rank starts; the measuring itself is
:mod:`d5core.lv3.comm_sweep`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.table import Table

from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.cli.tag_option import tag_option
from d5core.errors import UsageError

if TYPE_CHECKING:
    from d5core.lv3.comm_fit import CommFit
    from d5core.lv3.comm_run import CommRun

__all__ = ["DEFAULT_TIMEOUT_S", "bench_comm", "fit_lines"]

#: ``--timeout``: the seconds the job on one rank count may run (the default sweep takes
#: seconds).
DEFAULT_TIMEOUT_S = 600.0
#: The most ``--samples`` per size: each rank keeps every sample's time in memory.
MAX_SAMPLES = 10_000_000


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:.1f}"


def _merge(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (ranks, bytes) with d5's and the raw library's figures."""
    merged: dict[tuple[int, int], dict[str, Any]] = {}
    for row in rows:
        entry = merged.setdefault(
            (int(row["ranks"]), int(row["bytes"])),
            {"ranks": int(row["ranks"]), "bytes": int(row["bytes"]), "d5": None, "raw": None},
        )
        entry[str(row["impl"])] = {
            "median_s": row["median"], "ci_low_s": row["ci_low"], "ci_high_s": row["ci_high"],
            "samples": len(row["samples"]), "algbw_GBs": row["algbw"], "busbw_GBs": row["busbw"],
        }  # fmt: skip
    out = []
    for entry in merged.values():
        d5, raw = entry["d5"], entry["raw"]
        entry["ratio"] = raw["median_s"] / d5["median_s"] if d5 and raw else None
        out.append(entry)
    return out


def _table(run_id: str, collective: str, communicator: str, entries: Sequence[Any]) -> Table:
    table = Table(
        title=f"d5 bench comm {collective} ({communicator}), run {run_id}", title_justify="left"
    )
    for column in ("ranks", "size", "d5 median (µs)", "raw median (µs)", "d5 algbw (GB/s)",
                   "d5 busbw (GB/s)", "raw busbw (GB/s)", "d5/raw bandwidth"):  # fmt: skip
        table.add_column(column, justify="right")
    for e in entries:
        d5, raw = e["d5"], e["raw"]
        table.add_row(
            str(e["ranks"]), _size(e["bytes"]), _us(d5["median_s"]),
            _us(raw["median_s"] if raw else None), f"{d5['algbw_GBs']:.3f}",
            f"{d5['busbw_GBs']:.3f}", f"{raw['busbw_GBs']:.3f}" if raw else "-",
            "-" if e["ratio"] is None else f"{e['ratio']:.3f}",
        )  # fmt: skip
    return table


def _pingpong_table(run_id: str, communicator: str, entries: Sequence[Any]) -> Table:
    table = Table(
        title=f"d5 bench comm pingpong ({communicator}), run {run_id}", title_justify="left"
    )
    for column in ("ranks", "size", "d5 one-way (µs)", "raw one-way (µs)", "d5 (GB/s)",
                   "raw (GB/s)", "d5/raw bandwidth"):  # fmt: skip
        table.add_column(column, justify="right")
    for e in entries:
        d5, raw = e["d5"], e["raw"]
        table.add_row(
            str(e["ranks"]), _size(e["bytes"]), _us(d5["median_s"]),
            _us(raw["median_s"] if raw else None), f"{d5['algbw_GBs']:.3f}",
            f"{raw['algbw_GBs']:.3f}" if raw else "-",
            "-" if e["ratio"] is None else f"{e['ratio']:.3f}",
        )  # fmt: skip
    return table


def fit_lines(fit: CommFit) -> list[str]:
    """The fit of ``t(m) = L + G*m`` in words: the line, each size's residual, and, when
    the line's max ``|residual|`` is above :data:`~d5core.lv3.comm_fit.SEGMENT_THRESHOLD`,
    the two-segment fit with the sizes each segment covers."""
    from d5core.lv3.comm_fit import SEGMENT_THRESHOLD, fit_segments

    def line(latency_s: float, per_byte: float) -> str:
        bandwidth = "unbounded" if per_byte <= 0 else f"= {1 / per_byte / 1e9:.3f} GB/s"
        return f"L = {latency_s * 1e6:.2f} µs, G = {per_byte * 1e12:.2f} ns/KB (1/G {bandwidth})"

    def residuals(sizes: Sequence[int], values: Sequence[float]) -> str:
        return ", ".join(f"{_size(s)} {r:+.1%}" for s, r in zip(sizes, values, strict=True))

    lines = [
        f"fit t(m) = L + G*m over {len(fit.sizes)} sizes (least squares on relative error): "
        f"{line(fit.latency_s, fit.seconds_per_byte)}; "
        f"max |residual| {fit.max_abs_residual:.1%}",
        f"residuals (predicted/measured - 1): {residuals(fit.sizes, fit.residuals)}",
    ]
    segments = fit_segments(fit) if fit.max_abs_residual > SEGMENT_THRESHOLD else None
    if segments is not None:
        lines.append(
            f"one line misses by more than {SEGMENT_THRESHOLD:.0%} (a protocol switch?); "
            "two segments:"
        )
        for segment in segments:
            covered = [s for s in fit.sizes if segment.first_bytes <= s <= segment.last_bytes]
            lines.append(
                f"  {_size(segment.first_bytes)} to {_size(segment.last_bytes)}: "
                f"{line(segment.latency_s, segment.seconds_per_byte)}; max |residual| "
                f"{segment.max_abs_residual:.1%} ({residuals(covered, segment.residuals)})"
            )
    for what, per_byte in (
        ("both ways at once (Gx, a collective's rounds)", fit.exchange_s_per_byte),
        (
            "reduction arithmetic (R, the library's kernel adding two buffers)",
            fit.reduce_s_per_byte,
        ),
    ):
        if per_byte > 0:
            lines.append(f"{what}: {per_byte * 1e12:.2f} ns/KB (= {1 / per_byte / 1e9:.3f} GB/s)")
    return lines


def _check_collective(collective: str) -> str:
    from d5core.lv3.comm_sweep import check_sweep

    return check_sweep(collective)


def _rank_counts(ranks: str | None, collective: str) -> list[int]:
    """The rank counts of ``--ranks`` (default 2,4; the ping-pong's 2, and only one)."""
    from d5core.lv3.comm_sweep import DEFAULT_RANKS, PINGPONG, parse_ranks

    if collective != PINGPONG:
        return parse_ranks(ranks) if ranks is not None else list(DEFAULT_RANKS)
    counts = parse_ranks(ranks) if ranks is not None else [2]
    if len(counts) > 1:
        raise UsageError(
            f"--ranks {ranks}: a ping-pong runs between ranks 0 and 1 of one job; "
            "give one rank count, such as 2"
        )
    return counts


def _check_samples(samples: int | None) -> int | None:
    if samples is not None and samples < 3:
        raise UsageError(f"--samples {samples}: take at least 3 samples per size")
    if samples is not None and samples > MAX_SAMPLES:
        raise UsageError(f"--samples {samples}: take at most {MAX_SAMPLES:,} samples per size")
    return samples


def _size_list(text: str) -> list[int]:
    """``--sizes 8,1024,...``: the message sizes in bytes, each a positive multiple of a
    float32.

    :raises UsageError: for a size that is not such a whole number.
    """
    sizes = []
    for part in text.split(","):
        try:
            size = int(part.strip())
        except ValueError:
            size = 0
        if size <= 0 or size % 4:
            raise UsageError(
                f"--sizes {text}: {part.strip()!r} is no message size; give whole numbers of "
                "bytes, each a positive multiple of 4 (float32 elements), separated by commas"
            )
        sizes.append(size)
    return sizes


def _check_fits(counts: Sequence[int], sizes: Sequence[int], collective: str) -> None:
    """Refuse, before any rank starts, rank counts this machine cannot hold
    (:func:`~d5core.lv3.launch.check_rank_count`) and buffers that cannot fit in its
    memory: each rank holds its message, and allgather's result of every rank's."""
    import psutil

    from d5core.lv3.launch import check_rank_count

    for n in counts:
        check_rank_count(n)
    most, largest = max(counts), max(sizes)
    per_rank = largest * (most + 1 if collective == "allgather" else 2)
    free = int(psutil.virtual_memory().available)
    if per_rank * most > free:
        raise UsageError(
            f"--max-bytes {largest} on {most} ranks needs about {per_rank * most / 1e9:.3g} GB "
            f"of buffers where {free / 1e9:.3g} GB is available; lower --max-bytes or --ranks"
        )


@click.command("comm")
@click.option("--ranks", default=None, metavar="LIST",
              help="Comma-separated rank counts (default: 2,4; pingpong: one count, 2); each at "
              "least 2.")  # fmt: skip
@click.option("--collective", default="allreduce", show_default=True,
              help="allreduce, broadcast, allgather, or pingpong (point to point between "
              "ranks 0 and 1, with the fit of latency and time per byte).")  # fmt: skip
@click.option("--min-bytes", type=int, default=None,
              help="Smallest message (each rank's float32 buffer), in bytes (default: 1024; "
              "pingpong 8).")  # fmt: skip
@click.option("--max-bytes", type=int, default=None,
              help="Largest message, in bytes (default: 4 MiB; pingpong 64 MiB); sizes grow "
              "4 times a step up to it (pingpong 2 times).")  # fmt: skip
@click.option("--samples", type=int, default=None,
              help="Samples per size and implementation (default: 100 up to 1 MiB, fewer "
              "above).")  # fmt: skip
@click.option("--communicator", default=None, metavar="NAME",
              help="The d5.communication entry to time (default: the launcher's).")  # fmt: skip
@click.option("--link-peak", type=float, default=None, metavar="GB/S",
              help="The link's peak bandwidth, stored and drawn beside bus bandwidth.")  # fmt: skip
@click.option("--rank-timeout", type=click.FloatRange(min=1.0), default=60.0, show_default=True,
              help="Kill the job when a rank shows no progress for this many seconds.")  # fmt: skip
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT_S, show_default=True,
              metavar="SECONDS",
              help="Kill the job on one rank count that runs longer, and fail.")  # fmt: skip
@click.option("--rank-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              hidden=True)  # fmt: skip
@click.option("--sizes", "size_list", default=None, hidden=True)
@tag_option
@json_option
@db_option
def bench_comm(
    ranks: str | None,
    collective: str,
    min_bytes: int | None,
    max_bytes: int | None,
    samples: int | None,
    communicator: str | None,
    link_peak: float | None,
    rank_timeout: float,
    timeout: float,
    rank_out: Path | None,
    size_list: str | None,
    tags: tuple[str, ...],
    as_json: bool,
    db: str | Path | None,
) -> None:
    """Time a collective against message size: d5's communicator beside the library's
    own call, on each rank count, stored as one run (kind comm).

    Before each sample the ranks meet at a barrier; a sample is the slowest rank's time;
    d5's call and the library's alternate. Stores every sample (measurement time) and
    the algorithm and bus bandwidths of the medians (metrics algbw, busbw, GB/s), as
    nccl-tests defines them. Exits 2 for bad input, before any rank starts.

    With --collective pingpong, rank 0 sends each message to rank 1 and back; a sample
    is half the round trip. The run also stores the fit of t(m) = L + G*m (metrics
    fit_latency, fit_bandwidth, fit_ns_per_kb, fit_max_residual, fit_residual), and the
    time per byte of ranks 0 and 1 sending to each other at once and of adding two
    buffers (fit_exchange_bandwidth, fit_reduce_bandwidth).
    """
    from d5core.lv3.comm_run import run_comm_sweep, run_launched_rank
    from d5core.lv3.comm_sweep import (
        PINGPONG,
        SweepSettings,
        default_sizes,
        message_sizes,
        parse_ranks,
    )
    from d5core.lv3.launch import RankContext
    from d5core.measure.invocations import check_timeout

    _check_collective(collective)
    _check_samples(samples)
    check_timeout(timeout)
    if link_peak is not None and not (math.isfinite(link_peak) and link_peak > 0):
        raise UsageError(f"--link-peak {link_peak}: give the link's peak in GB/s, above 0")
    if size_list is not None:
        sizes = _size_list(size_list)
    else:
        low, high, factor = default_sizes(collective)
        low = low if min_bytes is None else min_bytes
        high = high if max_bytes is None else max_bytes
        sizes = message_sizes(low, high, factor)
    if collective == PINGPONG and len(sizes) < 2:
        raise UsageError(
            f"--min-bytes {sizes[0]} --max-bytes {sizes[-1]}: the fit of a ping-pong needs "
            "at least 2 message sizes; give a smaller --min-bytes or a larger --max-bytes"
        )
    settings = SweepSettings(collective, tuple(sizes), samples)
    ctx = RankContext.from_environment()
    if ctx is not None:  # one rank, started by d5 or by an outside launcher
        if ranks is not None and parse_ranks(ranks) != [ctx.size]:
            raise UsageError(f"--ranks {ranks} but the launcher started {ctx.size} ranks")
        stored = run_launched_rank(ctx, settings, rank_out, communicator=communicator,
                                   link_peak=link_peak, tags=tags, db=db)  # fmt: skip
        if stored is not None:  # rank 0 under an outside launcher
            _show(stored, as_json)
        return
    if rank_out is not None:
        raise UsageError("--rank-out is for the ranks d5 starts itself; leave it out")
    counts = _rank_counts(ranks, collective)
    _check_fits(counts, sizes, collective)
    run = run_comm_sweep(
        counts, settings, communicator=communicator, link_peak=link_peak,
        rank_timeout=rank_timeout, tags=tags, db=db, progress=None if as_json else _say,
        timeout=timeout,
    )  # fmt: skip
    _show(run, as_json)


def _say(line: str) -> None:
    """Show a progress line of the runner on stderr."""
    click.echo(f"d5: {line}", err=True)


def _show(run: CommRun, as_json: bool) -> None:
    """Print a stored sweep: its table (and a ping-pong's fit), or its JSON."""
    from d5core.lv3.comm_fit import fit_document
    from d5core.lv3.comm_sweep import DTYPE, PINGPONG, synchronisation

    entries = _merge(run.rows)
    pingpong = run.collective == PINGPONG
    if as_json:
        doc = {"run_id": run.run_id, "collective": run.collective,
               "communicator": run.communicator, "raw_baseline": run.raw_baseline,
               "link_peak_gbps": run.link_peak_gbps,
               "synchronisation": synchronisation(run.collective), "rows": entries}  # fmt: skip
        if pingpong:
            doc["fit"] = None if run.fit is None else fit_document(run.fit)
        print_json(doc)
        return
    out = console()
    if pingpong:
        out.print(_pingpong_table(run.run_id, run.communicator, entries))
    else:
        out.print(_table(run.run_id, run.collective, run.communicator, entries))
    out.print(f"{DTYPE} buffers; {synchronisation(run.collective)}")
    if not run.raw_baseline:
        out.print(f"no raw baseline: the {run.communicator!r} communicator offers none")
    if run.fit is not None:
        for line in fit_lines(run.fit):
            out.print(line, markup=False, highlight=False)
