"""Moving runs between results stores: merging stores, and the JSON Lines transfer file.

A campaign on a cluster leaves one SQLite file per job, or a team keeps a PostgreSQL store
and a laptop its own file: :func:`merge_stores` copies the finished runs of any number of
stores into one. Where no connection reaches (another site, an air-gapped machine),
:func:`write_jsonl` writes runs to a JSON Lines file, one ``"d5-run/1"`` transfer document
(:meth:`d5core.results.store.ResultsStore.export_run`) a line, and :func:`import_jsonl`
reads such files into a store.

A run is identified by its run id and its environment's fingerprint, both part of its
transfer document. A run the destination does not hold is copied as it is (same id,
times, status, samples, artifacts) in one transaction. One it holds with identical
content (the canonical JSON of both transfer documents, which carry no local ids) is
"already there": nothing is written, so merging twice changes nothing. One it holds with
different content is a conflict: reported with the keys that differ and left out, while
the other runs are copied. A run still ``running`` is skipped (it is not finished;
merge again once it is).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TextIO
from urllib.parse import urlsplit

from d5core.errors import UsageError
from d5core.results.paths import is_db_url
from d5core.results.run_documents import RUN_FORMAT
from d5core.results.store import ResultsStore, read_store
from d5core.teamstore.documents import check_run_document

if TYPE_CHECKING:
    from d5core.plugins import PluginManager

__all__ = [
    "FORMAT",
    "SHOWN_DIFFERENCES",
    "Conflict",
    "MergeReport",
    "SourceReport",
    "Written",
    "canonical_text",
    "differences",
    "import_documents",
    "import_jsonl",
    "iter_jsonl",
    "merge_stores",
    "read_jsonl",
    "write_jsonl",
]

#: The format of a transfer document, the first key of every one.
FORMAT = RUN_FORMAT
#: How many differing keys a conflict names at most.
SHOWN_DIFFERENCES = 5

#: A store to open: an SQLite file or a ``postgresql://`` URL.
Target = str | os.PathLike[str]


# -- reports -------------------------------------------------------------------------


@dataclass(frozen=True)
class Conflict:
    """A run the destination holds with different content: left out."""

    run_id: str
    #: The first keys of the transfer document that differ (at most
    #: :data:`SHOWN_DIFFERENCES`), as paths: ``run.status``, ``measurements[0].samples``.
    differences: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        """The conflict as plain JSON types."""
        return {"run_id": self.run_id, "differences": list(self.differences)}


@dataclass
class SourceReport:
    """What one source (a store, or a JSON Lines file) gave the destination."""

    #: The source as messages name it: a file path, or a URL without its password.
    source: str
    #: Runs written to the destination.
    copied: int = 0
    #: Runs the destination already held with identical content (nothing written).
    already_there: int = 0
    #: Runs the destination holds with different content (left out).
    conflicts: list[Conflict] = field(default_factory=list)
    #: The ids of the runs skipped because they are still ``running``.
    running: list[str] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """``copied``, ``already_there``, ``conflicts`` and ``skipped_running``."""
        return {
            "copied": self.copied,
            "already_there": self.already_there,
            "conflicts": len(self.conflicts),
            "skipped_running": len(self.running),
        }

    def to_json(self) -> dict[str, Any]:
        """The counts with the conflicts and the skipped runs, as plain JSON types."""
        return {
            "source": self.source,
            **self.counts(),
            "conflict_runs": [c.to_json() for c in self.conflicts],
            "running_runs": list(self.running),
        }


@dataclass
class MergeReport:
    """What :func:`merge_stores` or :func:`import_jsonl` did, source by source."""

    #: The destination store, as messages name it.
    destination: str
    sources: list[SourceReport] = field(default_factory=list)

    def totals(self) -> dict[str, int]:
        """The counts summed over the sources."""
        total = dict.fromkeys(("copied", "already_there", "conflicts", "skipped_running"), 0)
        for source in self.sources:
            for key, value in source.counts().items():
                total[key] += value
        return total

    def conflicts(self) -> list[tuple[str, Conflict]]:
        """Every conflict with the source it came from, in order."""
        return [(s.source, c) for s in self.sources for c in s.conflicts]

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON types (``d5 results merge --json``'s data)."""
        return {
            "destination": self.destination,
            "sources": [s.to_json() for s in self.sources],
            "total": self.totals(),
        }


# -- comparing documents ------------------------------------------------------------


