"""The environment of every run in a report, side by side.

Runs whose recorded environments say the same thing share a column (``E1``, ``E2``, ...
in the order of their first run); each row is one fact (host, CPU, memory, OS and
kernel, Python, d5 and plugin versions, framework facts, thread settings, allocator
policy, git commit). A row whose value is not the same in every column is marked as a
difference, so that a reader comparing two numbers sees at once what else changed
between them. What belongs to one run only (its command line and seeds) is listed per
run beneath the table.

:func:`environment_table` gives the table as data; :func:`render_environment` as HTML
(every value escaped: environments come from the store, and the store is not trusted).
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from html import escape
from typing import Any

from d5core.levels.report import ReportRun

__all__ = [
    "FACT_GROUPS",
    "EnvironmentColumn",
    "EnvironmentRow",
    "EnvironmentTable",
    "RunCommand",
    "describe_environment",
    "environment_table",
    "machines_of",
    "machines_warning",
    "render_environment",
]

#: The groups of facts, in the order the table shows them.
FACT_GROUPS: tuple[str, ...] = (
    "machine",
    "operating system",
    "python",
    "d5 and plugins",
    "frameworks",
    "threads",
    "allocator",
    "source",
)

#: Shown where an environment did not record a fact.
NOT_RECORDED = "—"

#: CPU flags worth naming in the flags summary: the vector extensions kernels pick from.
_SIMD_FLAGS: tuple[str, ...] = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "f16c",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "neon",
    "sve",
    "sve2",
)

#: Framework facts that say what one process had done when the environment was captured
#: (imported a module, initialised MPI) rather than what was installed: two runs in the
#: same set-up differ in them, so they would only hide the differences that matter.
_PROCESS_STATE_KEYS: frozenset[str] = frozenset({"imported", "initialized"})

#: Allocator facts that are about one process, not the set-up (see ``comparable_subset``).
_ALLOCATOR_SKIPPED: frozenset[str] = frozenset({"applied"})

#: At most this many run ids are listed in a column's heading (the rest are counted).
_IDS_SHOWN = 8


@dataclass(frozen=True)
class EnvironmentColumn:
    """One distinct environment: its label, its machine and the runs made in it."""

    label: str
    machine: str
    runs: tuple[str, ...]


@dataclass(frozen=True)
class EnvironmentRow:
    """One fact in every environment (one value per column, in column order)."""

    group: str
    fact: str
    values: tuple[str, ...]

    @property
    def differs(self) -> bool:
        """Whether the environments do not all agree on this fact."""
        return len(set(self.values)) > 1


@dataclass(frozen=True)
class RunCommand:
    """What belongs to one run only: how it was started."""

    run: str
    environment: str
    command: str
    seeds: str


@dataclass(frozen=True)
class EnvironmentTable:
    """The environments of a report's runs: one column each, one row per fact."""

    columns: tuple[EnvironmentColumn, ...]
    rows: tuple[EnvironmentRow, ...]
    commands: tuple[RunCommand, ...]
    #: ``machine -> ids of its runs``, machines in order of their first run.
    machines: Mapping[str, tuple[str, ...]]

    def differences(self) -> list[EnvironmentRow]:
        """The rows whose values are not the same in every environment."""
        return [row for row in self.rows if row.differs]

    def column_of(self, run_id: str) -> str | None:
        """The label of the environment ``run_id`` was made in (``None``: not in the table)."""
        for column in self.columns:
            if run_id in column.runs:
                return column.label
        return None

    def row(self, group: str, fact: str) -> EnvironmentRow | None:
        """The row of ``fact`` in ``group``, or ``None`` when no environment recorded it."""
        for row in self.rows:
            if row.group == group and row.fact == fact:
                return row
        return None

    @property
    def mixed_machines(self) -> bool:
        """Whether the runs were made on more than one machine."""
        return len(self.machines) > 1


# -- one environment as facts ---------------------------------------------------------


