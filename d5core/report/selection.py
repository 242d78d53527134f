"""Which stored runs a report draws: run ids, or filters (``--last``, ``--kind``, ``--tag``).

Run ids and filters do not mix: ids name exactly the runs wanted, filters pick them from
the whole database. Filters combine: ``--last 5 --kind op --tag nightly`` is the five
newest operator runs tagged ``nightly``. Every way of asking that selects nothing, or
names something that does not exist, is a :class:`~d5core.errors.UsageError` of one line
saying what was asked and what the database holds.
"""

from __future__ import annotations

from collections.abc import Sequence

from d5core.errors import UsageError
from d5core.levels.report import level_of
from d5core.results.store import ResultsStore, RunRecord

__all__ = ["DEFAULT_LAST", "REPORT_KINDS", "describe_selection", "select_runs"]

#: What ``--kind`` accepts, and the stored run kinds each reads.
REPORT_KINDS: dict[str, tuple[str, ...]] = {
    "op": ("op",),
    "net": ("net",),
    "train": ("train",),
    "dist": ("train", "comm", "dist"),
    "inference": ("inference",),
    "audit": ("audit",),
    "algorithms": ("algorithm-trial",),
}

#: How many of the newest runs a report draws when neither ids nor filters are given.
DEFAULT_LAST = 20


def _of_kind(run: RunRecord, kind: str) -> bool:
    """Whether ``run`` belongs to ``--kind kind``: ``train`` is single-process training,
    ``dist`` is distributed training and communication runs."""
    if kind == "train":
        return run.kind == "train" and not run.config.get("distributed")
    if kind == "dist":
        return level_of(run) == "distributed"
    return run.kind in REPORT_KINDS[kind]


def describe_selection(
    run_ids: Sequence[str] = (),
    last: int | None = None,
    kind: str | None = None,
    tag: str | None = None,
) -> str:
    """The selection as the user would type it (``--last 20 --kind op``), for the report's
    header and for error messages."""
    if run_ids:
        return " ".join(run_ids)
    parts = []
    if last is not None:
        parts.append(f"--last {last}")
    if kind is not None:
        parts.append(f"--kind {kind}")
    if tag is not None:
        parts.append(f"--tag {tag!r}" if (" " in tag or "'" in tag) else f"--tag {tag}")
    return " ".join(parts) if parts else f"--last {DEFAULT_LAST} (the default)"


def _check_filters(last: int | None, kind: str | None) -> None:
    if last is not None and last < 1:
        raise UsageError(
            f"--last must be at least 1, got {last}; give how many newest runs to draw"
        )
    if kind is not None and kind not in REPORT_KINDS:
        raise UsageError(
            f"unknown --kind {kind!r}; use one of {', '.join(REPORT_KINDS)} "
            "(dist: distributed training and communication runs; inference: LoadGen "
            "scenarios of d5 bench net --scenario; algorithms: the trials of d5 bench algorithms)"
        )


def _empty(store: ResultsStore, asked: str, tag: str | None) -> UsageError:
    """The error for a selection that found nothing, saying what the database holds."""
    total = len(store.list_runs())
    if total == 0:
        return UsageError(f"no runs in {store.location}; run a benchmark first, or pass --db PATH")
    held = f"{store.location} holds {total} run{'s' if total != 1 else ''}"
    if tag is not None:
        tags = store.tag_names()
        if tag not in tags:
            known = ", ".join(sorted(tags)) if tags else "none"
            return UsageError(f"no run is tagged {tag!r} ({held}; tags: {known})")
    return UsageError(f"no run matches '{asked}' ({held}); widen the selection")


def select_runs(
    store: ResultsStore,
    run_ids: Sequence[str] = (),
    last: int | None = None,
    kind: str | None = None,
    tag: str | None = None,
) -> list[RunRecord]:
    """The runs a report draws, oldest first.

    :param run_ids: run ids or unique prefixes of them (as ``d5 results show`` takes
        them); each run once, whatever the order given.
    :param last: the newest ``last`` runs that pass the other filters.
    :param kind: ``op``, ``net``, ``train`` (single-process training) or ``dist``
        (distributed training and communication runs); see :data:`REPORT_KINDS`.
    :param tag: only runs carrying this tag.
    :raises UsageError: for an unknown or ambiguous run id, ids together with filters,
        ``last`` below 1, an unknown kind, or a selection that finds no run.

    With neither ids nor filters, the newest :data:`DEFAULT_LAST` runs are drawn.
    """
    if run_ids:
        if last is not None or kind is not None or tag is not None:
            raise UsageError(
                "give run ids or filters (--last, --kind, --tag), not both; "
                "ids name the runs exactly"
            )
        found: dict[str, RunRecord] = {}
        for run_id in run_ids:
            record = store.get_run(run_id)
            found.setdefault(record.id, record)
        return sorted(found.values(), key=lambda r: r.created)
    _check_filters(last, kind)
    asked = describe_selection(run_ids, last, kind, tag)
    if last is None and kind is None and tag is None:
        last = DEFAULT_LAST
    if kind is None:
        newest = store.list_runs(limit=last, tag=tag)
    else:
        # the store knows run kinds; --kind train and dist also read the config
        newest = [
            run
            for stored_kind in REPORT_KINDS[kind]
            for run in store.list_runs(kind=stored_kind, tag=tag)
            if _of_kind(run, kind)
        ]
        newest.sort(key=lambda r: r.created, reverse=True)
        if last is not None:
            newest = newest[:last]
    if not newest:
        raise _empty(store, asked, tag)
    return newest[::-1]
