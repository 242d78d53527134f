"""``d5 trace RUN``: a traced run's timeline, written out for Perfetto, or summed up.

Every rank's share of a distributed run is merged into the one file. The file is never
written over an existing one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.errors import UsageError
from d5core.results.store import read_store
from d5core.trace.document import is_trace_artifact, merge_documents, read_document, step_events
from d5core.trace.summary import TopOperators, top_operators

__all__ = ["trace"]


@click.command("trace")
@click.argument("run")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the timeline (Chrome trace events, every rank merged) to this file; "
    "open it in Perfetto (ui.perfetto.dev) or chrome://tracing. An existing file is "
    "never replaced.",
)
@click.option(
    "--top",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help="Print the N operators that took the most time in the traced steps, with "
    "their share of the step.",
)
@click.option("--subject", default=None, help="With --top: only the steps of this executor.")
@json_option
@db_option
def trace(
    run: str,
    output: Path | None,
    top: int | None,
    subject: str | None,
    as_json: bool,
    db: str | Path | None,
) -> None:
    """Export or summarise the trace kept with RUN (a run made with --trace LEVEL).

    Without -o or --top, say what the trace holds.
    """
    if output is not None and output.exists():
        raise UsageError(f"{output} exists: give -o a new file (d5 never replaces one)")
    with read_store(db) as store:
        record = store.get_run(run)
        names = [n for n in store.artifact_names(record.id) if is_trace_artifact(n)]
        if not names:
            raise UsageError(
                f"run {record.id} has no trace: run it again with --trace step|framework|full"
            )
        documents = [read_document(store.read_artifact(record.id, n), n) for n in names]
        measured = _measured_steps(store, record)
    document = merge_documents(documents)
    subjects = _subjects(document, subject)
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(document, separators=(",", ":")))
    tops = [top_operators(document, s, measured.get(s or "")) for s in subjects] if top else []
    if as_json:
        print_json({
            "run_id": record.id,
            "output": None if output is None else str(output),
            "level": document["otherData"].get("level"),
            "events": len(document["traceEvents"]),
            "profilers": document["otherData"].get("profilers", []),
            "notes": document["otherData"].get("notes", []),
            "top": [t.to_json(top or 0) for t in tops],
        })  # fmt: skip
        return
    out = console()
    _describe(record.id, document, output)
    for t in tops:
        out.print(_top_table(t, top or 0))
        for note in t.notes:
            click.echo(f"note: {note}")


def _subjects(document: dict[str, Any], wanted: str | None) -> list[str | None]:
    """The executors whose steps the trace holds (``[None]`` when its steps name none)."""
    found = list(dict.fromkeys((s.get("args") or {}).get("subject") for s in step_events(document)))
    if wanted is not None:
        if wanted not in found:
            shown = ", ".join(str(s) for s in found if s) or "none"
            raise UsageError(f"the trace has no steps of {wanted!r} (it has: {shown})")
        return [wanted]
    return found or [None]


def _measured_steps(store: Any, record: Any) -> dict[str, float]:
    """The untraced step time the run measured, by executor or backend (seconds)."""
    found: dict[str, float] = {}
    for m in store.measurements(record.id):
        if m.metric not in ("time", "step_time") or not m.summary:
            continue
        subject = m.labels.get("executor") or m.labels.get("backend") or ""
        median = m.summary.get("median")
        if median and subject not in found:
            found[str(subject)] = float(median)
    return found


def _describe(run_id: str, document: dict[str, Any], output: Path | None) -> None:
    other = document["otherData"]
    events = document["traceEvents"]
    processes = {e["pid"] for e in events if "pid" in e}
    profilers = ", ".join(other.get("profilers") or []) or "none"
    click.echo(
        f"run {run_id}: trace at level {other.get('level')}, {len(events)} events, "
        f"{len(processes)} process track(s), {len(step_events(document))} steps; "
        f"framework profilers: {profilers}"
    )
    for note in other.get("notes") or []:
        click.echo(f"note: {note}")
    if output is not None:
        click.echo(f"wrote {output}: open it in Perfetto (ui.perfetto.dev) or chrome://tracing")


def _top_table(t: TopOperators, top: int) -> Table:
    who = f" of {t.subject}" if t.subject else ""
    measured = f", measured untraced {t.measured_step_s * 1e3:.3g} ms" if t.measured_step_s else ""
    table = Table(
        title=f"top {top} operators{who}: {t.steps} traced steps, median "
        f"{t.step_median_us / 1e3:.3g} ms{measured}",
        title_justify="left",
    )
    for column in ("operator", "source", "calls", "self time / step", "share of step"):
        table.add_column(column, justify="left" if column in ("operator", "source") else "right")
    steps = max(t.steps, 1)
    for row in t.rows[:top]:
        share = row.self_us / t.step_total_us if t.step_total_us else 0.0
        thread = "" if row.on_step_thread else " (other thread)"
        table.add_row(
            escape(row.name), escape(row.source + thread), str(row.calls),
            f"{row.self_us / steps / 1e3:.3g} ms", f"{100 * share:.1f}%",
        )  # fmt: skip
    outside = t.step_total_us - t.on_thread_us
    table.add_section()
    table.add_row(
        "in no operator (d5, Python)", "", "", f"{outside / steps / 1e3:.3g} ms",
        f"{100 * outside / t.step_total_us:.1f}%" if t.step_total_us else "-",
    )  # fmt: skip
    table.caption = (
        f"operators on the step's thread: {t.on_thread_us / steps / 1e3:.3g} ms a step "
        f"({100 * t.on_thread_us / t.step_total_us if t.step_total_us else 0:.1f}% of it); "
        f"on other threads: {t.off_thread_us / steps / 1e3:.3g} ms"
    )
    return table
