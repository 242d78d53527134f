"""``d5 results``: list, show, export and compare the runs in the results store.

Every subcommand reads the database named by ``--db`` (else ``D5_DB``, else the per-user
default) and never writes to it, except to mark runs whose process died as
``incomplete``. ``--json`` prints machine-readable output instead of tables.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
from rich.table import Table

from d5core.cli.options import db_option, json_option
from d5core.cli.output import console, print_json
from d5core.errors import CheckFailed, UsageError
from d5core.results.store import MeasurementRecord, ResultsStore, RunRecord

__all__ = ["results"]

#: Format name and version written at the top of ``d5 results export --format json``.
EXPORT_FORMAT = "d5-results-export"
EXPORT_VERSION = 1

_STATUS_STYLE = {
    "complete": "green",
    "running": "cyan",
    "failed": "bold red",
    "diverged": "yellow",
    "incomplete": "magenta",
}
_VERDICT_STYLE = {"faster": "bold green", "slower": "bold red", "same": "dim"}
_CSV_COLUMNS = (
    "run_id",
    "run_kind",
    "run_name",
    "run_status",
    "record",
    "measurement_id",
    "metric",
    "labels",
    "unit",
    "index",
    "value",
)


def _open(db: Path | None) -> ResultsStore:
    return ResultsStore.open(db, create=False)


def _warn(message: str) -> None:
    click.echo(f"d5: warning: {message}", err=True)


# -- formatting -----------------------------------------------------------------

_TIME_SCALES = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))


def _scale(unit: str, reference: float | None) -> tuple[float, str]:
    """A factor and unit label that show ``reference`` (in ``unit``) readably."""
    if unit != "s" or reference is None or not math.isfinite(reference) or reference == 0:
        return 1.0, unit
    for factor, label in _TIME_SCALES:
        if abs(reference) >= factor:
            return factor, label
    return _TIME_SCALES[-1]


def _num(value: float | None, factor: float = 1.0) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value / factor:.4g}"


def _with_unit(value: float | None, unit: str) -> str:
    factor, label = _scale(unit, value)
    text = _num(value, factor)
    return f"{text} {label}".strip() if text != "-" else text


def _median_ci(summary: Mapping[str, Any] | None, unit: str) -> str:
    if not summary:
        return "-"
    median = summary.get("median")
    factor, label = _scale(unit, median)
    ci = f"[{_num(summary.get('ci_low'), factor)}, {_num(summary.get('ci_high'), factor)}]"
    return f"{_num(median, factor)} {ci} {label}".rstrip()


def _labels(labels: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v if isinstance(v, str) else json.dumps(v)}" for k, v in labels.items())


def _when(timestamp: str | None) -> str:
    return "-" if not timestamp else timestamp[:19].replace("T", " ")


def _duration(run: RunRecord) -> str:
    if not run.finished:
        return "-"
    from datetime import datetime

    seconds = (
        datetime.fromisoformat(run.finished) - datetime.fromisoformat(run.created)
    ).total_seconds()
    return f"{seconds:.3g} s" if seconds < 120 else f"{seconds / 60:.3g} min"


def _status(status: str) -> str:
    return f"[{_STATUS_STYLE.get(status, '')}]{status}[/]" if status in _STATUS_STYLE else status


def _lower_is_better(unit: str) -> bool:
    """Costs (times, bytes, joules) are better lower; rates (``.../s``) higher."""
    return not unit.endswith("/s")


# -- list ---------------------------------------------------------------------------


@click.group("results")
def results() -> None:
    """List, show, export and compare stored runs."""


@results.command("list")
@click.option(
    "--limit",
    "-n",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="Show at most this many runs, newest first.",
)
@click.option("--all", "show_all", is_flag=True, help="Show every run (overrides --limit).")
@click.option("--kind", default=None, help="Only runs of this kind (op, net, train, measure...).")
@json_option
@db_option
def list_runs(limit: int, show_all: bool, kind: str | None, as_json: bool, db: Path | None) -> None:
    """List stored runs, newest first."""
    with _open(db) as store:
        runs = store.list_runs(limit=None if show_all else limit, kind=kind)
        path = store.path
    if as_json:
        print_json([r.to_json() for r in runs])
        return
    if not runs:
        console().print(f"no runs in {path}" + (f" of kind {kind!r}" if kind else ""))
        return
    table = Table(title=f"d5 runs in {path}", title_justify="left")
    for column in ("id", "kind", "name", "status", "created (UTC)", "duration"):
        table.add_column(column, overflow="fold")
    for column in ("measurements", "metrics", "seed"):
        table.add_column(column, justify="right")
    table.add_column("host")
    for r in runs:
        table.add_row(
            r.id,
            r.kind,
            r.name,
            _status(r.status),
            _when(r.created),
            _duration(r),
            str(r.n_measurements),
            str(r.n_metrics),
            "-" if r.seed is None else str(r.seed),
            r.hostname or "-",
        )
    console().print(table)


# -- show ----------------------------------------------------------------------------


def _part(env: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = env.get(key)
    return value if isinstance(value, Mapping) else {}


def _environment_lines(env: Mapping[str, Any], fingerprint: str | None) -> list[str]:
    cpu, os_, py = _part(env, "cpu"), _part(env, "os"), _part(env, "python")
    packages, threads, git = _part(env, "packages"), _part(env, "threads"), _part(env, "git")
    gpus = env.get("gpus") if isinstance(env.get("gpus"), list) else []
    set_threads = ", ".join(f"{k}={v}" for k, v in threads.items() if v is not None)
    lines = [
        f"fingerprint  {fingerprint or '-'}",
        f"cpu          {cpu.get('model', '-')} ({cpu.get('logical_cores', '?')} logical, "
        f"{cpu.get('physical_cores', '?')} physical, {cpu.get('usable_cores', '?')} usable)",
        f"os           {os_.get('system', '-')} {os_.get('release', '')} {os_.get('machine', '')}",
        f"python       {py.get('implementation', '')} {py.get('version', '-')}",
        "packages     " + (", ".join(f"{k} {v}" for k, v in packages.items()) or "-"),
        f"threads      {set_threads or 'no thread variables set'}",
    ]
    if gpus:
        lines.append("gpus         " + ", ".join(str(g.get("name")) for g in gpus))
    if git:
        dirty = " (uncommitted changes)" if git.get("dirty") else ""
        lines.append(f"git          {git.get('commit', '-')}{dirty}")
    if env.get("argv"):
        lines.append("command      " + " ".join(str(a) for a in env["argv"]))
    return lines


def _measurement_table(title: str, rows: Sequence[MeasurementRecord]) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("id", "metric", "labels", "n", "median [95% CI]", "IQR", "outliers"):
        table.add_column(column, overflow="fold")
    for column in ("stability", "blocked", "stopped by"):
        table.add_column(column)
    for m in rows:
        s = m.summary or {}
        factor, label = _scale(m.unit, s.get("median"))
        iqr = f"{_num(s.get('iqr'), factor)} {label}".strip() if s else "-"
        blocked = "-" if m.blocked is None else (f"yes ×{m.block_size}" if m.blocked else "no")
        table.add_row(
            str(m.id),
            m.metric,
            _labels(m.labels),
            str(m.n),
            _median_ci(m.summary, m.unit),
            iqr,
            str(s.get("outliers", "-")),
            str(s.get("stability", "-")),
            blocked,
            m.stopped_by or "-",
        )
    return table


@results.command("show")
@click.argument("run")
@click.option("--samples", is_flag=True, help="With --json, include the raw samples.")
@json_option
@db_option
def show_run(run: str, samples: bool, as_json: bool, db: Path | None) -> None:
    """Show one run: its settings, environment, measurements and metrics.

    RUN is a run id or a prefix of one that matches a single run.
    """
    with _open(db) as store:
        record = store.get_run(run)
        if as_json:
            print_json(store.run_document(record.id, samples=samples))
            return
        env = store.environment(record.id)
        measurements = store.measurements(record.id)
        metrics = store.metrics(record.id)
    out = console()
    out.print(f"run {record.id}  {record.kind} {record.name}  {_status(record.status)}")
    out.print(
        f"created {_when(record.created)} UTC, finished {_when(record.finished)}"
        f" ({_duration(record)}), host {record.hostname or '-'}, pid {record.pid or '-'}"
    )
    out.print(
        f"seed {'-' if record.seed is None else record.seed}, recipe {record.recipe_hash or '-'}",
        highlight=False,
    )
    out.print("config " + json.dumps(record.config, default=str), markup=False, highlight=False)
    if record.error:
        out.print(f"error  {record.error}", markup=False)
    out.print("environment", style="bold")
    for line in _environment_lines(env, record.fingerprint):
        out.print("  " + line, markup=False, highlight=False)
    if measurements:
        out.print(_measurement_table("measurements", measurements))
    else:
        out.print("no measurements")
    if metrics:
        table = Table(title="metrics", title_justify="left")
        for column in ("name", "labels", "value", "unit"):
            table.add_column(column)
        for k in metrics:
            table.add_row(k.name, _labels(k.labels), _num(k.value), k.unit)
        out.print(table)


# -- export ----------------------------------------------------------------------------


def _csv_rows(documents: Iterable[Mapping[str, Any]]) -> Iterable[list[Any]]:
    for doc in documents:
        run = doc["run"]
        head = [run["id"], run["kind"], run["name"], run["status"]]
        for m in doc["measurements"]:
            labels = json.dumps(m["labels"], sort_keys=True)
            for i, value in enumerate(m.get("samples") or []):
                yield [*head, "sample", m["id"], m["metric"], labels, m["unit"], i, value]
        for k in doc["metrics"]:
            labels = json.dumps(k["labels"], sort_keys=True)
            yield [*head, "metric", "", k["name"], labels, k["unit"], "", k["value"]]


@results.command("export")
@click.argument("runs", nargs=-1, required=True)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "csv"]),
    default=None,
    help="json: one document with runs, environments, summaries and raw samples "
    "(the default); csv: one row per raw sample or scalar metric.",
)
@click.option(
    "--output",
    "-o",
    type=click.Path(dir_okay=False, writable=True, path_type=Path),
    default=None,
    help="Write to this file instead of standard output.",
)
@json_option(help="Same as --format json.")
@db_option
def export_runs(
    runs: tuple[str, ...], fmt: str | None, output: Path | None, as_json: bool, db: Path | None
) -> None:
    """Export runs with their raw samples as JSON or CSV.

    RUNS are run ids or unique prefixes. --json is short for --format json.
    """
    if as_json and fmt == "csv":
        raise UsageError("--json and --format csv contradict each other; give one of them")
    fmt = fmt or "json"
    with _open(db) as store:
        ids = list(dict.fromkeys(store.get_run(r).id for r in runs))
        documents = [store.run_document(i) for i in ids]
        path = store.path
    if fmt == "json":
        text = json.dumps(
            {
                "format": EXPORT_FORMAT,
                "version": EXPORT_VERSION,
                "database": str(path),
                "runs": documents,
            },
            indent=2,
            default=str,
        )
        text += "\n"
    else:
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow(_CSV_COLUMNS)
        writer.writerows(_csv_rows(documents))
        text = buffer.getvalue()
    if output is None:
        click.echo(text, nl=False)
        return
    try:
        output.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write {output}: {exc.strerror or exc}") from exc
    n_samples = sum(len(m.get("samples") or []) for d in documents for m in d["measurements"])
    click.echo(f"wrote {len(documents)} run(s), {n_samples} samples, to {output}", err=True)


# -- compare ---------------------------------------------------------------------------


def _grouped(
    store: ResultsStore, run_id: str
) -> dict[tuple[str, str], tuple[MeasurementRecord, list[float], int]]:
    """Samples per (metric, labels): measurements repeated in one run are pooled."""
    groups: dict[tuple[str, str], tuple[MeasurementRecord, list[float], int]] = {}
    for m in store.measurements(run_id):
        key = (m.metric, json.dumps(m.labels, sort_keys=True))
        first, values, count = groups.get(key, (m, [], 0))
        groups[key] = (first, values + store.samples(m.id), count + 1)
    return groups


def _brief(run: RunRecord) -> dict[str, Any]:
    return {
        "id": run.id,
        "kind": run.kind,
        "name": run.name,
        "status": run.status,
        "created": run.created,
        "fingerprint": run.fingerprint,
    }


def _compare_one(
    metric: str,
    labels: Mapping[str, Any],
    unit: str,
    base: Sequence[float],
    cand: Sequence[float],
    alpha: float,
    min_effect: float,
) -> dict[str, Any]:
    from d5core.measure.compare import compare
    from d5core.measure.stats import summarize

    lower = _lower_is_better(unit)
    row: dict[str, Any] = {
        "metric": metric,
        "labels": dict(labels),
        "unit": unit,
        "lower_is_better": lower,
    }
    try:
        sb, sc = summarize(base), summarize(cand)
        result = compare(base, cand, alpha=alpha, lower_is_better=lower, min_effect=min_effect)
    except ValueError as exc:
        row["error"] = " ".join(str(exc).split())
        return row
    row["baseline"] = {k: getattr(sb, k) for k in ("n", "median", "ci_low", "ci_high")}
    row["candidate"] = {k: getattr(sc, k) for k in ("n", "median", "ci_low", "ci_high")}
    row.update(result.to_json())
    return row


def _metric_rows(
    store: ResultsStore, a: RunRecord, b: RunRecord
) -> tuple[list[dict[str, Any]], set[str]]:
    def by_key(run: RunRecord) -> dict[tuple[str, str], tuple[float, str, dict[str, Any]]]:
        return {
            (k.name, json.dumps(k.labels, sort_keys=True)): (k.value, k.unit, k.labels)
            for k in store.metrics(run.id)
        }

    ma, mb = by_key(a), by_key(b)
    rows = []
    for key, (va, unit, labels) in ma.items():
        if key not in mb:
            continue
        vb = mb[key][0]
        ratio = vb / va if va not in (0.0,) and math.isfinite(va) and math.isfinite(vb) else None
        rows.append(
            {
                "name": key[0],
                "labels": labels,
                "unit": unit,
                "baseline": None if math.isnan(va) else va,
                "candidate": None if math.isnan(vb) else vb,
                "ratio": ratio,
            }
        )
    unmatched = {k[0] for k in set(ma) ^ set(mb)}
    return rows, unmatched


@results.command("compare")
@click.argument("baseline")
@click.argument("candidate")
@click.option(
    "--alpha",
    type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True),
    default=None,
    help="Significance level of the Mann–Whitney U test (default: d5's, see docs/measurement.md).",
)
@click.option(
    "--min-effect",
    type=click.FloatRange(0.0, min_open=False),
    default=None,
    help="Smallest relative change of the median reported as faster or slower "
    "(default: d5's, 0.02 = 2%).",
)
@click.option(
    "--fail-if-slower",
    is_flag=True,
    help="Exit with code 1 when any measurement of CANDIDATE is significantly slower.",
)
@json_option
@db_option
def compare_runs(
    baseline: str,
    candidate: str,
    alpha: float | None,
    min_effect: float | None,
    fail_if_slower: bool,
    as_json: bool,
    db: Path | None,
) -> None:
    """Compare CANDIDATE with BASELINE, measurement by measurement.

    Measurements are paired by metric and labels. For each pair: both medians with
    their confidence intervals, the ratio CANDIDATE/BASELINE of the medians with its
    interval, the two-sided Mann–Whitney U p-value on the raw samples, the effect size
    and the verdict (faster, slower or same). Runs measured in different environments
    are compared with a warning naming what differs.
    """
    from d5core.environment import environment_differences, environment_fingerprint
    from d5core.measure.compare import DEFAULT_ALPHA, DEFAULT_MIN_EFFECT

    level = DEFAULT_ALPHA if alpha is None else alpha
    effect = DEFAULT_MIN_EFFECT if min_effect is None else min_effect
    with _open(db) as store:
        a, b = store.get_run(baseline), store.get_run(candidate)
        env_a, env_b = store.environment(a.id), store.environment(b.id)
        ga, gb = _grouped(store, a.id), _grouped(store, b.id)
        metric_rows, metrics_unmatched = _metric_rows(store, a, b)

    # Recomputed from the stored environments, so runs stored by an older d5 compare
    # by today's rules.
    same_env = environment_fingerprint(env_a) == environment_fingerprint(env_b)
    differences = [] if same_env else environment_differences(env_a, env_b)
    rows: list[dict[str, Any]] = []
    for key, (first, values, _count) in ga.items():
        if key not in gb:
            continue
        other, other_values, _ = gb[key]
        if first.unit != other.unit:
            rows.append(
                {
                    "metric": first.metric,
                    "labels": first.labels,
                    "unit": first.unit,
                    "error": f"units differ: {first.unit!r} vs {other.unit!r}",
                }
            )
            continue
        rows.append(
            _compare_one(
                first.metric, first.labels, first.unit, values, other_values, level, effect
            )
        )
    only_a = [{"metric": k[0], "labels": json.loads(k[1])} for k in ga if k not in gb]
    only_b = [{"metric": k[0], "labels": json.loads(k[1])} for k in gb if k not in ga]

    for run in (a, b):
        if run.status != "complete":
            _warn(f"run {run.id} is {run.status}; comparing what it stored")
    if not same_env:
        shown = "; ".join(differences[:4]) + ("; ..." if len(differences) > 4 else "")
        _warn(
            f"runs {a.id} and {b.id} were measured in different environments "
            f"({shown or 'fingerprints differ'}); differences may come from the environment"
        )
    if not rows and not metric_rows:
        _warn(f"runs {a.id} and {b.id} have no measurement or metric in common")

    if as_json:
        print_json(
            {
                "baseline": _brief(a),
                "candidate": _brief(b),
                "alpha": level,
                "min_effect": effect,
                "same_environment": same_env,
                "environment_differences": differences,
                "comparisons": rows,
                "only_in_baseline": only_a,
                "only_in_candidate": only_b,
                "metrics": metric_rows,
            }
        )
    else:
        _print_comparison(
            a,
            b,
            level,
            effect,
            differences if not same_env else None,
            rows,
            only_a,
            only_b,
            metric_rows,
        )
        if metrics_unmatched:
            console().print(
                "metrics in only one run: " + ", ".join(sorted(metrics_unmatched)),
                highlight=False,
            )

    slower = [r for r in rows if r.get("verdict") == "slower"]
    if fail_if_slower and slower:
        names = ", ".join(
            r["metric"] + (f" ({_labels(r['labels'])})" if r["labels"] else "") for r in slower
        )
        raise CheckFailed(f"run {b.id} is slower than {a.id} in: {names}")


def _print_comparison(
    a: RunRecord,
    b: RunRecord,
    alpha: float,
    min_effect: float,
    differences: Sequence[str] | None,
    rows: Sequence[Mapping[str, Any]],
    only_a: Sequence[Mapping[str, Any]],
    only_b: Sequence[Mapping[str, Any]],
    metric_rows: Sequence[Mapping[str, Any]],
) -> None:
    out = console()
    out.print(f"baseline  {a.id}  {a.kind} {a.name}  ({a.status}, {_when(a.created)} UTC)")
    out.print(f"candidate {b.id}  {b.kind} {b.name}  ({b.status}, {_when(b.created)} UTC)")
    if differences is not None:
        out.print(
            "WARNING: the runs were measured in different environments; differences may "
            "come from the environment:",
            style="bold yellow",
            markup=False,
            highlight=False,
        )
        for line in differences or ["(fingerprints differ)"]:
            out.print(f"  {line}", markup=False, highlight=False)
    env_line = "same environment" if differences is None else "different environments"
    out.print(
        f"{env_line}; ratio = candidate / baseline; a verdict other than 'same' needs "
        f"Mann–Whitney U p < {alpha:g} (two-sided) and a change of the median above "
        f"{min_effect:.1%}",
        markup=False,
        highlight=False,
    )
    if rows:
        table = Table(title="measurements", title_justify="left")
        for column in ("metric", "labels", "baseline median [CI]", "candidate median [CI]"):
            table.add_column(column, overflow="fold")
        for column in ("ratio [CI]", "p-value", "effect", "verdict"):
            table.add_column(column)
        for r in rows:
            if "error" in r:
                table.add_row(
                    r["metric"], _labels(r["labels"]), "-", "-", "-", "-", "-", "not compared"
                )
                table.add_row("", f"  {r['error']}", "", "", "", "", "", "")
                continue
            unit = r["unit"]
            ratio = f"{r['ratio']:.3f} [{r['ratio_ci_low']:.3f}, {r['ratio_ci_high']:.3f}]"
            verdict = r["verdict"]
            table.add_row(
                r["metric"],
                _labels(r["labels"]),
                _median_ci(r["baseline"], unit),
                _median_ci(r["candidate"], unit),
                ratio,
                f"{r['p_value']:.3g}",
                f"{r['effect_size']:.3g}",
                f"[{_VERDICT_STYLE.get(verdict, '')}]{verdict}[/]",
            )
        out.print(table)
    for label, only in (("baseline", only_a), ("candidate", only_b)):
        if only:
            names = ", ".join(
                m["metric"] + (f" ({_labels(m['labels'])})" if m["labels"] else "") for m in only
            )
            out.print(f"only in the {label}: {names}", markup=False, highlight=False)
    if metric_rows:
        table = Table(title="metrics", title_justify="left")
        for column in ("name", "labels", "baseline", "candidate", "ratio"):
            table.add_column(column)
        for m in metric_rows:
            table.add_row(
                m["name"],
                _labels(m["labels"]),
                _with_unit(m["baseline"], m["unit"]),
                _with_unit(m["candidate"], m["unit"]),
                "-" if m["ratio"] is None else f"{m['ratio']:.3f}",
            )
        out.print(table)


def _setting(run: RunRecord, key: str) -> str:
    """A run's value for ``key``: from its recipe settings, else from its config."""
    config = run.config or {}
    settings = config.get("settings") or {}
    value = settings.get(key, config.get(key))
    return "-" if value is None else str(value)


