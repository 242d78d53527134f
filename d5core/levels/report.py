"""What a report is made of: the runs it reads and the figures it draws.

A :class:`ReportRun` is one stored run with everything the store keeps about it (raw
samples included), read once for the whole report by
:meth:`d5core.results.ResultsStore.read_runs`. A :class:`ReportFigure` is one drawn
figure together with the numbers it draws (:attr:`ReportFigure.data`), so that a test
can check that what is plotted is what is stored.

Figures come from the ``d5_report_figures`` hook: d5's own (one module per level in
:mod:`d5core.report`) and any plugin's, through the same call.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from d5core.results.store import MeasurementRecord, MetricRecord, RunRecord, StoredRun

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = [
    "REPORT_SECTIONS",
    "ReportFigure",
    "ReportMeasurement",
    "ReportRun",
    "level_of",
    "machine_of",
]

#: The report's sections, in the order they are shown: the four levels, then history.
#: A plugin's figure names one of these, or a section of its own (shown after them).
REPORT_SECTIONS: tuple[str, ...] = ("operators", "networks", "training", "distributed", "history")

#: Which section a run of each kind belongs to (distributed training runs are kind
#: ``train`` with a ``distributed`` setting, and go to ``distributed``).
_KIND_LEVELS: dict[str, str] = {
    "op": "operators",
    "net": "networks",
    "train": "training",
    "comm": "distributed",
    "dist": "distributed",
    "inference": "networks",
}

_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,95}$")


def level_of(run: RunRecord) -> str | None:
    """The report section of ``run``: one of :data:`REPORT_SECTIONS` but ``history``, or ``None``
    for kinds no level draws (validations, calibrations, ...)."""
    if run.kind == "train" and run.config.get("distributed"):
        return "distributed"
    return _KIND_LEVELS.get(run.kind)


def machine_of(environment: Mapping[str, Any], hostname: str | None = None) -> str:
    """A short name of the machine a run was made on: host and CPU model.

    Two runs with the same name ran on the same machine as far as d5 can tell; figures
    that draw runs of several machines say so.
    """
    host = environment.get("hostname") or hostname or "unknown host"
    cpu = environment.get("cpu")
    model = cpu.get("model") if isinstance(cpu, Mapping) else None
    return f"{host} ({model})" if model else str(host)


@dataclass(frozen=True)
class ReportMeasurement:
    """One stored measurement with its raw samples."""

    metric: str
    labels: Mapping[str, Any]
    unit: str
    #: The raw samples in the order they were taken (NaN where a sample was NaN).
    samples: tuple[float, ...]
    #: The worker process of each sample (``None``: not recorded).
    processes: tuple[int | None, ...]
    #: The stored summary (median, ``ci_low``, ``ci_high``, ... and ``nested`` where
    #: samples came from several processes), or ``None``.
    summary: Mapping[str, Any] | None
    better: str | None
    details: Mapping[str, Any] = field(default_factory=dict)

    @property
    def finite(self) -> list[float]:
        """The samples that are finite numbers."""
        return [v for v in self.samples if math.isfinite(v)]

    def median_ci(self) -> tuple[float, float, float] | None:
        """``(median, low, high)`` as d5 reported it: the between-process interval where
        the samples came from several processes, else the within-run one; ``None`` when
        nothing was summarised."""
        s = self.summary
        if not s:
            return None
        nested = s.get("nested")
        if isinstance(nested, Mapping) and nested.get("ci_low") is not None:
            median = nested.get("median", s.get("median"))
            low, high = nested.get("ci_low"), nested.get("ci_high")
        else:
            median, low, high = s.get("median"), s.get("ci_low"), s.get("ci_high")
        if median is None:
            return None
        low = median if low is None else low
        high = median if high is None else high
        return float(median), float(low), float(high)

    @classmethod
    def from_record(
        cls, record: MeasurementRecord, samples: Sequence[float], processes: Sequence[int | None]
    ) -> ReportMeasurement:
        return cls(
            metric=record.metric,
            labels=dict(record.labels),
            unit=record.unit,
            samples=tuple(samples),
            processes=tuple(processes),
            summary=record.summary,
            better=record.better,
            details=dict(record.details),
        )


@dataclass(frozen=True)
class ReportRun:
    """One stored run as a report reads it."""

    record: RunRecord
    environment: Mapping[str, Any]
    measurements: tuple[ReportMeasurement, ...]
    metrics: tuple[MetricRecord, ...]

    @classmethod
    def from_stored(cls, stored: StoredRun) -> ReportRun:
        return cls(
            record=stored.run,
            environment=stored.environment,
            measurements=tuple(
                ReportMeasurement.from_record(m.record, m.samples, m.processes)
                for m in stored.measurements
            ),
            metrics=stored.metrics,
        )

    # -- the run's own facts -----------------------------------------------------------

    @property
    def id(self) -> str:
        return self.record.id

    @property
    def kind(self) -> str:
        return self.record.kind

    @property
    def name(self) -> str:
        return self.record.name

    @property
    def status(self) -> str:
        return self.record.status

    @property
    def created(self) -> str:
        return self.record.created

    @property
    def config(self) -> Mapping[str, Any]:
        return self.record.config

    @property
    def tags(self) -> tuple[str, ...]:
        return self.record.tags

    @property
    def level(self) -> str | None:
        """See :func:`level_of`."""
        return level_of(self.record)

    @cached_property
    def machine(self) -> str:
        """See :func:`machine_of`."""
        return machine_of(self.environment, self.record.hostname)

    @property
    def commit(self) -> str | None:
        """The git commit the run was made at, where d5 ran inside a git checkout."""
        git = self.environment.get("git")
        commit = git.get("commit") if isinstance(git, Mapping) else None
        return str(commit) if commit else None

    # -- lookups -----------------------------------------------------------------------

    def find(self, metric: str, **labels: Any) -> list[ReportMeasurement]:
        """The measurements of ``metric`` whose labels include ``labels``."""
        return [
            m
            for m in self.measurements
            if m.metric == metric and all(m.labels.get(k) == v for k, v in labels.items())
        ]

    def metric_records(self, name: str, **labels: Any) -> list[MetricRecord]:
        """The scalar metrics called ``name`` whose labels include ``labels``."""
        return [
            k
            for k in self.metrics
            if k.name == name and all(k.labels.get(key) == v for key, v in labels.items())
        ]

    def metric_value(self, name: str, **labels: Any) -> float | None:
        """The first scalar metric ``name`` (with ``labels``), or ``None``."""
        found = self.metric_records(name, **labels)
        return found[0].value if found else None


@dataclass
class ReportFigure:
    """One figure of a report.

    :param key: its name in the report and the file stem of its PNG and PDF: lower-case
        letters, digits and dashes, unique in a report (``op-samples-gemm``).
    :param title: shown above it (plain text; the report escapes it).
    :param section: the section it belongs to, one of :data:`REPORT_SECTIONS` or a plugin's own.
    :param figure: the matplotlib figure.
    :param data: the numbers drawn, as plain JSON types: what a test compares with the
        store (the figure must draw these and nothing else).
    :param runs: the ids of the runs it draws.
    :param caption: what it shows and how to read it (plain text).
    :param notes: warnings the reader must see beside it, such as runs from several
        machines drawn together.
    """

    key: str
    title: str
    section: str
    figure: Figure
    data: Mapping[str, Any]
    runs: tuple[str, ...] = ()
    caption: str = ""
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not _KEY_RE.match(self.key):
            raise ValueError(
                f"figure key {self.key!r} must be lower-case letters, digits and dashes "
                "(at most 96, starting with a letter or digit)"
            )