def canonical_text(document: Mapping[str, Any]) -> str:
    """``document`` as canonical JSON: sorted keys, no blanks; equal content, equal text."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"), allow_nan=True)


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, allow_nan=True) == json.dumps(
        b, sort_keys=True, allow_nan=True
    )


def _scalar(value: Any) -> bool:
    return not isinstance(value, (Mapping, list, tuple))


def differences(
    a: Mapping[str, Any], b: Mapping[str, Any], limit: int = SHOWN_DIFFERENCES
) -> list[str]:
    """The first ``limit`` keys where two transfer documents differ, as paths.

    Objects are compared key by key (``run.status``); lists of objects of the same length
    item by item (``measurements[0].unit``); any other list as a whole
    (``measurements[0].samples``, ``run.tags``).
    """
    found: list[str] = []

    def walk(x: Any, y: Any, path: str) -> None:
        if len(found) >= limit:
            return
        if isinstance(x, Mapping) and isinstance(y, Mapping):
            for key in [*x, *(k for k in y if k not in x)]:
                where = f"{path}.{key}" if path else str(key)
                if key not in x or key not in y:
                    if len(found) < limit:
                        found.append(where)
                else:
                    walk(x[key], y[key], where)
            return
        if (
            isinstance(x, list)
            and isinstance(y, list)
            and len(x) == len(y)
            and not all(_scalar(v) for v in [*x, *y])
        ):
            for i, (u, v) in enumerate(zip(x, y, strict=True)):
                walk(u, v, f"{path}[{i}]")
            return
        if not _same(x, y) and len(found) < limit:
            found.append(path or "(the document)")

    walk(a, b, "")
    return found


# -- copying -------------------------------------------------------------------------


def _copy(document: Mapping[str, Any], dest: ResultsStore, report: SourceReport) -> None:
    """Give ``dest`` one finished run's ``document``, counting what happened in ``report``."""
    run = document["run"]
    run_id = str(run["run_id"])
    if run.get("status") == "running":
        report.running.append(run_id)
        return
    if dest.import_run(check_run_document(dict(document))):
        report.copied += 1
        return
    held = dest.export_run(run_id)
    if canonical_text(held) == canonical_text(document):
        report.already_there += 1
    else:
        report.conflicts.append(Conflict(run_id, tuple(differences(document, held))))


def import_documents(
    documents: Iterable[Mapping[str, Any]], dest: ResultsStore, source: str
) -> SourceReport:
    """Give ``dest`` each run of ``documents`` (transfer documents, from ``source``):
    copied, already there, a conflict, or skipped (running)."""
    report = SourceReport(source)
    for document in documents:
        _copy(document, dest, report)
    return report


def _identity(store: ResultsStore) -> str:
    """What tells two open stores apart: the real path of a file; the host, port and
    database of a URL (``postgres://`` or ``postgresql://``, the port 5432 when unsaid)."""
    if store.backend == "sqlite":
        return "sqlite:" + os.path.realpath(store.location)
    parts = urlsplit(store.location)
    host = (parts.hostname or "").lower()
    return f"{store.backend}://{host}:{parts.port or 5432}/{parts.path.lstrip('/')}"


def _open_source(target: Target) -> ResultsStore:
    """The store to merge from, which must exist (never created)."""
    text = os.fspath(target)
    if not is_db_url(text) and not Path(text).expanduser().exists():
        raise UsageError(
            f"no results database at {text} to merge from; give the SQLite file of a d5 "
            "store or a postgresql://user@host:port/dbname URL"
        )
    return read_store(target)


def merge_stores(
    sources: Sequence[Target],
    dest: Target,
    *,
    manager: PluginManager | None = None,
) -> MergeReport:
    """Copy every finished run of each store of ``sources`` into the store ``dest``.

    Every source is opened first (:func:`~d5core.results.store.read_store`: it must exist
    and be a d5 store); only then is ``dest`` opened, and created when it does not exist.
    Runs are copied oldest first; see the module's documentation for what is copied,
    already there, a conflict or skipped.

    :param manager: the plugin manager the destination store is opened with.
    :raises UsageError: for a missing or foreign source, no source, or ``dest`` being
        one of the sources; nothing is written then.
    """
    if not sources:
        raise UsageError("give at least one store to merge from")
    with ExitStack() as stack:
        opened = [stack.enter_context(_open_source(s)) for s in sources]
        target = stack.enter_context(ResultsStore.open(dest, manager=manager))
        for source in opened:
            if _identity(source) == _identity(target):
                raise UsageError(
                    f"{target.location} is both a source and the destination of the merge; "
                    "give --into another store"
                )
        report = MergeReport(target.location)
        for source in opened:
            part = SourceReport(source.location)
            for record in reversed(source.list_runs()):
                if record.status == "running":
                    part.running.append(record.id)
                    continue
                _copy(source.export_run(record.id), target, part)
            report.sources.append(part)
    return report


