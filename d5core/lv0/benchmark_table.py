"""Operator and network benchmarks side by side, from the results store.

``d5 bench op`` and ``d5 bench net`` print their own table, but only for the backends
of one call, in one environment. :func:`benchmark_table` rebuilds that table from stored
runs, so that runs made in different environments (MXNet's own virtualenv beside the
one with torch and TensorFlow) meet in one table: one row per operator problem
(``op``: operator, problem, direction, dtype) or per network case (``net``: model,
mode, batch), one cell per backend or executor with the median per call and its 95%
CI, the environment it was measured in (:mod:`d5core.results.environments`) and, for
operators, the GFLOP/s at the median and its fraction of the peak of the cores the
backend ran on, as ``d5 bench op`` stored them, and the newest stored validation of that
operator on that backend. Where the same cell was measured by several runs, the newest
run's value is shown and the others are counted. A cell whose run was measured on a
busy machine says so (``busy``, :func:`d5core.results.load.was_busy`), so that no slow
figure of a loaded machine is shown bare.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from d5core.errors import UsageError
from d5core.results.environments import EnvironmentLegend, environment_legend
from d5core.results.load import peak_load_per_core, was_busy
from d5core.results.store import ResultsStore, RunRecord
from d5core.trace.marks import trace_level

__all__ = ["BENCHMARK_KINDS", "BenchmarkTable", "benchmark_table"]

#: The run kinds this table shows, with the label naming the column and the row fields.
BENCHMARK_KINDS: dict[str, tuple[str, tuple[str, ...]]] = {
    "op": ("backend", ("op", "problem", "direction", "dtype")),
    "net": ("executor", ("model", "mode", "batch")),
}


@dataclass
class BenchmarkTable:
    """Rows of one kind of benchmark, with the columns and environments they use."""

    kind: str
    #: ``"backend"`` or ``"executor"``.
    column: str
    #: The row fields, for example ``("op", "problem", "direction", "dtype")``.
    fields: tuple[str, ...]
    #: Backends or executors in order of first appearance.
    columns: list[str] = field(default_factory=list)
    #: One dict per row: the row fields, and ``cells``: ``column -> cell``.
    rows: list[dict[str, Any]] = field(default_factory=list)
    legend: EnvironmentLegend = field(default_factory=EnvironmentLegend)

    def busy_runs(self) -> list[str]:
        """The ids of the runs measured on a busy machine that a cell shows."""
        found = (c["run_id"] for row in self.rows for c in row["cells"].values() if c["busy"])
        return list(dict.fromkeys(found))

    def to_json(self) -> list[dict[str, Any]]:
        """The rows as plain JSON (``docs/json.md``, ``d5 results table``): each with its
        fields, its ``cells``, and the environments (:meth:`EnvironmentLegend.row_json`)."""
        return [
            {**row, **self.legend.row_json(c["environment"] for c in row["cells"].values())}
            for row in self.rows
        ]


def _row_key(kind: str, run: RunRecord, labels: dict[str, Any]) -> tuple[Any, ...] | None:
    config = run.config or {}
    values: tuple[Any, ...]
    if kind == "op":
        values = (config.get("op"), labels.get("problem"), labels.get("direction"),
                  labels.get("dtype"))  # fmt: skip
    else:
        values = (config.get("model"), labels.get("mode"), labels.get("batch"))
    return None if any(v is None for v in values) else values


#: The rate fields of an operator cell whose run stored no GFLOP/s.
_NO_RATE: dict[str, Any] = {"gflops": None, "peak_fraction": None, "peak_gflops": None,
                            "peak_cores": None}  # fmt: skip


def _label_key(labels: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(labels.get(k)) for k in ("backend", "problem", "direction", "dtype"))


def _rates(
    store: ResultsStore, run: RunRecord, measurements: Iterable[Any]
) -> dict[tuple[str, ...], dict[str, Any]]:
    """Per (backend, problem, direction, dtype) of an ``op`` run: its GFLOP/s at the
    median and its fraction of the peak, with the peak that fraction is of and the cores
    it counts, as stored by ``d5 bench op``. A run made before d5 stored that peak per
    backend divided by the whole machine's (``peak_cores``: ``None``)."""
    found: dict[tuple[str, ...], dict[str, Any]] = {}

    def entry(labels: dict[str, Any]) -> dict[str, Any]:
        return found.setdefault(_label_key(labels), dict(_NO_RATE))

    for m in measurements:
        if m.metric == "gflops" and m.summary is not None:
            entry(m.labels)["gflops"] = m.summary.get("median")
    whole = None
    for k in store.metrics(run.id):
        if k.name == "peak_fraction":
            entry(k.labels)["peak_fraction"] = k.value
        elif k.name == "peak_gflops" and "backend" in k.labels:
            cores = k.labels.get("cores")
            entry(k.labels).update(peak_gflops=k.value, peak_cores=cores)
        elif k.name == "peak_gflops":
            whole = k.value
    for cell in found.values():
        if cell["peak_fraction"] is not None and cell["peak_gflops"] is None:
            cell["peak_gflops"] = whole
    return found


