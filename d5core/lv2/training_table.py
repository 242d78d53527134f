"""Training runs side by side: one row per recipe (hash) and value of one setting.

:func:`training_table` groups stored ``train`` runs by a recipe setting (``--by``:
executor, optimizer, batch size, ...) and by recipe hash, so runs of different recipes
never share a row, and summarises each row with one value per run: time to accuracy as
MLPerf counts it (a run that missed the target is infinitely slow), final test accuracy
and throughput; for language models (runs that store perplexity) also time to
perplexity and final validation perplexity. Failed and unfinished runs are counted,
not summarised. Runs measured on a busy machine are counted and marked
(:func:`d5core.results.load.was_busy`): their times may include waiting for a core.
``d5 results table`` renders the rows; its ``--json`` prints them (``docs/json.md``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table

from d5core.cli.output import console
from d5core.errors import UsageError
from d5core.results.load import BUSY_LEGEND, BUSY_MARK, was_busy
from d5core.results.store import ResultsStore, RunRecord
from d5core.trace.marks import TRACED_LEGEND, TRACED_MARK, trace_level

__all__ = [
    "by_keys",
    "check_by",
    "mixed_recipe_warnings",
    "print_training_table",
    "training_table",
]

#: Statuses whose runs trained to the end (diverged: a result, not a crash); they are
#: summarised. Failed, incomplete and running runs are counted and shown, not summarised.
_SUMMARISED = ("complete", "diverged")
_EXTRA_BY_KEYS = ("recipe",)


def by_keys() -> list[str]:
    """The keys ``--by`` accepts: every recipe setting, and the recipe itself."""
    from d5core.levels.training import RECIPE_KEYS as ALLOWED_KEYS

    return sorted({*ALLOWED_KEYS, *_EXTRA_BY_KEYS})


def check_by(group_by: str) -> None:
    """:raises UsageError: unless ``group_by`` is one of :func:`by_keys`."""
    keys = by_keys()
    if group_by not in keys:
        raise UsageError(f"--by {group_by!r} is not a recipe setting; use one of {', '.join(keys)}")


def _setting(run: RunRecord, key: str) -> str:
    """A run's value for ``key``: from its recipe settings, else from its config."""
    config = run.config or {}
    settings = config.get("settings") or {}
    value = settings.get(key, config.get(key))
    return "-" if value is None else str(value)


def _run_values(store: ResultsStore, run: RunRecord) -> dict[str, float | None]:
    """One run's time to accuracy, final test accuracy and throughput (``None``: absent).

    Throughput is the run's own samples/s over the whole run, else the median of its
    per-step rates: one value per run.
    """
    from d5core.lv2.summaries import true_median

    values = {m.name: m.value for m in store.metrics(run.id) if not m.labels}
    rate = values.get("throughput")
    if rate is None or not math.isfinite(rate):
        steps = [
            v
            for m in store.measurements(run.id)
            if m.metric == "throughput"
            for v in store.samples(m.id)
            if math.isfinite(v)
        ]
        rate = true_median(steps) if steps else None

    def finite(name: str) -> float | None:
        value = values.get(name)
        return value if value is not None and math.isfinite(value) else None

    return {
        "time_to_accuracy": finite("time_to_accuracy"),
        "final_test_accuracy": finite("final_test_accuracy"),
        "throughput": rate,
        "time_to_perplexity": finite("time_to_perplexity"),
        "final_perplexity": finite("final_perplexity"),
    }


def _has_target(run: RunRecord, key: str = "target_accuracy") -> bool:
    settings = (run.config or {}).get("settings") or {}
    return settings.get(key) is not None


def _perplexity_cells(
    runs: list[RunRecord], values: list[dict[str, float | None]]
) -> dict[str, Any]:
    """A language model's row: time to perplexity (as time to accuracy) and the final
    validation perplexity; nothing for rows whose runs have no target perplexity and
    stored no perplexity."""
    from d5core.lv2.summaries import range_of, time_to_accuracy_summary

    ttps = [v["time_to_perplexity"] for v in values]
    ppls = [v["final_perplexity"] for v in values if v["final_perplexity"] is not None]
    with_target = any(_has_target(r, "target_perplexity") for r in runs)
    if not with_target and not ppls:
        return {}
    return {
        "reached_target_perplexity": sum(1 for t in ttps if t is not None),
        "time_to_perplexity": _json_safe(time_to_accuracy_summary(ttps))
        if with_target and ttps
        else None,
        "final_perplexity": range_of(ppls) if ppls else None,
    }


