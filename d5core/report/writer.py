"""Saving a report's figures and its page: inline SVG for the HTML file, PNG and PDF
copies in a folder beside it (``report.html`` -> ``report_figures/``), and the page
itself written atomically.

Saving is most of a report's cost: each format draws the whole figure again. Two things
keep it small. The layout is computed once, by the first draw (PNG), and frozen for the
others (SVG, PDF), which then only render. And with more than one figure, the figures are
saved by a pool of worker processes forked after they were drawn (where the platform
forks: Linux), so that nothing is pickled: each worker finds every figure in its copy of
the memory and returns the SVG text of those it saved.
"""

from __future__ import annotations

import io
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from d5core.errors import UsageError, one_line

if TYPE_CHECKING:
    from d5core.levels.report import ReportFigure

__all__ = [
    "FILE_FORMATS",
    "PNG_DPI",
    "SavedFigure",
    "figures_folder",
    "save_figures",
    "svg_markup",
    "write_text_atomically",
]

#: The formats of the copies written beside the page (the SVG is inline in the page).
FILE_FORMATS: tuple[str, ...] = ("png", "pdf")

#: Resolution of the PNG copies: sharp enough for slides and papers, small enough to mail.
PNG_DPI = 150

#: At most this many worker processes save figures (the report is meant to be quick on
#: a laptop; more workers than cores only compete).
MAX_JOBS = 2

_XML_DECLARATION = re.compile(r"<\?xml[^>]*\?>\s*")
_DOCTYPE = re.compile(r"<!DOCTYPE[^>\[]*(\[[^\]]*\])?\s*>\s*", re.S)
_COMMENT = re.compile(r"<!--.*?-->\s*", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)


@dataclass(frozen=True)
class SavedFigure:
    """What saving one figure gave: its inline SVG and its files, or why it failed.

    :param svg: the SVG markup to put in the page (empty when saving failed).
    :param files: format -> path of the copy, relative to the page's folder.
    :param error: one line, when the figure could not be saved.
    """

    svg: str
    files: dict[str, str]
    error: str | None = None


def figures_folder(page: Path) -> Path:
    """The folder of the PNG and PDF copies of ``page``'s figures: ``<stem>_figures``
    beside it."""
    return page.with_name(f"{page.stem}_figures")


def svg_markup(text: str) -> str:
    """SVG text as a standalone file holds it, made fit to sit inside an HTML page: the
    XML declaration, the DOCTYPE, comments and the RDF metadata block removed."""
    text = _XML_DECLARATION.sub("", text)
    text = _DOCTYPE.sub("", text)
    text = _COMMENT.sub("", text)
    text = _METADATA.sub("", text)
    return text.strip()


def _save_one(
    figure: ReportFigure, folder: Path, prefix: str, formats: Sequence[str]
) -> SavedFigure:
    """Save ``figure``: each file format, then the inline SVG, the layout computed once."""
    import matplotlib

    fig = figure.figure
    files: dict[str, str] = {}
    try:
        drawn = False
        for fmt in formats:
            path = folder / f"{figure.key}.{fmt}"
            if fmt == "pdf":
                fig.savefig(path, format=fmt, metadata={"CreationDate": None})
            else:  # fast compression: the PNG is a little larger, written twice as fast
                fig.savefig(path, format=fmt, dpi=PNG_DPI, pil_kwargs={"compress_level": 1})
            files[fmt] = f"{prefix}/{path.name}"
            if not drawn:
                fig.set_layout_engine("none")  # keep the layout the first draw made
                drawn = True
        buffer = io.StringIO()
        # Ids inside the SVG are hashes salted with this: unique per figure of the page.
        with matplotlib.rc_context({"svg.hashsalt": f"d5-{figure.key}"}):
            fig.savefig(buffer, format="svg", metadata={"Date": None})
    except Exception as exc:
        return SavedFigure("", files, one_line(exc))
    return SavedFigure(svg_markup(buffer.getvalue()), files)


# The figures a forked worker saves, by position: set in the parent before forking.
_PENDING: tuple[ReportFigure, ...] = ()
_TARGET: tuple[Path, str, tuple[str, ...]] = (Path("."), "", ())


def _save_pending(index: int) -> tuple[int, SavedFigure]:
    folder, prefix, formats = _TARGET
    return index, _save_one(_PENDING[index], folder, prefix, formats)


def _jobs_for(count: int, jobs: int | None) -> int:
    import multiprocessing
    import threading

    if "fork" not in multiprocessing.get_all_start_methods():
        return 1
    if jobs is None and threading.active_count() > 1:
        return 1  # forking a process that runs threads may copy a lock some thread holds
    wanted = min(MAX_JOBS, os.cpu_count() or 1) if jobs is None else jobs
    return max(1, min(wanted, count))


def save_figures(
    figures: Sequence[ReportFigure],
    page: Path,
    *,
    formats: Sequence[str] = FILE_FORMATS,
    jobs: int | None = None,
) -> list[SavedFigure]:
    """Save each figure as inline SVG and as the files of ``formats`` in
    :func:`figures_folder` of ``page``, in the order given.

    The folder is created when missing; copies of figures of an earlier report there that
    this one no longer draws are removed, so the folder holds this report's figures only
    (with no ``formats``, it is not touched).
    Each matplotlib figure is cleared once saved (its data and texts stay with the
    :class:`~d5core.levels.report.ReportFigure`).

    :param jobs: worker processes (``None``: up to :data:`MAX_JOBS`, one per core, none
        while this process runs other threads; 1 saves in this process).
    """
    global _PENDING, _TARGET
    unknown = [f for f in formats if f not in FILE_FORMATS]
    if unknown:
        raise UsageError(
            f"unknown figure format {unknown[0]!r}; use {' or '.join(FILE_FORMATS)} "
            "(the SVG is always inline in the page)"
        )
    folder = figures_folder(page)
    prefix = folder.name
    formats = tuple(dict.fromkeys(formats))
    if formats:  # without copies to write, the folder is left as it is
        folder.mkdir(exist_ok=True)
    count = len(figures)
    workers = _jobs_for(count, jobs)
    results: list[SavedFigure | None] = [None] * count
    if workers == 1:
        for i, figure in enumerate(figures):
            results[i] = _save_one(figure, folder, prefix, formats)
    else:
        import multiprocessing

        _PENDING, _TARGET = tuple(figures), (folder, prefix, formats)
        try:
            with multiprocessing.get_context("fork").Pool(workers) as pool:
                # the figures with the most panels first: no long one is left for the end
                order = sorted(range(count), key=lambda i: -len(figures[i].figure.axes))
                for i, saved in pool.imap_unordered(_save_pending, order):
                    results[i] = saved
        finally:
            _PENDING, _TARGET = (), (Path("."), "", ())
    for figure in figures:
        figure.figure.clear()
    kept = {Path(path).name for saved in results if saved for path in saved.files.values()}
    for old in folder.iterdir() if formats else ():
        if old.suffix.lstrip(".") in FILE_FORMATS and old.name not in kept and old.is_file():
            old.unlink()
    return [saved or SavedFigure("", {}, "not saved") for saved in results]


def write_text_atomically(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder renamed over
    it: a reader sees the old page or the new one, never half of one."""
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.chmod(temp, 0o644)
        os.replace(temp, path)
    except BaseException:
        Path(temp).unlink(missing_ok=True)
        raise