def _section(env: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    value = env.get(key)
    return value if isinstance(value, Mapping) else None


def _error_of(value: Any) -> str | None:
    """The error text of a section that could not be captured (``{"error": ...}``)."""
    if isinstance(value, Mapping) and set(value) == {"error"}:
        return f"not recorded: {value['error']}"
    return None


def _text(value: Any) -> str:
    """A fact's value as one line of text."""
    if value is None:
        return NOT_RECORDED
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return ", ".join(_text(v) for v in value) if value else "none"
    if isinstance(value, Mapping):
        return json.dumps(value, sort_keys=True, default=str)
    return " ".join(str(value).split())


def _flatten(value: Any, prefix: str, out: list[tuple[str, Any]]) -> None:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            if str(key) in _PROCESS_STATE_KEYS:
                continue
            _flatten(item, f"{prefix} {key}" if prefix else str(key), out)
    else:
        out.append((prefix, value))


def _cpu_facts(cpu: Mapping[str, Any]) -> list[tuple[str, str]]:
    facts = [("CPU model", _text(cpu.get("model")))]
    cores = [
        f"{cpu[key]} {label}"
        for key, label in (
            ("logical_cores", "logical"),
            ("physical_cores", "physical"),
            ("usable_cores", "usable"),
        )
        if cpu.get(key) is not None
    ]
    facts.append(("CPU cores", ", ".join(cores) if cores else NOT_RECORDED))
    if cpu.get("max_mhz"):
        facts.append(("CPU max MHz", _text(cpu["max_mhz"])))
    flags = cpu.get("flags")
    if isinstance(flags, list):
        names = sorted({str(f) for f in flags})
        simd = " ".join(f for f in _SIMD_FLAGS if f in names) or "none named"
        digest = hashlib.sha256(" ".join(names).encode()).hexdigest()[:8]
        count = f"{len(names)} flag{'' if len(names) == 1 else 's'}"
        facts.append(("CPU flags", f"{count}; vector: {simd}; set {digest}"))
    else:
        facts.append(("CPU flags", NOT_RECORDED))
    return facts


def _gpu_text(gpus: Any) -> str:
    error = _error_of(gpus)
    if error:
        return error
    if not isinstance(gpus, list):
        return NOT_RECORDED
    if not gpus:
        return "none"
    parts = []
    for gpu in gpus:
        if not isinstance(gpu, Mapping):
            continue
        extra = [
            f"{gpu['memory_total_mib']} MiB" if gpu.get("memory_total_mib") else "",
            f"driver {gpu['driver_version']}" if gpu.get("driver_version") else "",
        ]
        shown = ", ".join(e for e in extra if e)
        parts.append(f"{gpu.get('name', '?')}" + (f" ({shown})" if shown else ""))
    return "; ".join(parts) if parts else "none"


def describe_environment(
    environment: Mapping[str, Any], hostname: str | None = None
) -> list[tuple[str, str, str]]:
    """The facts of one stored environment as ``(group, fact, value)`` lines, groups in
    the order of :data:`FACT_GROUPS`.

    Every value is one line of plain text; a section that failed to be captured shows
    its error, one that was never recorded shows ``—``. The per-run keys (command line,
    seeds, time) are left out: :func:`environment_table` lists them per run.

    :param hostname: the host the store recorded for the run, shown where the
        environment itself has none.
    """
    env = environment
    facts: list[tuple[str, str, str]] = []

    def add(group: str, fact: str, value: str) -> None:
        facts.append((group, fact, value))

    # machine
    host = env.get("hostname") or hostname
    add("machine", "host", _error_of(host) or _text(host))
    cpu = env.get("cpu")
    if isinstance(cpu, Mapping) and not _error_of(cpu):
        for fact, value in _cpu_facts(cpu):
            add("machine", fact, value)
    else:
        add("machine", "CPU model", _error_of(cpu) or NOT_RECORDED)
    memory = env.get("memory")
    if isinstance(memory, Mapping) and isinstance(memory.get("total_bytes"), (int, float)):
        add("machine", "memory", f"{memory['total_bytes'] / 2**30:.1f} GiB")
    else:
        add("machine", "memory", _error_of(memory) or NOT_RECORDED)
    add("machine", "GPUs", _gpu_text(env.get("gpus")))

    # operating system
    os_ = env.get("os")
    if isinstance(os_, Mapping) and not _error_of(os_):
        system = " ".join(str(os_[k]) for k in ("system", "machine") if os_.get(k))
        add("operating system", "OS", system or NOT_RECORDED)
        kernel = " ".join(str(os_[k]) for k in ("release", "version") if os_.get(k))
        add("operating system", "kernel", kernel or NOT_RECORDED)
        add("operating system", "platform", _text(os_.get("platform")))
    else:
        add("operating system", "OS", _error_of(os_) or NOT_RECORDED)

    # python
    python = env.get("python")
    if isinstance(python, Mapping) and not _error_of(python):
        version = " ".join(str(python[k]) for k in ("implementation", "version") if python.get(k))
        add("python", "Python", version or NOT_RECORDED)
        add("python", "interpreter", _text(python.get("executable")))
        add("python", "compiler", _text(python.get("compiler")))
    else:
        add("python", "Python", _error_of(python) or NOT_RECORDED)

    # d5 and plugins
    d5 = _section(env, "d5") or {}
    add("d5 and plugins", "d5", _text(d5.get("version")))
    add("d5 and plugins", "plugin API", _text(d5.get("plugin_api")))
    packages = _section(env, "packages") or {}
    for name in sorted(packages):
        if name != "d5core":
            add("d5 and plugins", f"package {name}", _text(packages[name]))
    plugins = env.get("plugins")
    if isinstance(plugins, list):
        broken = sorted(
            f"{p.get('name')} ({p.get('group')}): {p.get('status')}"
            for p in plugins
            if isinstance(p, Mapping) and p.get("status") not in (None, "ok")
        )
        add("d5 and plugins", "plugins not loaded", "; ".join(broken) if broken else "none")

    # frameworks: every scalar fact each plugin's d5_environment_info reported
    frameworks = env.get("frameworks")
    if isinstance(frameworks, Mapping) and not _error_of(frameworks):
        for plugin in sorted(frameworks):
            info = frameworks[plugin]
            error = _error_of(info)
            if error:
                add("frameworks", str(plugin), error)
                continue
            flat: list[tuple[str, Any]] = []
            _flatten(info, "", flat)
            for key, value in flat:
                add("frameworks", f"{plugin} {key}".strip(), _text(value))
    elif frameworks is not None:
        add("frameworks", "frameworks", _error_of(frameworks) or _text(frameworks))

    # threads
    threads = env.get("threads")
    if isinstance(threads, Mapping) and not _error_of(threads):
        for var in sorted(threads):
            value = threads[var]
            add("threads", str(var), "not set" if value is None else _text(value))
    else:
        add("threads", "thread variables", _error_of(threads) or NOT_RECORDED)

    # allocator
    allocator = env.get("allocator")
    if isinstance(allocator, Mapping) and not _error_of(allocator):
        flat = []
        _flatten({k: v for k, v in allocator.items() if k not in _ALLOCATOR_SKIPPED}, "", flat)
        for key, value in flat:
            add("allocator", f"allocator {key}".strip(), _text(value))
    else:
        add("allocator", "allocator", _error_of(allocator) or NOT_RECORDED)

    # source
    git = env.get("git")
    error = _error_of(git)
    if isinstance(git, Mapping) and not error:
        add("source", "git commit", _text(git.get("commit")))
        dirty = git.get("dirty")
        add(
            "source",
            "uncommitted changes",
            "unknown" if dirty is None else ("yes (dirty)" if dirty else "no"),
        )
    else:
        add("source", "git commit", error or "not in a git checkout")
    return facts


# -- many environments ----------------------------------------------------------------


def _command_line(argv: Any) -> str:
    if isinstance(argv, list) and all(isinstance(a, str) for a in argv):
        return shlex.join(argv) if argv else NOT_RECORDED
    return _text(argv)


def machines_of(runs: Sequence[ReportRun]) -> dict[str, tuple[str, ...]]:
    """``machine -> ids of its runs`` (:attr:`ReportRun.machine`), machines in the order
    of their first run."""
    machines: dict[str, list[str]] = {}
    for run in runs:
        machines.setdefault(run.machine, []).append(run.id)
    return {machine: tuple(ids) for machine, ids in machines.items()}


def machines_warning(runs: Sequence[ReportRun]) -> str | None:
    """A one-line warning naming the machines when ``runs`` come from more than one;
    ``None`` when they all ran on one."""
    machines = machines_of(runs)
    if len(machines) < 2:
        return None
    listed = "; ".join(
        f"{machine}: {len(ids)} run{'s' if len(ids) != 1 else ''}"
        for machine, ids in machines.items()
    )
    return (
        f"This report mixes runs from {len(machines)} different machines ({listed}). "
        "Numbers from different machines are not directly comparable; every figure that "
        "draws several of them says so."
    )


def environment_table(runs: Sequence[ReportRun]) -> EnvironmentTable:
    """The environments of ``runs`` side by side.

    Runs whose :func:`describe_environment` facts are identical share a column; columns
    are labelled ``E1``, ``E2``, ... in the order of their first run. A fact one
    environment did not record shows ``—`` in its column.
    """
    labels: dict[str, str] = {}
    column_facts: list[dict[tuple[str, str], str]] = []
    column_runs: list[list[str]] = []
    column_machine: list[str] = []
    order: dict[tuple[str, str], int] = {}
    commands: list[RunCommand] = []
    for run in runs:
        facts = describe_environment(run.environment, run.record.hostname)
        key = json.dumps(facts)
        label = labels.get(key)
        if label is None:
            label = f"E{len(labels) + 1}"
            labels[key] = label
            column_facts.append({(g, f): v for g, f, v in facts})
            column_runs.append([])
            column_machine.append(run.machine)
            for group, fact, _ in facts:
                order.setdefault((group, fact), len(order))
        column_runs[int(label[1:]) - 1].append(run.id)
        seeds = run.environment.get("seeds")
        commands.append(
            RunCommand(
                run=run.id,
                environment=label,
                command=_command_line(run.environment.get("argv")),
                seeds=NOT_RECORDED if seeds is None else _text(seeds),
            )
        )
    group_rank = {group: i for i, group in enumerate(FACT_GROUPS)}
    keys = sorted(order, key=lambda k: (group_rank.get(k[0], len(group_rank)), order[k]))
    rows = tuple(
        EnvironmentRow(
            group=group,
            fact=fact,
            values=tuple(facts.get((group, fact), NOT_RECORDED) for facts in column_facts),
        )
        for group, fact in keys
    )
    columns = tuple(
        EnvironmentColumn(label=f"E{i + 1}", machine=machine, runs=tuple(ids))
        for i, (machine, ids) in enumerate(zip(column_machine, column_runs, strict=True))
    )
    return EnvironmentTable(
        columns=columns, rows=rows, commands=tuple(commands), machines=machines_of(runs)
    )


# -- HTML -------------------------------------------------------------------------------


def _e(value: object) -> str:
    return escape(str(value), quote=True)


def _run_list(ids: Sequence[str]) -> str:
    shown = ", ".join(_e(i) for i in ids[:_IDS_SHOWN])
    more = len(ids) - _IDS_SHOWN
    return shown + (f" and {more} more" if more > 0 else "")


def render_environment(table: EnvironmentTable) -> str:
    """The environment table as an HTML fragment (a ``<div>``; the page's CSS styles it).

    A fact that differs between the environments gets the row class ``differs`` and a
    ``≠`` mark with the word "differs" in its own cell, readable without colour; the
    facts that differ are also listed above the table. Every value is escaped.
    """
    if not table.columns:
        return '<div class="environment"><p>No runs, so no environment.</p></div>'
    parts: list[str] = ['<div class="environment">']
    n = len(table.columns)
    differing = table.differences()
    if n == 1:
        parts.append("<p>Every run in this report was made in the same environment.</p>")
    elif differing:
        names = ", ".join(_e(row.fact) for row in differing)
        parts.append(
            f'<p class="env-summary"><strong>{len(differing)} fact'
            f"{'s differ' if len(differing) != 1 else ' differs'} between the {n} "
            f"environments</strong> (marked ≠ below): {names}.</p>"
        )
    else:
        parts.append(
            f"<p>The runs were made in {n} environments that agree on every fact shown "
            "(they differ only in what is not shown here).</p>"
        )
    marked = n > 1  # one environment has nothing to differ from: no mark column
    parts.append('<div class="scroll"><table class="env-table">')
    parts.append('<thead><tr><th scope="col">fact</th>')
    if marked:
        parts.append('<th scope="col" class="mark">≠</th>')
    for column in table.columns:
        parts.append(
            f'<th scope="col" class="env-column" id="env-{_e(column.label.lower())}">'
            f"{_e(column.label)}"
            f'<span class="env-machine">{_e(column.machine)}</span>'
            f'<span class="env-runs">{len(column.runs)} run'
            f"{'s' if len(column.runs) != 1 else ''}: {_run_list(column.runs)}</span></th>"
        )
    parts.append("</tr></thead>")
    group: str | None = None
    for row in table.rows:
        if row.group != group:
            if group is not None:
                parts.append("</tbody>")
            group = row.group
            parts.append(
                f'<tbody><tr class="env-group"><th scope="rowgroup" colspan="{n + 1 + marked}">'
                f"{_e(group)}</th></tr>"
            )
        if row.differs:
            parts.append(
                '<tr class="differs"><th scope="row">'
                f"{_e(row.fact)}</th>"
                '<td class="mark" title="differs between environments">≠ differs</td>'
            )
        elif marked:
            parts.append(f'<tr><th scope="row">{_e(row.fact)}</th><td class="mark"></td>')
        else:
            parts.append(f'<tr><th scope="row">{_e(row.fact)}</th>')
        parts.extend(f"<td>{_e(value)}</td>" for value in row.values)
        parts.append("</tr>")
    if group is not None:
        parts.append("</tbody>")
    parts.append("</table></div>")
    parts.append(
        '<h3>Command lines</h3><div class="scroll"><table class="env-commands">'
        '<thead><tr><th scope="col">run</th><th scope="col">environment</th>'
        '<th scope="col">command line</th><th scope="col">seeds</th></tr></thead><tbody>'
    )
    for command in table.commands:
        parts.append(
            f"<tr><td><code>{_e(command.run)}</code></td><td>{_e(command.environment)}</td>"
            f"<td><code>{_e(command.command)}</code></td><td>{_e(command.seeds)}</td></tr>"
        )
    parts.append("</tbody></table></div></div>")
    return "".join(parts)