def _table_row(
    store: ResultsStore, group_by: str, key: tuple[str, str | None], members: list[RunRecord]
) -> dict[str, Any]:
    """One row: the runs of one recipe hash with one value of ``group_by``."""
    from d5core.lv2.summaries import across_runs, range_of, time_to_accuracy_summary

    statuses: dict[str, int] = {}
    for run in members:
        statuses[run.status] = statuses.get(run.status, 0) + 1
    summarised = [r for r in members if r.status in _SUMMARISED]
    values = [_run_values(store, r) for r in summarised]
    ttas = [v["time_to_accuracy"] for v in values]
    accs = [v["final_test_accuracy"] for v in values if v["final_test_accuracy"] is not None]
    rates = [v["throughput"] for v in values if v["throughput"] is not None]
    with_target = any(_has_target(r) for r in summarised) or any(t is not None for t in ttas)
    return {
        group_by: key[0],
        "recipe": members[0].name,
        "recipe_hash": key[1],
        "runs": len(members),
        "statuses": dict(sorted(statuses.items())),
        "failed": statuses.get("failed", 0),
        "diverged": statuses.get("diverged", 0),
        "not_finished": sum(statuses.get(s, 0) for s in ("incomplete", "interrupted", "running")),
        "summarised": len(summarised),
        "reached_target": sum(1 for t in ttas if t is not None),
        "run_ids": [r.id for r in members],
        "busy_runs": [r.id for r in members if was_busy(r.load_start, r.load_end)],
        "traced_runs": [r.id for r in members if trace_level(r.config)],
        "time_to_accuracy": _json_safe(time_to_accuracy_summary(ttas))
        if with_target and ttas
        else None,
        "final_test_accuracy": range_of(accs) if accs else None,
        "throughput": across_runs(rates) if rates else None,
        **_perplexity_cells(summarised, values),
    }


def _json_safe(summary: dict[str, Any]) -> dict[str, Any]:
    """Infinite times (the target was not reached) become ``None``: strict JSON."""
    return {k: None if isinstance(v, float) and math.isinf(v) else v for k, v in summary.items()}


def training_table(
    store: ResultsStore, records: Iterable[RunRecord], group_by: str
) -> list[dict[str, Any]]:
    """One row per value of the setting ``group_by`` and recipe hash of ``records``,
    sorted by both: its runs counted by status and summarised (``docs/json.md``)."""
    check_by(group_by)
    groups: dict[tuple[str, str | None], list[RunRecord]] = {}
    for record in records:
        key = (_setting(record, group_by), record.recipe_hash)
        groups.setdefault(key, []).append(record)
    order = sorted(groups, key=lambda k: (k[0], k[1] or ""))
    return [_table_row(store, group_by, key, groups[key]) for key in order]


def mixed_recipe_warnings(group_by: str, rows: Sequence[dict[str, Any]]) -> list[str]:
    """A warning for each value of ``group_by`` whose runs come from several recipes."""
    hashes: dict[str, set[str | None]] = {}
    for row in rows:
        hashes.setdefault(row[group_by], set()).add(row["recipe_hash"])
    return [
        f"{group_by}={value} has runs of {len(found)} different recipes (recipe hashes); "
        "each recipe gets its own row"
        for value, found in sorted(hashes.items())
        if len(found) > 1
    ]