def _validations(store: ResultsStore) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The newest stored validation per ``(op, backend, dtype)``."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for run in store.list_runs(kind="validate"):  # newest first
        config = run.config or {}
        key = (str(config.get("op")), str(config.get("backend")), str(config.get("dtype")))
        if key in found or run.status != "complete":
            continue
        passed = next((m.value for m in store.metrics(run.id) if m.name == "passed"), None)
        if passed is not None:
            found[key] = {"passed": bool(passed), "run_id": run.id}
    return found


def benchmark_table(store: ResultsStore, runs: Iterable[RunRecord], kind: str) -> BenchmarkTable:
    """The table of ``kind`` (``op`` or ``net``) over ``runs``, newest first; runs of
    other kinds are left out.

    :raises UsageError: for another ``kind``.
    """
    if kind not in BENCHMARK_KINDS:
        raise UsageError(f"--kind {kind!r} has no benchmark table; use op, net or train")
    column, fields = BENCHMARK_KINDS[kind]
    chosen = [r for r in runs if r.kind == kind]
    table = BenchmarkTable(kind, column, fields, legend=environment_legend(store, chosen))
    validations = _validations(store) if kind == "op" else {}
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for run in sorted(chosen, key=lambda r: r.created, reverse=True):
        measurements = store.measurements(run.id)
        rates = _rates(store, run, measurements) if kind == "op" else {}
        for m in measurements:
            who = m.labels.get(column)
            key = _row_key(kind, run, m.labels)
            if m.metric != "time" or m.summary is None or who is None or key is None:
                continue
            row = rows.setdefault(key, {**dict(zip(fields, key, strict=True)), "cells": {}})
            cell = row["cells"].get(who)
            if cell is not None:
                cell["older_runs"] += 1
                continue
            if who not in table.columns:
                table.columns.append(who)
            cell = {
                "median": m.summary.get("median"),
                "ci_low": m.summary.get("ci_low"),
                "ci_high": m.summary.get("ci_high"),
                "unit": m.unit,
                "run_id": run.id,
                "environment": table.legend.tag_of(run.id),
                "older_runs": 0,
                "busy": was_busy(run.load_start, run.load_end),
                "load_per_core": peak_load_per_core(run.load_start, run.load_end),
                "traced": trace_level(run.config),
            }
            if kind == "op":
                check = validations.get((str(key[0]), str(who), str(key[3])))
                cell["validated"] = None if check is None else check["passed"]
                cell.update(rates.get(_label_key(m.labels), _NO_RATE))
            row["cells"][who] = cell
    table.rows = [rows[k] for k in sorted(rows, key=lambda k: tuple(str(v) for v in k))]
    return table