def _fmt_interval(median: float, low: float, high: float) -> str:
    return f"{median:.4g} [{low:.4g}, {high:.4g}]"


@results.command("table")
@click.argument("runs", nargs=-1)
@click.option("--last", type=click.IntRange(min=1), default=None, help="The N newest runs.")
@click.option("--kind", default="train", show_default=True, help="With --last: runs of this kind.")
@click.option(
    "--by",
    "group_by",
    default="executor",
    show_default=True,
    help="Setting that tells the columns apart (executor, optimizer, batch_size, ...).",
)
@json_option
@db_option
def table_runs(
    runs: tuple[str, ...],
    last: int | None,
    kind: str,
    group_by: str,
    as_json: bool,
    db: Path | None,
) -> None:
    """Training runs side by side, grouped by one setting: time to accuracy, final test
    accuracy and throughput, each with its interval across the group's runs.

    Time to accuracy: median with the 95% CI of the median over the runs (min-max below
    6 runs) and the olympic mean (best and worst dropped); final accuracy: median and
    range; throughput: median of every step's samples/s pooled over the runs, with its CI.
    """
    from d5core.measure.stats import summarize

    if bool(runs) == (last is not None):
        raise UsageError("give run ids, or --last N, not both and not neither")
    with _open(db) as store:
        records = (
            [store.get_run(r) for r in runs] if runs else store.list_runs(limit=last, kind=kind)
        )
        groups: dict[str, list[RunRecord]] = {}
        for record in records:
            groups.setdefault(_setting(record, group_by), []).append(record)
        out: list[dict[str, Any]] = []
        for key, members in sorted(groups.items()):
            ttas, accs, rates = [], [], []
            for record in members:
                values = {m.name: m.value for m in store.metrics(record.id)}
                if "time_to_accuracy" in values:
                    ttas.append(values["time_to_accuracy"])
                if "final_test_accuracy" in values:
                    accs.append(values["final_test_accuracy"])
                for m in store.measurements(record.id):
                    if m.metric == "throughput":
                        rates += [v for v in store.samples(m.id) if math.isfinite(v)]
            row: dict[str, Any] = {
                group_by: key,
                "runs": len(members),
                "reached_target": len(ttas),
                "run_ids": [r.id for r in members],
            }
            if ttas:
                s = summarize(ttas)
                ordered = sorted(ttas) + [math.inf] * (len(members) - len(ttas))
                kept = ordered[1:-1] if len(ordered) >= 3 else ordered
                olympic = sum(kept) / len(kept) if all(math.isfinite(t) for t in kept) else None
                row["time_to_accuracy"] = {
                    "median": s.median, "ci_low": s.ci_low, "ci_high": s.ci_high,
                    "olympic_mean": olympic,
                }  # fmt: skip
            if accs:
                ordered_accs = sorted(accs)
                row["final_test_accuracy"] = {
                    "median": ordered_accs[len(accs) // 2], "min": ordered_accs[0],
                    "max": ordered_accs[-1],
                }  # fmt: skip
            if rates:
                s = summarize(rates)
                row["throughput"] = {"median": s.median, "ci_low": s.ci_low, "ci_high": s.ci_high}
            out.append(row)
    if as_json:
        print_json(out)
        return
    table = Table(title=f"training runs by {group_by}", title_justify="left")
    columns = (
        group_by,
        "runs",
        "time to accuracy (s), median [95% CI]",
        "olympic mean (s)",
        "final test accuracy [range]",
        "samples/s, median [95% CI]",
    )
    for column in columns:
        table.add_column(column, justify="right")
    for row in out:
        tta, acc, thr = (
            row.get(k) for k in ("time_to_accuracy", "final_test_accuracy", "throughput")
        )
        table.add_row(
            str(row[group_by]),
            f"{row['runs']} ({row['reached_target']} reached)",
            _fmt_interval(tta["median"], tta["ci_low"], tta["ci_high"]) if tta else "-",
            f"{tta['olympic_mean']:.4g}" if tta and tta["olympic_mean"] is not None else "-",
            _fmt_interval(acc["median"], acc["min"], acc["max"]) if acc else "-",
            f"{thr['median']:,.0f} [{thr['ci_low']:,.0f}, {thr['ci_high']:,.0f}]" if thr else "-",
        )
    console().print(table)