def print_training_table(
    store: ResultsStore, runs: Sequence[RunRecord], *, by: str, as_json: bool
) -> None:
    """``d5 results table --kind train``: the training table of ``runs`` grouped by the
    setting ``by``, with the environment legend (the level-2 entry of the
    ``d5_results_tables`` hook)."""
    import click

    from d5core.cli.output import print_json
    from d5core.report.legend import print_legend
    from d5core.results.environments import environment_legend

    check_by(by)
    out = training_table(store, runs, by)
    legend = environment_legend(store, runs)
    for row in out:
        row.update(legend.row_json(legend.tag_of(r) for r in row["run_ids"]))
    for warning in mixed_recipe_warnings(by, out):
        click.echo(f"d5: warning: {warning}", err=True)
    busy = [run_id for row in out for run_id in row["busy_runs"]]
    if as_json:
        print_json(out)
        if busy:
            click.echo(f"d5: warning: rows marked busy (run {', '.join(busy)}): {BUSY_LEGEND}",
                       err=True)  # fmt: skip
    else:
        _print_table(by, out)
        if busy:
            console().print(BUSY_LEGEND, markup=False, highlight=False)
        if any(row["traced_runs"] for row in out):
            console().print(TRACED_LEGEND, markup=False, highlight=False)
    print_legend(legend, facts=not as_json)


def _time(value: float | None) -> str:
    return "not reached" if value is None else f"{value:.4g}"


def _runs_cell(row: Mapping[str, Any]) -> str:
    shown = [
        f"{row[k]} {label}"
        for k, label in (("failed", "failed"), ("diverged", "diverged"),
                         ("not_finished", "unfinished"))
        if row[k]
    ]  # fmt: skip
    if row.get("busy_runs"):
        shown.append(f"{len(row['busy_runs'])} {BUSY_MARK}")
    if row.get("traced_runs"):
        shown.append(f"{len(row['traced_runs'])} {TRACED_MARK}")
    return f"{row['runs']}" + (f" ({', '.join(shown)})" if shown else "")


def _tta_cells(tta: Mapping[str, Any] | None) -> tuple[str, str, str]:
    if tta is None:
        return "-", "-", "-"
    reached = f"{tta['reached']}/{tta['runs']}"
    interval = f"{_time(tta['median'])} [{_time(tta['ci_low'])}, {_time(tta['ci_high'])}]"
    olympic = "-" if tta["olympic_mean"] is None else f"{tta['olympic_mean']:.4g}"
    return reached, interval, olympic


def _print_table(group_by: str, out: Sequence[Mapping[str, Any]]) -> None:
    table = Table(
        title=f"training runs by {group_by} and recipe",
        title_justify="left",
        caption="one value per run. Time to accuracy over the complete and diverged runs "
        "(MLPerf): a run that did not reach the target counts as infinitely slow. Failed "
        "and unfinished runs are counted, not summarised.",
        caption_justify="left",
    )
    columns: tuple[str, ...] = (
        group_by,
        "recipe",
        "runs",
        "reached",
        "time to accuracy (s), median [95% CI]",
        "olympic mean (s)",
        "final test accuracy, median \\[range]",
        "samples/s, median [95% CI]",
        "env",
    )
    # language models: time to perplexity and final perplexity, when a row has them
    perplexity = any("final_perplexity" in row for row in out)
    if perplexity:
        columns = (
            *columns[:-1],
            "reached perplexity",
            "time to perplexity (s), median [95% CI]",
            "final perplexity, median \\[range]",
            columns[-1],
        )
    for column in columns:
        table.add_column(column, justify="right")
    for row in out:
        acc, thr = row["final_test_accuracy"], row["throughput"]
        cells = [
            escape(str(row[group_by])),
            escape(f"{row['recipe']} {(row['recipe_hash'] or '-')[:8]}"),
            _runs_cell(row),
            *_tta_cells(row["time_to_accuracy"]),
            f"{acc['median']:.4g} [{acc['min']:.4g}, {acc['max']:.4g}]" if acc else "-",
            f"{thr['median']:,.0f} [{thr['ci_low']:,.0f}, {thr['ci_high']:,.0f}]" if thr else "-",
        ]
        if perplexity:
            reached, interval, _ = _tta_cells(row.get("time_to_perplexity"))
            ppl = row.get("final_perplexity")
            cells += [
                reached if "reached_target_perplexity" in row else "-",
                interval,
                f"{ppl['median']:.4g} [{ppl['min']:.4g}, {ppl['max']:.4g}]" if ppl else "-",
            ]
        table.add_row(*cells, " ".join(row.get("environments", [])) or "-")
    console().print(table)
