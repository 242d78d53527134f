"""The report's audit section: one grid of the newest ``d5 audit`` runs, a row per
audited backend (or executor) and a column per check, each cell PASS or FAIL.

An audit's figures are its verdicts; the timings it took only serve them, so the grid
draws the verdicts and, for the caching check, the ratio of repeated-input to
fresh-input medians it was judged on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from d5core.levels.report import ReportFigure, ReportRun
from d5core.report.style import machines_note, new_figure, short_label

__all__ = ["MAX_ROWS", "figures"]

#: Rows the grid shows at most (the newest audits first).
MAX_ROWS = 24
_CHECKS = ("accuracy while timed", "no caching", "seed variation")


def _rows(runs: Sequence[ReportRun]) -> tuple[list[dict[str, Any]], list[ReportRun]]:
    rows: list[dict[str, Any]] = []
    used: list[ReportRun] = []
    for run in sorted(runs, key=lambda r: r.record.created, reverse=True):
        if run.kind != "audit":
            continue
        checks = run.config.get("checks") or []
        subjects: dict[str, dict[str, Any]] = {}
        for c in checks:
            row = subjects.setdefault(
                str(c.get("subject")),
                {"run": run.id, "title": run.record.name, "subject": str(c.get("subject")),
                 "checks": {}, "ratio": None},
            )  # fmt: skip
            measured = not str(c.get("line") or "").startswith("not measured")
            row["checks"][str(c.get("check"))] = bool(c.get("passed")) if measured else None
            data = c.get("data") or {}
            if c.get("check") == "no caching" and isinstance(data.get("ratio"), (int, float)):
                row["ratio"] = float(data["ratio"])
        if subjects:
            used.append(run)
        rows += list(subjects.values())
    return rows[:MAX_ROWS], used


def figures(runs: Sequence[ReportRun]) -> list[ReportFigure]:
    """The audit grid of the ``audit`` runs among ``runs``; ``[]`` when there is none."""
    rows, used = _rows(runs)
    if not rows:
        return []
    figure = new_figure(7.0, 0.9 + 0.32 * len(rows))
    ax = figure.add_subplot(1, 1, 1)
    for y, row in enumerate(rows):
        for x, check in enumerate(_CHECKS):
            passed = row["checks"].get(check)  # None: not measured (a job failed)
            color = "#cccccc" if passed is None else ("#4caf50" if passed else "#e53935")
            ax.add_patch(_cell(x, y, color))
            text = "-" if passed is None else ("PASS" if passed else "FAIL")
            if check == "no caching" and row["ratio"] is not None:
                text += f" ({row['ratio']:.2f})"
            ax.text(x + 0.5, y + 0.5, text, ha="center", va="center", fontsize=8)
    ax.set_xlim(0, len(_CHECKS))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([x + 0.5 for x in range(len(_CHECKS))], list(_CHECKS), fontsize=8)
    ax.xaxis.tick_top()
    labels = [short_label(f"{r['subject']} · {r['title']} ({r['run']})", 60) for r in rows]
    ax.set_yticks([y + 0.5 for y in range(len(rows))], labels, fontsize=7)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    data = {"rows": rows}
    return [
        ReportFigure(
            key="audit-checks",
            title="Audit tests of the timed callables",
            section="audit",
            figure=figure,
            data=data,
            runs=tuple(r.id for r in used),
            caption=(
                "Each row is a backend or executor in one d5 audit run (newest first); each "
                "column a check: accuracy while timed (the outputs of sampled timed calls "
                "equal the untimed ones), no caching (repeated inputs at most 10% faster "
                "than fresh ones; the ratio of their medians in brackets), seed variation "
                "(other seeds within the noise floor). A FAIL means the backend's timings "
                "are not to be trusted; a grey cell was not measured (a job failed)."
            ),
            notes=machines_note(used),
        )
    ]


def _cell(x: int, y: int, color: str) -> Any:
    from matplotlib.patches import Rectangle

    return Rectangle((x + 0.03, y + 0.06), 0.94, 0.88, color=color, alpha=0.8)
