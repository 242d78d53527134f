"""Rendering of ``d5 results table --kind op|net`` (the data is
:mod:`d5core.lv0.benchmark_table`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.markup import escape
from rich.table import Table

from d5core.cli.output import console
from d5core.lv0.benchmark_table import BenchmarkTable
from d5core.report.legend import print_legend
from d5core.results.load import BUSY_LEGEND, BUSY_MARK
from d5core.trace.marks import TRACED_LEGEND, TRACED_MARK

__all__ = ["print_benchmark_table", "results_table"]

_TIME_SCALES = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
_VALIDATED = {True: "[green]validated[/]", False: "[bold red]FAILED validation[/]", None: ""}


def _time(cell: Mapping[str, Any]) -> str:
    median = cell.get("median")
    if median is None:
        return "-"
    factor, label = next(((f, u) for f, u in _TIME_SCALES if abs(median) >= f), _TIME_SCALES[-1])
    if cell.get("unit") != "s":
        factor, label = 1.0, str(cell.get("unit", ""))

    def num(value: float | None) -> str:
        return "-" if value is None else f"{value / factor:.4g}"

    return f"{num(median)} [{num(cell.get('ci_low'))}, {num(cell.get('ci_high'))}] {label}"


def _rate(cell: Mapping[str, Any]) -> str:
    """``198.7 GFLOP/s · 87% peak`` where the run stored them; a fraction of the whole
    machine's peak (a run made before d5 stored the peak of the backend's threads) says
    so."""
    gflops, fraction = cell.get("gflops"), cell.get("peak_fraction")
    if not gflops:
        return ""
    if fraction is None:
        return f"{gflops:.1f} GFLOP/s"
    whole = "" if cell.get("peak_cores") else " of all cores"
    return f"{gflops:.1f} GFLOP/s · {100 * fraction:.0f}% peak{whole}"


def _cell(cell: Mapping[str, Any] | None, fastest: float | None) -> str:
    if cell is None:
        return "-"
    lines = [escape(_time(cell))]
    extra = [str(cell["environment"])]
    median = cell.get("median")
    if fastest and median:
        extra.append(f"{median / fastest:.2f}x")
    text = escape(" · ".join(extra))
    if cell.get("busy"):
        text += f" · [bold yellow]{BUSY_MARK}[/]"
    if cell.get("traced"):
        text += f" · [bold cyan]{TRACED_MARK}[/]"
    lines.append(text)
    rate = _rate(cell)
    if rate:
        lines.append(escape(rate))
    check = _VALIDATED[cell.get("validated")]
    if check:
        lines.append(check)
    return "\n".join(lines)


_CAPTION = (
    "one cell per {0} from its newest stored run; validation: the newest `d5 validate op` "
    "of that operator, backend and dtype in the store"
)
_CAPTIONS = {
    "op": _CAPTION.format("backend") + "; GFLOP/s: at the median time; % peak: of the "
    "FMA peak of the threads the backend ran on (one core's share of the machine's FMA "
    "peak times its threads), as stored with the run",
    "net": _CAPTION.format("executor"),
}


def print_benchmark_table(table: BenchmarkTable) -> None:
    """The rows, one column per backend or executor: median [95% CI] per call, the
    environment tag, the ratio to the row's fastest, the busy-machine mark, for operators
    the GFLOP/s and % of peak, and the stored validation; under the table, what the busy
    mark means when a cell has it."""
    title = {"op": "operators", "net": "networks"}[table.kind]
    out = Table(
        title=f"{title} side by side (median per call [95% CI]; environment; x the fastest)",
        title_justify="left",
        caption=_CAPTIONS[table.kind],
        caption_justify="left",
    )
    for name in table.fields:
        out.add_column(name)
    for name in table.columns:
        out.add_column(name, justify="right")
    for row in table.rows:
        cells = row["cells"]
        medians = [c["median"] for c in cells.values() if c.get("median")]
        fastest = min(medians) if len(medians) > 1 else None
        out.add_row(
            *(escape(str(row[f])) for f in table.fields),
            *(_cell(cells.get(name), fastest) for name in table.columns),
        )
    console().print(out)
    if table.busy_runs():
        console().print(BUSY_LEGEND, markup=False, highlight=False)
    if any(c.get("traced") for row in table.rows for c in row["cells"].values()):
        console().print(TRACED_LEGEND, markup=False, highlight=False)
    print_legend(table.legend)


def _busy_warning(table: BenchmarkTable) -> None:
    """For ``--json``: a warning on standard error naming the busy runs shown."""
    import click

    busy = table.busy_runs()
    if busy:
        click.echo(f"d5: warning: cells marked busy (run {', '.join(busy)}): {BUSY_LEGEND}",
                   err=True)  # fmt: skip


def results_table(kind: str) -> Callable[..., None]:
    """The ``d5 results table --kind`` entry of benchmark runs of ``kind`` (``op`` or
    ``net``): one row per problem or case, one column per backend or executor."""

    def show(store: Any, runs: Sequence[Any], *, by: str, as_json: bool) -> None:
        from d5core.cli.output import print_json
        from d5core.lv0.benchmark_table import benchmark_table

        table = benchmark_table(store, runs, kind)
        if as_json:
            print_json(table.to_json())
            _busy_warning(table)
            print_legend(table.legend, facts=False)
        else:
            print_benchmark_table(table)

    return show
