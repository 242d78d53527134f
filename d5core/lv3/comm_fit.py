"""The point-to-point cost line ``t(m) = L + G*m`` fitted to a ping-pong sweep.

``d5 bench comm --collective pingpong`` times one-way messages between ranks 0 and 1
for sizes from a few bytes to tens of MiB. :func:`fit_pingpong` fits the LogGP-style
line to the medians per size: ``L`` is the latency (seconds) and ``G`` the time per
byte (seconds; ``1/G`` is the bandwidth). The fit weighs every size alike: it is the
least-squares fit of the *relative* error ``(L + G*m) / t - 1``, so an 8-byte message
timed in microseconds counts as much as a 64 MiB one timed in milliseconds (a plain
least-squares fit would follow the large messages and miss ``L`` entirely). ``L`` and
``G`` are never negative: when the unconstrained optimum has one below zero, the best
fit with that one at zero is taken.

Each size's residual is ``predicted / measured - 1``: ``+0.10`` means the line predicts
10% more than was measured. A large residual at some sizes and not at others is the
sign of a protocol switch (eager to rendezvous) that a single line cannot follow; for
those :func:`fit_segments` fits two lines, one each side of the breakpoint that fits
best, and says which sizes each covers.

Two more figures come with the line, each the time per byte of its own line fitted the
same way: ``exchange_s_per_byte`` (``Gx``) from ranks 0 and 1 sending to each other at
once, as every round of an allreduce or allgather does (more per byte than one
direction at a time wherever both directions share a resource); and ``reduce_s_per_byte``
(``R``) from adding two buffers in place with the library's own reduction kernel
(numpy's add for a communicator that offers none), the arithmetic a reduction adds to
its messages. Both are 0 in a fit stored without them (models then use ``G`` and no
arithmetic).

The fit is stored with the run (:func:`store_fit`) and read back by :func:`load_fit`,
which cost models import.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from d5core.errors import UsageError

__all__ = [
    "FIT_CONFIG_KEY",
    "FIT_METRICS",
    "PINGPONG",
    "SEGMENT_THRESHOLD",
    "CommFit",
    "Segment",
    "fit_document",
    "fit_line",
    "fit_pingpong",
    "fit_segments",
    "load_fit",
    "store_fit",
]

#: The name ``d5 bench comm`` times the ping-pong under (``--collective pingpong``).
PINGPONG = "pingpong"
#: The key of the run's config that holds :meth:`CommFit.to_json`.
FIT_CONFIG_KEY = "fit"
#: The single line's max ``|residual|`` above which d5 shows the two-segment fit too.
SEGMENT_THRESHOLD = 0.25
#: The fewest sizes a segment of :func:`fit_segments` covers.
_SEGMENT_SIZES = 3
#: The run metrics :func:`store_fit` adds, with their units.
FIT_METRICS: dict[str, str] = {
    "fit_latency": "us",
    "fit_bandwidth": "GB/s",
    "fit_ns_per_kb": "ns/KB",
    "fit_max_residual": "",
    "fit_residual": "",
    "fit_exchange_bandwidth": "GB/s",
    "fit_reduce_bandwidth": "GB/s",
}


@dataclass(frozen=True)
class CommFit:
    """``t(m) = L + G*m``: the one-way seconds of an ``m``-byte message between two ranks,
    fitted by :func:`fit_pingpong`, with what it was fitted to."""

    #: The ``d5.communication`` entry that was timed (``"mpi"``, ``"gloo"``, ...).
    communicator: str
    #: ``L``: the seconds of a message of no bytes.
    latency_s: float
    #: ``G``: the seconds each further byte adds (``1/G`` bytes per second).
    seconds_per_byte: float
    #: The ranks of the job that measured it (only ranks 0 and 1 exchanged messages).
    ranks: int
    #: The message sizes, bytes, ascending.
    sizes: tuple[int, ...]
    #: The median one-way seconds measured at each size.
    measured_s: tuple[float, ...]
    #: ``predicted / measured - 1`` at each size.
    residuals: tuple[float, ...]
    #: The stored run the fit came from (``None``: not stored).
    run_id: str | None = None
    #: ``Gx``: the seconds per byte when two ranks send to each other at once (0: not
    #: measured; models then take ``G``).
    exchange_s_per_byte: float = 0.0
    #: ``R``: the seconds per byte of adding two buffers in place (0: not measured).
    reduce_s_per_byte: float = 0.0

    @property
    def exchange_or_p2p_s_per_byte(self) -> float:
        """``Gx`` when measured, else ``G``: the time per byte of a collective's rounds."""
        return self.exchange_s_per_byte if self.exchange_s_per_byte > 0 else self.seconds_per_byte

    def p2p_seconds(self, nbytes: int) -> float:
        """The predicted one-way seconds of a message of ``nbytes``: ``L + G*nbytes``."""
        return self.latency_s + self.seconds_per_byte * nbytes

    @property
    def bandwidth_gbps(self) -> float:
        """``1/G`` in GB/s (10^9 bytes per second); infinite when ``G`` is 0."""
        return math.inf if self.seconds_per_byte <= 0 else 1.0 / self.seconds_per_byte / 1e9

    @property
    def max_abs_residual(self) -> float:
        """The largest ``|predicted / measured - 1|`` over the sizes."""
        return max((abs(r) for r in self.residuals), default=0.0)

    def to_json(self) -> dict[str, Any]:
        """The fit as a JSON-ready dict (what the run stores; :meth:`from_json` reads it)."""
        return {
            "communicator": self.communicator,
            "latency_s": self.latency_s,
            "seconds_per_byte": self.seconds_per_byte,
            "ranks": self.ranks,
            "sizes": list(self.sizes),
            "measured_s": list(self.measured_s),
            "residuals": list(self.residuals),
            "max_abs_residual": self.max_abs_residual,
            "run_id": self.run_id,
            "exchange_s_per_byte": self.exchange_s_per_byte,
            "reduce_s_per_byte": self.reduce_s_per_byte,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> CommFit:
        """The fit :meth:`to_json` wrote.

        :raises UsageError: naming the key that is missing or malformed.
        """
        try:
            sizes = tuple(int(s) for s in data["sizes"])
            measured = tuple(float(t) for t in data["measured_s"])
            residuals = tuple(float(r) for r in data["residuals"])
            run_id = data.get("run_id")
            fit = cls(
                communicator=str(data["communicator"]),
                latency_s=float(data["latency_s"]),
                seconds_per_byte=float(data["seconds_per_byte"]),
                ranks=int(data["ranks"]),
                sizes=sizes,
                measured_s=measured,
                residuals=residuals,
                run_id=None if run_id is None else str(run_id),
                exchange_s_per_byte=float(data.get("exchange_s_per_byte", 0.0)),
                reduce_s_per_byte=float(data.get("reduce_s_per_byte", 0.0)),
            )
        except KeyError as exc:
            raise UsageError(f"a stored fit lacks {exc.args[0]!r}; store it again") from None
        except (TypeError, ValueError) as exc:
            raise UsageError(f"a stored fit is malformed ({exc}); store it again") from None
        if not (len(sizes) == len(measured) == len(residuals)):
            raise UsageError(
                "a stored fit has sizes, measured_s and residuals of different lengths; "
                "store it again"
            )
        return fit


def _medians(sizes: Sequence[int], seconds: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The distinct sizes, ascending, and the median of the seconds at each.

    :raises UsageError: for lengths that differ, a size below 0, a time that is not a
        positive finite number, or fewer than 2 distinct sizes.
    """
    if len(sizes) != len(seconds):
        raise UsageError(
            f"the fit needs one time per size; got {len(sizes)} sizes and {len(seconds)} times"
        )
    by_size: dict[int, list[float]] = {}
    for size, t in zip(sizes, seconds, strict=True):
        nbytes, value = int(size), float(t)
        if nbytes < 0 or nbytes != size:
            raise UsageError(f"message size {size!r}: give a whole number of bytes, 0 or more")
        if not (math.isfinite(value) and value > 0):
            raise UsageError(
                f"time {t!r} at {nbytes} bytes: the fit needs positive, finite seconds"
            )
        by_size.setdefault(nbytes, []).append(value)
    if len(by_size) < 2:
        raise UsageError(
            f"the fit of L and G needs at least 2 message sizes; got {len(by_size)}: "
            "sweep a range of sizes (--min-bytes below --max-bytes)"
        )
    ordered = sorted(by_size)
    return (
        np.array(ordered, dtype=np.float64),
        np.array([float(np.median(by_size[s])) for s in ordered], dtype=np.float64),
    )


def fit_line(m: np.ndarray, t: np.ndarray) -> tuple[float, float]:
    """``(L, G)`` minimising ``sum(((L + G*m) / t - 1)^2)`` with ``L, G >= 0``.

    The problem is linear least squares in ``(L, G)`` with rows ``[1/t, m/t]`` and target
    1; of the unconstrained optimum and the two optima with one parameter at 0, the best
    one with neither below 0 is taken.
    """
    a = np.column_stack([1.0 / t, m / t])
    ones = np.ones_like(t)

    def loss(latency: float, per_byte: float) -> float:
        return float(np.sum((a @ np.array([latency, per_byte]) - ones) ** 2))

    candidates: list[tuple[float, float]] = []
    (latency, per_byte), *_ = np.linalg.lstsq(a, ones, rcond=None)
    if latency >= 0 and per_byte >= 0:
        candidates.append((float(latency), float(per_byte)))
    # one parameter at zero: 1-d least squares, x = (col . 1) / (col . col)
    col_l, col_g = a[:, 0], a[:, 1]
    candidates.append((float(col_l.sum() / (col_l @ col_l)), 0.0))
    if float(col_g @ col_g) > 0:
        candidates.append((0.0, float(col_g.sum() / (col_g @ col_g))))
    return min(candidates, key=lambda c: loss(*c))


def fit_pingpong(
    sizes: Sequence[int],
    seconds: Sequence[float],
    *,
    communicator: str,
    ranks: int,
    run_id: str | None = None,
    exchange: tuple[Sequence[int], Sequence[float]] | None = None,
    reduce: tuple[Sequence[int], Sequence[float]] | None = None,
) -> CommFit:
    """Fit ``t(m) = L + G*m`` to one-way times ``seconds`` of messages of ``sizes`` bytes.

    ``sizes`` may repeat (every sample given): the fit uses the median per size. It
    weighs each size's relative error alike (see the module's docstring). ``exchange``
    and ``reduce`` are ``(sizes, seconds)`` of the two other series; the time per byte
    of each one's own line becomes ``exchange_s_per_byte`` and ``reduce_s_per_byte``.

    :raises UsageError: for fewer than 2 distinct sizes, a time that is not positive and
        finite, a negative size, or lengths that differ.
    """
    if ranks < 2:
        raise UsageError(f"ranks {ranks}: a ping-pong needs at least 2 ranks")
    m, t = _medians(sizes, seconds)
    latency, per_byte = fit_line(m, t)
    predicted = latency + per_byte * m
    residuals = predicted / t - 1.0
    per_byte_of = {}
    for name, series in (("exchange", exchange), ("reduce", reduce)):
        if series is not None:
            per_byte_of[name] = fit_line(*_medians(*series))[1]
    return CommFit(
        communicator=str(communicator),
        latency_s=latency,
        seconds_per_byte=per_byte,
        ranks=int(ranks),
        sizes=tuple(int(s) for s in m),
        measured_s=tuple(float(v) for v in t),
        residuals=tuple(float(r) for r in residuals),
        run_id=run_id,
        exchange_s_per_byte=float(per_byte_of.get("exchange", 0.0)),
        reduce_s_per_byte=float(per_byte_of.get("reduce", 0.0)),
    )


@dataclass(frozen=True)
class Segment:
    """One line of a two-segment fit: ``t(m) = L + G*m`` for sizes ``first_bytes`` to
    ``last_bytes``, with the residual of each size it covers."""

    first_bytes: int
    last_bytes: int
    latency_s: float
    seconds_per_byte: float
    residuals: tuple[float, ...]

    @property
    def max_abs_residual(self) -> float:
        """The largest ``|predicted / measured - 1|`` over the sizes it covers."""
        return max((abs(r) for r in self.residuals), default=0.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "first_bytes": self.first_bytes,
            "last_bytes": self.last_bytes,
            "latency_s": self.latency_s,
            "seconds_per_byte": self.seconds_per_byte,
            "residuals": list(self.residuals),
            "max_abs_residual": self.max_abs_residual,
        }


def _segment(m: np.ndarray, t: np.ndarray) -> tuple[Segment, float]:
    """The line fitted to sizes ``m`` and times ``t``, and its sum of squared residuals."""
    latency, per_byte = fit_line(m, t)
    residuals = (latency + per_byte * m) / t - 1.0
    segment = Segment(int(m[0]), int(m[-1]), latency, per_byte,
                      tuple(float(r) for r in residuals))  # fmt: skip
    return segment, float(np.sum(residuals**2))


def fit_segments(fit: CommFit) -> tuple[Segment, Segment] | None:
    """Two lines, for the sizes below and from a breakpoint, fitted like
    :func:`fit_pingpong`; the breakpoint is the one whose two fits leave the smallest sum
    of squared relative residuals. Each segment covers at least 3 sizes; ``None`` when
    ``fit`` has fewer than 6."""
    m = np.array(fit.sizes, dtype=np.float64)
    t = np.array(fit.measured_s, dtype=np.float64)
    best: tuple[float, Segment, Segment] | None = None
    for k in range(_SEGMENT_SIZES, len(m) - _SEGMENT_SIZES + 1):
        low, low_loss = _segment(m[:k], t[:k])
        high, high_loss = _segment(m[k:], t[k:])
        if best is None or low_loss + high_loss < best[0]:
            best = (low_loss + high_loss, low, high)
    return None if best is None else (best[1], best[2])


def fit_document(fit: CommFit) -> dict[str, Any]:
    """:meth:`CommFit.to_json` with ``segments``: the two lines of :func:`fit_segments`
    (``null`` for fewer than 6 sizes), what the run stores and ``--json`` prints."""
    segments = fit_segments(fit)
    return {
        **fit.to_json(),
        "segments": None if segments is None else [segment.to_json() for segment in segments],
    }


def store_fit(store: Any, run_id: str, fit: CommFit) -> None:
    """Add ``fit`` to the ``running`` run ``run_id``: the whole fit under the config's
    :data:`FIT_CONFIG_KEY`, and as metrics (:data:`FIT_METRICS`): ``fit_latency`` (µs),
    ``fit_bandwidth`` (``1/G``, GB/s), ``fit_ns_per_kb`` (``G`` as ns per 1000 bytes),
    ``fit_max_residual``, one ``fit_residual`` per size (labelled ``bytes``) and, when
    measured, ``fit_exchange_bandwidth`` (``1/Gx``) and ``fit_reduce_bandwidth``
    (``1/R``), GB/s. The config's fit also holds the two segments of
    :func:`fit_segments` (``segments``), which :meth:`CommFit.from_json` leaves aside."""
    labels = {"communicator": fit.communicator, "ranks": fit.ranks}
    stored = fit_document(fit)
    stored["run_id"] = str(run_id)
    store.update_config(run_id, {FIT_CONFIG_KEY: stored})
    store.add_metric(run_id, "fit_latency", fit.latency_s * 1e6, labels=labels, unit="us")
    if fit.seconds_per_byte > 0:
        store.add_metric(run_id, "fit_bandwidth", fit.bandwidth_gbps, labels=labels,
                         unit="GB/s")  # fmt: skip
    store.add_metric(run_id, "fit_ns_per_kb", fit.seconds_per_byte * 1e12, labels=labels,
                     unit="ns/KB", better="lower")  # fmt: skip
    store.add_metric(run_id, "fit_max_residual", fit.max_abs_residual, labels=labels,
                     better="lower")  # fmt: skip
    for name, per_byte in (("fit_exchange_bandwidth", fit.exchange_s_per_byte),
                           ("fit_reduce_bandwidth", fit.reduce_s_per_byte)):  # fmt: skip
        if per_byte > 0:
            store.add_metric(run_id, name, 1.0 / per_byte / 1e9, labels=labels, unit="GB/s")
    for nbytes, residual in zip(fit.sizes, fit.residuals, strict=True):
        store.add_metric(run_id, "fit_residual", residual, labels={**labels, "bytes": nbytes})


def _fit_of(run: Any) -> CommFit:
    """The fit stored with ``run`` (a :class:`~d5core.results.store.RunRecord`).

    :raises UsageError: when the run is not a ping-pong run of ``d5 bench comm`` or holds
        no fit.
    """
    from d5core.lv3.comm_run import COMM_KIND

    again = f"run `d5 bench comm --collective {PINGPONG}` and give its run id"
    if run.kind != COMM_KIND:
        raise UsageError(
            f"run {run.id} is a {run.kind!r} run, not a {COMM_KIND!r} run; a fit of L and G "
            f"comes from a ping-pong sweep: {again}"
        )
    collective = run.config.get("collective")
    if collective != PINGPONG:
        raise UsageError(
            f"run {run.id} timed {collective!r}, not {PINGPONG!r}: L and G are fitted only to "
            f"a ping-pong sweep; {again}"
        )
    data = run.config.get(FIT_CONFIG_KEY)
    if not isinstance(data, Mapping):
        raise UsageError(f"run {run.id} ({run.status}) holds no fit of L and G; {again}")
    fit = CommFit.from_json(data)
    return fit if fit.run_id == run.id else CommFit.from_json({**data, "run_id": run.id})


def load_fit(run_id: str | None, db: str | Path | None, communicator: str | None = None) -> CommFit:
    """The fit stored with a ping-pong run of ``d5 bench comm``.

    :param run_id: the run (an id or a unique prefix); ``None``: the newest complete
        ping-pong run (of ``communicator`` when given).
    :param db: the results database (``None``: the default one).
    :param communicator: with a ``run_id``, the fit must be of this communicator.
    :raises UsageError: one line saying how to fix it: no such run, a run that is not of
        kind ``comm``, a ``comm`` run of another collective, a run of another
        communicator, or no ping-pong run stored at all.
    """
    from d5core.lv3.comm_run import COMM_KIND
    from d5core.results.store import read_store

    with read_store(db) as store:
        if run_id is not None:
            fit = _fit_of(store.get_run(run_id))
            if communicator is not None and fit.communicator != communicator:
                raise UsageError(
                    f"run {fit.run_id} timed the {fit.communicator!r} communicator, not "
                    f"{communicator!r}; run `d5 bench comm --collective {PINGPONG} "
                    f"--communicator {communicator}` or give that run"
                )
            return fit
        for run in store.list_runs(kind=COMM_KIND):
            if (
                run.status == "complete"
                and run.config.get("collective") == PINGPONG
                and isinstance(run.config.get(FIT_CONFIG_KEY), Mapping)
                and (communicator is None or run.config.get("communicator") == communicator)
            ):
                return _fit_of(run)
    of = "" if communicator is None else f" of the {communicator!r} communicator"
    option = "" if communicator is None else f" --communicator {communicator}"
    raise UsageError(
        f"no ping-pong run{of} is stored in the results database; run "
        f"`d5 bench comm --collective {PINGPONG}{option}` first"
    )
