"""The level-3 runner of ``d5 bench comm``: launch the sweep, then store it as one run.

:func:`run_comm_sweep` is the parent's side: it checks the communicator and the store
(so that a database that cannot be written fails before any rank starts), starts one
job per rank count (:func:`d5core.lv3.comm_sweep.launch_sweep`) and stores rank 0's
results as one run of kind ``comm``. :func:`run_launched_rank` is one rank's side, under
d5's launcher or an outside one; under an outside launcher rank 0 stores the run itself.
The command (:mod:`d5core.lv3.bench_comm_cmd`) only reads options and shows a
:class:`CommRun`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from d5core.errors import CheckFailed, UsageError

if TYPE_CHECKING:
    from d5core.lv3.comm_fit import CommFit

__all__ = ["COMM_KIND", "CommRun", "run_comm_sweep", "run_launched_rank", "store_comm_run"]

#: The kind of the runs ``d5 bench comm`` stores; each is named ``comm COLLECTIVE``.
COMM_KIND = "comm"


@dataclass(frozen=True)
class CommRun:
    """A stored sweep: its run id, what was timed, and the rows of
    :func:`~d5core.lv3.comm_sweep.sweep_rows` for every rank count."""

    run_id: str
    collective: str
    communicator: str
    #: Whether every rank count had the library's own call to compare with.
    raw_baseline: bool
    link_peak_gbps: float | None
    rows: list[dict[str, Any]]
    #: The fit of ``t(m) = L + G*m`` to d5's one-way times of a ping-pong sweep (``None``
    #: for a collective).
    fit: CommFit | None = None


def store_comm_run(
    store: Any,
    results: Sequence[Mapping[str, Any]],
    settings: Any,
    *,
    communicator: str,
    link_peak: float | None,
    tags: Sequence[str],
    launcher: str,
    timeout: float | None = None,
) -> CommRun:
    """Store ``results`` (rank 0's, one per rank count) in ``store`` as one complete run
    of kind ``comm`` with the sweep's settings in its config; a ping-pong's with the fit
    of ``t(m) = L + G*m`` to d5's one-way times (:func:`~d5core.lv3.comm_fit.store_fit`)."""
    from d5core.lv3.comm_fit import fit_pingpong, store_fit
    from d5core.lv3.comm_sweep import DTYPE, PINGPONG, store_sweep, sweep_rows, synchronisation

    collective = settings.collective
    raw = all(bool(r["raw"]) for r in results)
    config = {
        **settings.to_json(),
        "ranks": [int(r["ranks"]) for r in results],
        "dtype": DTYPE,
        "communicator": communicator,
        "launcher": launcher,
        "timeout_s": timeout,
        "raw_baseline": raw,
        "link_peak_gbps": link_peak,
        "synchronisation": synchronisation(collective),
        "bytes": "each rank's buffer; allgather's bandwidth counts the gathered result",
    }
    if collective == PINGPONG:
        config["bytes"] = "each message's; a sample is half of rank 0's round trip"
    rows = [row for r in results for row in sweep_rows(r, collective)]
    fit = None
    with store.run(COMM_KIND, f"comm {collective}", config=config, tags=tags) as run_id:
        store_sweep(store, run_id, rows, collective)
        if collective == PINGPONG:
            d5 = [row for row in rows if row["impl"] == "d5"]
            fit = fit_pingpong([int(row["bytes"]) for row in d5],
                               [float(row["median"]) for row in d5],
                               communicator=communicator, ranks=int(d5[0]["ranks"]),
                               run_id=str(run_id), exchange=_series(results[0], "exchange"),
                               reduce=_series(results[0], "reduce"))  # fmt: skip
            store_fit(store, run_id, fit)
    return CommRun(str(run_id), collective, communicator, raw, link_peak, rows, fit)


def _series(
    result: Mapping[str, Any], key: str
) -> tuple[list[int], list[float]] | None:
    """Every sample of a ping-pong's series ``key`` (``exchange``, ``reduce``) as
    ``(sizes, seconds)``, a size repeated per sample; ``None`` when the sweep has none."""
    sizes: list[int] = []
    seconds: list[float] = []
    for size in result["sizes"]:
        for value in size.get(key) or ():
            sizes.append(int(size["bytes"]))
            seconds.append(float(value))
    return (sizes, seconds) if len({*sizes}) >= 2 else None


def run_comm_sweep(
    counts: Sequence[int],
    settings: Any,
    *,
    communicator: str | None,
    link_peak: float | None,
    rank_timeout: float,
    tags: Sequence[str],
    db: str | Path | None,
    progress: Callable[[str], None] | None = None,
    timeout: float | None = None,
) -> CommRun:
    """Time ``settings`` on each rank count of ``counts`` and store all of them as one run.

    The store is opened and checked writable before the first job starts; a job that
    fails or is interrupted stops the sweep, and nothing is stored.

    :param communicator: the ``d5.communication`` entry (``None``: the launcher's own).
    :param progress: called with a line as each rank count starts (``None``: quiet).
    :param timeout: the seconds the job on one rank count may run (``None``: no limit);
        recorded in the run's config.
    :raises UsageError: an unknown communicator, a store that cannot be written, or a
        job that ended with exit 2.
    :raises RunInterrupted: when a stop signal ended a job.
    :raises RankFailed: when a rank failed.
    """
    from d5core.lv3.comm_sweep import check_communicator, launch_sweep
    from d5core.lv3.launch import RankFailed, RunInterrupted, StopSignals
    from d5core.results.store import ResultsStore

    name = check_communicator(communicator)
    results: list[dict[str, Any]] = []
    launcher = "the launcher"
    with ResultsStore.open(db) as store:
        store.require_writable()  # found before the sweep, not after it
        with StopSignals() as stop:
            for n in counts:
                if progress is not None:
                    progress(
                        f"timing {settings.collective} on {n} ranks ({len(settings.sizes)} sizes)"
                    )
                result, outcome = launch_sweep(n, settings, communicator=name,
                                               rank_timeout=rank_timeout, stop=stop,
                                               timeout=timeout)  # fmt: skip
                launcher = outcome.launcher
                if outcome.signum is not None:
                    raise RunInterrupted(
                        outcome.signum,
                        f"interrupted by {stop.name}; {launcher} and its {n} ranks were stopped "
                        "(nothing stored)",
                    )
                if result is None:
                    message = outcome.message or f"the job on {n} ranks failed"
                    if outcome.code == 2:
                        raise UsageError(message)
                    if message.startswith("rank "):
                        raise RankFailed(f"{n} ranks: {message} (nothing stored)")
                    raise CheckFailed(f"{n} ranks: {message} (nothing stored)")
                results.append(result)
        return store_comm_run(store, results, settings, communicator=name,
                              link_peak=link_peak, tags=tags, launcher=launcher,
                              timeout=timeout)  # fmt: skip


def _outside_launcher() -> str:
    """The name of the launcher that started this rank (not d5)."""
    from d5core.lv3.launch import detect_launcher

    found = detect_launcher()
    return str((found or {}).get("launcher") or "unknown launcher")


def _check_store_on_rank_0(ctx: Any, db: str | Path | None) -> None:
    """Rank 0 opens the store and checks it can be written, before the sweep; every rank
    hears the verdict (a broadcast), so that a refused store ends every rank at once:
    rank 0 with the one-line usage error, the others with exit 2 and no message."""
    import numpy as np

    from d5core.results.store import ResultsStore

    refused: UsageError | None = None
    if ctx.rank == 0:
        try:
            with ResultsStore.open(db) as store:
                store.require_writable()
        except UsageError as exc:
            refused = exc
    verdict = np.array([0.0 if refused is None else 1.0])
    if ctx.size > 1:
        verdict = np.asarray(ctx.communicator().broadcast(verdict, 0))
    if refused is not None:
        raise refused
    if verdict[0] != 0.0:
        raise SystemExit(2)


def run_launched_rank(
    ctx: Any,
    settings: Any,
    rank_out: Path | None,
    *,
    communicator: str | None,
    link_peak: float | None,
    tags: Sequence[str],
    db: str | Path | None,
) -> CommRun | None:
    """One rank of a sweep, in place under a launcher
    (:func:`~d5core.lv3.comm_sweep.run_rank`).

    Under d5's launcher (``rank_out`` given) rank 0 hands its results back through
    ``rank_out``. Under an outside launcher rank 0 stores them as one run and returns it,
    after checking, before the sweep, that the store can be written (a store that cannot
    is a usage error, and the launcher then stops the other ranks).

    :param ctx: the rank's :class:`~d5core.lv3.launch.RankContext`.
    :param communicator: the ``d5.communication`` entry (``None``: the launcher's own).
    :returns: the stored run on rank 0 under an outside launcher; ``None`` otherwise.
    """
    from d5core.lv3.comm_sweep import run_rank
    from d5core.results.store import ResultsStore

    if communicator is not None:
        ctx.communicator_name = communicator
    if rank_out is None:  # under an outside launcher rank 0 stores: check it first
        _check_store_on_rank_0(ctx, db)
    result = run_rank(ctx, settings, rank_out)
    if result is None or rank_out is not None:
        return None
    with ResultsStore.open(db) as store:
        return store_comm_run(store, [result], settings, communicator=result["communicator"],
                              link_peak=link_peak, tags=tags,
                              launcher=_outside_launcher())  # fmt: skip