# -- JSON Lines ----------------------------------------------------------------------


class Written(NamedTuple):
    """What :func:`write_jsonl` wrote."""

    runs: int
    samples: int
    artifacts: int


def _line(document: Mapping[str, Any]) -> str:
    # ASCII whatever the stream's encoding; Infinity stays Infinity (Python's json reads
    # it back), and NaN is already null in the document.
    return json.dumps(document, separators=(",", ":"), ensure_ascii=True, allow_nan=True)


def write_jsonl(store: ResultsStore, run_ids: Iterable[str], out: TextIO) -> Written:
    """Write each run of ``run_ids`` (ids or unique prefixes) as one line of ``out``: its
    ``"d5-run/1"`` transfer document, with samples and artifacts."""
    runs = samples = artifacts = 0
    for run_id in run_ids:
        document = store.export_run(run_id)
        out.write(_line(document) + "\n")
        runs += 1
        samples += sum(len(m.get("samples") or ()) for m in document["measurements"])
        artifacts += len(document.get("artifacts") or ())
    return Written(runs, samples, artifacts)


def _lines(source: Target | TextIO) -> tuple[str, Iterator[str], ExitStack]:
    """The name of ``source``, its lines, and what closes it."""
    stack = ExitStack()
    if not isinstance(source, (str, os.PathLike)):
        return _name(source), iter(source), stack
    path = Path(os.fspath(source))
    try:
        stream = stack.enter_context(path.open(encoding="utf-8", newline=None))
    except FileNotFoundError:
        raise UsageError(f"no file {path}; give a JSON Lines file 'd5 results export "
                         "--format jsonl' wrote") from None  # fmt: skip
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return str(path), iter(stream), stack


def iter_jsonl(source: Target | TextIO) -> Iterator[dict[str, Any]]:
    """The transfer documents of a JSON Lines file (a path, or an open text stream), one
    by one, each checked as :meth:`~d5core.results.store.ResultsStore.import_run` checks
    it (:func:`~d5core.teamstore.documents.check_run_document`). Blank lines are
    skipped.

    :raises UsageError: naming the file and the number of the first bad line.
    """
    name, lines, stack = _lines(source)
    with stack:
        number = 0
        try:
            for number, text in enumerate(lines, start=1):
                if not text.strip():
                    continue
                where = f"{name} line {number}"
                try:
                    document = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise UsageError(
                        f"{where} is not JSON ({exc.msg} at column {exc.colno}); each line "
                        f"must be one {FORMAT} document ('d5 results export --format jsonl')"
                    ) from None
                try:
                    check_run_document(document)
                except UsageError as exc:
                    raise UsageError(f"{where}: {exc}") from None
                yield document
        except UnicodeDecodeError as exc:
            raise UsageError(
                f"{name} line {number + 1} is not UTF-8 text ({exc.reason}); give a JSON "
                "Lines file 'd5 results export --format jsonl' wrote"
            ) from None


def read_jsonl(source: Target | TextIO) -> list[dict[str, Any]]:
    """Every transfer document of a JSON Lines file (a path, or an open text stream),
    all read and checked before any is returned (see :func:`iter_jsonl`).

    :raises UsageError: naming the file and the number of the first bad line.
    """
    return list(iter_jsonl(source))


def import_jsonl(
    files: Sequence[Target | TextIO],
    dest: Target | ResultsStore | None,
    *,
    manager: PluginManager | None = None,
) -> MergeReport:
    """Import the runs of JSON Lines files into ``dest`` (an open store, or one to open,
    created when missing; ``None``: the default store), file by file.

    Every file is read and checked first, to its end: a bad line in any of them is a
    :class:`UsageError`, and nothing is written (the destination is not even opened).
    Then each run is imported in one transaction, as :func:`merge_stores` copies runs.
    Files are read twice rather than held in memory; a stream is read once, into memory.
    """
    if not files:
        raise UsageError("give at least one JSON Lines file to import")
    held: dict[int, list[dict[str, Any]]] = {}
    for i, source in enumerate(files):
        if isinstance(source, (str, os.PathLike)):
            for _ in iter_jsonl(source):
                pass
        else:
            held[i] = read_jsonl(source)
    with ExitStack() as stack:
        if isinstance(dest, ResultsStore):
            target = dest
        else:
            target = stack.enter_context(ResultsStore.open(dest, manager=manager))
        report = MergeReport(target.location)
        for i, source in enumerate(files):
            documents = held[i] if i in held else iter_jsonl(source)
            report.sources.append(import_documents(documents, target, _name(source)))
    return report


def _name(source: Target | TextIO) -> str:
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    return str(getattr(source, "name", "<stream>"))
