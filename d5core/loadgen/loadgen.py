"""Run one executor under MLPerf LoadGen in a fresh worker process, and read its logs.

:func:`run_scenario` starts ``python -m d5core.loadgen.worker`` (the request as JSON
on its standard input, the answer as JSON lines on its standard output). The worker pins
the BLAS, OpenMP and framework threads
(:func:`~d5core.loadgen.settings.thread_environment`) before any framework loads,
builds the executor as ``d5 bench net`` does, warms it up (which also measures what the
defaults left ``None`` are derived from: :func:`resolve_settings`), and runs LoadGen
(:func:`test_settings`, :func:`start_test`) with a
:class:`~d5core.loadgen.sut.InferenceSUT`, the SUT that :data:`SUT_FACTORY` also
builds in-process for benchmarks. Back
here, the logs LoadGen wrote are parsed: the summary (:func:`parse_summary`), the detail
log (:func:`parse_detail`) and the trace (:func:`trace_latencies`, every query's
latency), into a :class:`ScenarioResult`.

A worker that dies, times out, or reports a failure raises
:class:`~d5core.loadgen.sut.ScenarioFailed` with one line saying what happened.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from d5core.errors import UsageError
from d5core.loadgen.settings import (
    DEFAULT_SAMPLE_COUNT,
    DEFAULT_SAMPLES_PER_QUERY,
    DEFAULT_SERVER_LATENCY_MS,
    ScenarioSettings,
    thread_environment,
)
from d5core.loadgen.sut import ScenarioFailed, make_sut
from d5core.worker_protocol import die_with_parent

__all__ = [
    "EXPECTED_LATENCY_CAP_S",
    "EXPECTED_LATENCY_DIVISOR",
    "LATENCY_BOUND_CHECK",
    "LOADGEN_SCENARIOS",
    "OFFLINE_HEADROOM",
    "OFFLINE_SAMPLE_OVERHEAD_S",
    "PERCENTILES",
    "SERVER_LOAD",
    "SERVER_MAX_QPS",
    "SUT_FACTORY",
    "ScenarioFailed",
    "ScenarioResult",
    "check_fits",
    "default_timeout",
    "parse_detail",
    "parse_summary",
    "read_result",
    "resolve_settings",
    "run_scenario",
    "start_test",
    "test_settings",
    "trace_latencies",
]

#: d5's scenario names -> LoadGen's ``TestScenario`` members.
LOADGEN_SCENARIOS: dict[str, str] = {
    "single-stream": "SingleStream",
    "multi-stream": "MultiStream",
    "server": "Server",
    "offline": "Offline",
}
#: The latency percentiles LoadGen's summary gives, as the result's keys.
PERCENTILES: tuple[str, ...] = ("50", "90", "95", "97", "99", "99.9")
#: Builds the system under test: ``SUT_FACTORY(executor, network, settings) -> (sut,
#: qsl, close)``; benchmarks time it against a bare SUT.
SUT_FACTORY = make_sut
#: Offline: expected QPS is this many times the warm-up's median batched rate, so that
#: the one query lasts at least its minimum duration (a run whose query ends sooner is
#: INVALID) even when the machine runs somewhat faster than during the short warm-up.
#: The median, not the fastest call: under load the fastest call was 12 times the
#: median, and 1.5 times its rate made a ``--min-duration 1`` run last 22 s.
OFFLINE_HEADROOM = 1.25
#: Offline: seconds each sample's response costs beyond the model (LoadGen's completion
#: and logging, Python), added to the warm-up's time per sample: 2 µs, below the 5-6 µs
#: seen here, so that the estimate stays above the real rate.
OFFLINE_SAMPLE_OVERHEAD_S = 2e-6
#: Server: the target QPS is this share of the rate of the warm-up's fastest one-sample
#: call (a busy machine slows the median more than the fastest call)...
SERVER_LOAD = 0.3
#: ... and at most this many queries per second: each query costs LoadGen and Python
#: tens of microseconds besides the model, so a fast model's rate overstates capacity.
SERVER_MAX_QPS = 500.0
#: Single-stream and multi-stream: LoadGen's expected latency is the warm-up's fastest
#: call divided by this, so that it generates more queries than the run needs.
EXPECTED_LATENCY_DIVISOR = 2.0
#: ... and at most this (100 µs: 20,000 queries generated for two seconds).
EXPECTED_LATENCY_CAP_S = 1e-4
_WORKER_MODULE = "d5core.loadgen.worker"
_SAFE_PATH: tuple[str, ...] = ("-P",) if sys.version_info >= (3, 11) else ()
#: The checks LoadGen's summary lists, and d5's own latency bound check.
LATENCY_BOUND_CHECK = "Latency bound satisfied"


# -- settings ------------------------------------------------------------------------------


def _sample_bytes(network: Any) -> int:
    """Bytes of one sample's inputs (a symbolic dimension past the first counts as 1)."""
    import numpy as np

    total = 0
    for info in network.inputs:
        dims = [int(d) if isinstance(d, int) and d > 0 else 1 for d in (info.shape or [])[1:]]
        try:
            itemsize = np.dtype(info.dtype).itemsize
        except TypeError:
            itemsize = 8
        total += int(np.prod(dims, dtype=np.float64)) * itemsize
    return total


def check_fits(network: Any, settings: ScenarioSettings, batch: int | None = None) -> None:
    """Refuse, before any worker starts, a scenario the model's inputs cannot be batched
    for, or whose sample library and one query's inputs cannot fit in memory.

    A model can be sampled when every input that has a shape either has a symbolic first
    dimension or all of them fix the same one (the graph's batch): an input whose first
    dimension is fixed beside batched ones (a weight fed as an input) cannot be cut into
    samples, nor its samples stacked into one call.

    :raises UsageError: one line naming the input or the figure.
    """
    from d5core.loadgen.settings import available_memory, format_bytes
    from d5core.loadgen.sut import fixed_batch

    settings.check()
    fixed_batch(network)  # a model with no batched input at all is refused there
    shaped = [info for info in network.inputs if info.shape]
    symbolic = [info for info in shaped if info.shape[0] is None]
    fixed = [info for info in shaped if info.shape[0] is not None]
    name = network.name or "the model"
    if symbolic and fixed:
        info = fixed[0]
        raise UsageError(
            f"the {settings.scenario} scenario cannot batch {name}'s inputs: input "
            f"{info.name!r} has the fixed first dimension {info.shape[0]} beside the batched "
            f"input {symbolic[0].name!r}; give every input a symbolic batch dimension"
        )
    if not symbolic and len({int(info.shape[0] or 0) for info in fixed}) > 1:
        firsts = ", ".join(f"{i.name!r} {i.shape[0]}" for i in fixed)
        raise UsageError(
            f"the {settings.scenario} scenario cannot batch {name}'s inputs: their first "
            f"dimensions differ ({firsts})"
        )
    per_sample = _sample_bytes(network)
    call = max(settings.query_size, batch or 1)
    if settings.scenario == "offline":
        call = batch or 32
    need = per_sample * (settings.sample_count + call)
    free = available_memory()
    if need > free:
        raise UsageError(
            f"{settings.sample_count} library samples and a call of {call} of {name} need "
            f"about {format_bytes(need)} ({format_bytes(per_sample)} a sample) where "
            f"{format_bytes(free)} is available; lower --samples-per-query or --batch"
        )


def resolve_settings(settings: ScenarioSettings, warm: Mapping[str, float]) -> ScenarioSettings:
    """``settings`` with every value left ``None`` that the scenario uses filled in:
    the sample count, samples per query, the server's latency bound
    (:data:`~d5core.loadgen.settings.DEFAULT_SERVER_LATENCY_MS`) and target QPS
    (:data:`SERVER_LOAD` times the fastest one-sample call's rate
    ``warm["single_best_rate"]``, at most
    :data:`SERVER_MAX_QPS`), and the offline expected QPS (:data:`OFFLINE_HEADROOM`
    times ``warm["batch_rate"]``, the median batched call's rate, with
    :data:`OFFLINE_SAMPLE_OVERHEAD_S` added to each sample's time)."""
    changes: dict[str, Any] = {}
    if settings.performance_sample_count is None:
        changes["performance_sample_count"] = DEFAULT_SAMPLE_COUNT
    if settings.scenario == "multi-stream" and settings.samples_per_query is None:
        changes["samples_per_query"] = DEFAULT_SAMPLES_PER_QUERY
    if settings.scenario == "server":
        if settings.latency_bound_ms is None:
            changes["latency_bound_ms"] = DEFAULT_SERVER_LATENCY_MS
        if settings.target_qps is None:
            rate = warm.get("single_best_rate", warm["single_rate"])
            qps = min(SERVER_MAX_QPS, SERVER_LOAD * rate)
            changes["target_qps"] = round(max(1.0, qps), 1)
    if settings.scenario == "offline" and settings.expected_qps is None:
        rate = warm["batch_rate"]
        if rate > 0:  # each sample's response costs LoadGen and Python a few µs more
            rate = 1.0 / (1.0 / rate + OFFLINE_SAMPLE_OVERHEAD_S)
        changes["expected_qps"] = round(max(1.0, OFFLINE_HEADROOM * rate), 1)
    return settings.with_values(**changes) if changes else settings


def _expected_ns(best_s: float) -> int:
    """The expected latency to give LoadGen: half the fastest call, at most
    :data:`EXPECTED_LATENCY_CAP_S` and at least 1 µs. It only sizes the queries LoadGen
    generates in advance: too few end the run early with an error (a warm-up slowed by
    a busy machine would give too few), too many cost memory."""
    seconds = min(best_s / EXPECTED_LATENCY_DIVISOR, EXPECTED_LATENCY_CAP_S)
    return max(1000, int(seconds * 1e9))


def test_settings(settings: ScenarioSettings, warm: Mapping[str, float] | None = None) -> Any:
    """LoadGen's ``TestSettings`` for resolved ``settings`` (:func:`resolve_settings`).

    The expected latencies of single-stream and multi-stream only size the queries
    LoadGen generates in advance; they come from the warm-up's ``warm`` when given:
    its fastest call (``*_best_latency_s``), else its median (``*_latency_s``), see
    :func:`_expected_ns`.
    """
    import mlperf_loadgen as lg

    ts = lg.TestSettings()
    ts.scenario = getattr(lg.TestScenario, LOADGEN_SCENARIOS[settings.scenario])
    accuracy = settings.mode == "accuracy"
    ts.mode = lg.TestMode.AccuracyOnly if accuracy else lg.TestMode.PerformanceOnly
    ts.min_duration_ms = round(settings.min_duration_s * 1000)
    ts.min_query_count = settings.min_query_count
    ts.qsl_rng_seed = settings.seed
    ts.sample_index_rng_seed = settings.seed
    ts.schedule_rng_seed = settings.seed
    ts.performance_sample_count_override = settings.sample_count
    warm = warm or {}
    single = warm.get("single_best_latency_s", warm.get("single_latency_s"))
    batched = warm.get("batch_best_latency_s", warm.get("batch_latency_s"))
    if settings.scenario == "single-stream" and single is not None:
        ts.single_stream_expected_latency_ns = _expected_ns(single)
    if settings.scenario == "multi-stream":
        ts.multi_stream_samples_per_query = settings.query_size
        if batched is not None:
            ts.multi_stream_expected_latency_ns = _expected_ns(batched)
    if settings.scenario == "server":
        ts.server_target_qps = float(settings.target_qps or 1.0)
        bound = settings.latency_bound_ms or DEFAULT_SERVER_LATENCY_MS
        ts.server_target_latency_ns = int(bound * 1e6)
    if settings.scenario == "offline":
        ts.offline_expected_qps = float(settings.expected_qps or 1.0)
    return ts


def start_test(sut: Any, qsl: Any, ts: Any, log_dir: Path) -> None:
    """Run LoadGen's test on ``sut`` and ``qsl`` with the settings ``ts``, its logs
    (summary, detail, trace and accuracy log) written to ``log_dir`` (created)."""
    import mlperf_loadgen as lg

    log_dir.mkdir(parents=True, exist_ok=True)
    output = lg.LogOutputSettings()
    output.outdir = str(log_dir)
    output.copy_summary_to_stdout = False
    log = lg.LogSettings()
    log.log_output = output
    log.enable_trace = True  # every sample's latency, read back by trace_latencies
    lg.StartTestWithLogSettings(sut, qsl, ts, log)


# -- LoadGen's logs ------------------------------------------------------------------------

_NUMBER = re.compile(r"^-?\d+(\.\d+)?([eE][-+]?\d+)?$")
_CHECK = re.compile(r"^\s*(.+? satisfied)\s*:\s*(Yes|NO|No)\s*$")
_ESTIMATE = re.compile(r"Early stopping (\d+(?:\.\d+)?)th percentile estimate: (\d+)")
_PERCENTILE = re.compile(r"^(\d+(?:\.\d+)?) percentile latency \(ns\)$")


def _number(text: str) -> float | None:
    text = text.strip()
    return float(text) if _NUMBER.match(text) else None


def _percentile_key(text: str) -> str:
    """``"99.90"`` -> ``"99.9"``, ``"50.00"`` -> ``"50"``, ``"90.0"`` -> ``"90"``."""
    return f"{float(text):g}"


def parse_summary(text: str) -> dict[str, Any]:
    """What ``mlperf_log_summary.txt`` says, as a dictionary.

    Keys: ``scenario``, ``mode``, ``result`` (``VALID``/``INVALID``, ``None`` when the
    summary has none, as in accuracy mode), ``checks`` (check name -> passed),
    ``metric`` (label) and ``metric_value``, ``early_stopping`` (``lines`` and
    ``estimates_ns``: percentile -> ns), ``recommendations``, ``stats`` (every
    "name : number" line of the additional statistics), ``percentiles_ns``, ``qps_with_
    overhead``, ``qps_without_overhead``, ``parameters`` (the test parameters used),
    ``warnings`` and ``errors`` (the closing lines).
    """
    out: dict[str, Any] = {
        "scenario": None, "mode": None, "result": None, "checks": {}, "metric": None,
        "metric_value": None, "early_stopping": {"lines": [], "estimates_ns": {}},
        "recommendations": [], "stats": {}, "percentiles_ns": {}, "qps_with_overhead": None,
        "qps_without_overhead": None, "parameters": {}, "warnings": "", "errors": "",
    }  # fmt: skip
    section = "head"
    block = ""
    for raw in text.splitlines():
        line = raw.rstrip()
        stripped = line.strip()
        if not stripped or set(stripped) == {"="}:
            block = ""
            continue
        if stripped == "Additional Stats":
            section = "stats"
            continue
        if stripped == "Test Parameters Used":
            section = "parameters"
            continue
        lowered = stripped.lower()
        if "encountered" in lowered and ("warning" in lowered or "error" in lowered):
            out["warnings" if "warning" in lowered else "errors"] = stripped
            continue
        key, sep, value = (s.strip() for s in line.partition(":"))
        if section == "head":
            check = _CHECK.match(line)
            if check:
                out["checks"][check.group(1)] = check.group(2) == "Yes"
                continue
            if stripped == "Recommendations:":
                block = "recommendations"
                continue
            if stripped == "Early Stopping Result:":
                block = "early"
                continue
            if block and line.startswith(" "):  # an item, or the rest of one
                items = out["recommendations" if block == "recommendations" else "early_stopping"]
                lines = items if block == "recommendations" else items["lines"]
                item = stripped.lstrip("*").strip()
                if stripped.startswith("*") or not lines:
                    lines.append(item)
                else:
                    lines[-1] = f"{lines[-1]} {item}"
                found = _ESTIMATE.search(stripped)
                if block == "early" and found:
                    pct = _percentile_key(found.group(1))
                    items["estimates_ns"][pct] = float(found.group(2))
                continue
            if not sep:
                continue
            if key == "Scenario":
                out["scenario"] = value
            elif key == "Mode":
                out["mode"] = value
            elif key == "Result is":
                out["result"] = value
            elif key != "SUT name" and _number(value) is not None and out["metric"] is None:
                out["metric"], out["metric_value"] = key, _number(value)
        elif section == "stats" and sep:
            number = _number(value)
            if number is None:
                continue
            out["stats"][key] = number
            level = _PERCENTILE.match(key)
            if level:
                out["percentiles_ns"][_percentile_key(level.group(1))] = number
            elif key == "QPS w/ loadgen overhead":
                out["qps_with_overhead"] = number
            elif key == "QPS w/o loadgen overhead":
                out["qps_without_overhead"] = number
        elif section == "parameters" and sep:
            number = _number(value)
            out["parameters"][key] = value if number is None else number
    return out


def parse_detail(text: str) -> dict[str, Any]:
    """What ``mlperf_log_detail.txt`` says: ``values`` (every ``:::MLLOG`` key -> its
    last value), ``errors`` and ``warnings`` (the messages of entries LoadGen marked so).
    Lines that are not LoadGen's JSON entries are skipped."""
    values: dict[str, Any] = {}
    errors: list[str] = []
    warnings: list[str] = []
    for line in text.splitlines():
        _, marker, payload = line.partition(":::MLLOG")
        if not marker:
            continue
        try:
            entry = json.loads(payload)
        except json.JSONDecodeError:
            continue
        if not isinstance(entry, dict) or "key" not in entry:
            continue
        values[str(entry["key"])] = entry.get("value")
        meta = entry.get("metadata") or {}
        message = f"{entry['key']}: {entry.get('value')}"
        if meta.get("is_error"):
            errors.append(message)
        elif meta.get("is_warning"):
            warnings.append(message)
    return {"values": values, "errors": errors, "warnings": warnings}


_TRACE_SAMPLE = re.compile(r'"name":"Sample".*?"ph":"b".*?"args":\{(.*?)\}')
_TRACE_ARG = re.compile(r'"(\w+)":(-?\d+)')


def trace_latencies(text: str, *, per_query: bool = False) -> list[float]:
    """Every sample's latency (s) from LoadGen's trace (``mlperf_log_trace.json``), in
    the order LoadGen issued them; with ``per_query``, every query's: the latest of its
    samples, as LoadGen counts a multi-stream query."""
    samples: list[tuple[int, float]] = []
    for line in text.splitlines():
        found = _TRACE_SAMPLE.search(line)
        if not found:
            continue
        args = {k: int(v) for k, v in _TRACE_ARG.findall(found.group(1))}
        if "complete_ns" in args:
            samples.append((args.get("query_seq", len(samples)), args["complete_ns"] / 1e9))
    if not per_query:
        return [s for _, s in samples]
    queries: dict[int, float] = {}
    for seq, latency in samples:
        queries[seq] = max(latency, queries.get(seq, 0.0))
    return [queries[seq] for seq in sorted(queries)]


# -- the result ----------------------------------------------------------------------------


@dataclass
class ScenarioResult:
    """One executor's LoadGen run, as its logs tell it.

    ``valid`` is LoadGen's VALID/INVALID (``None`` in accuracy mode), ``False`` as well
    when d5's latency bound check failed; ``failed_checks`` names every check that did
    not hold. ``metric_name``/``metric_value`` is the scenario's metric, latencies in
    seconds (single-stream: the 90th percentile; multi-stream: the 99th; server:
    completed samples per second; offline: samples per second). ``latencies_s`` holds
    the latencies the percentiles are computed from: per query in multi-stream, per
    sample otherwise. ``qps_with_overhead`` is LoadGen's "QPS w/ loadgen overhead" in
    single-stream and multi-stream, and the metric (samples per second) in server and
    offline, whose summaries give no other rate (``qps_without_overhead`` is ``None``
    there). ``settings`` are those LoadGen ran with, defaults filled in.
    """

    executor: str
    scenario: str
    mode: str
    valid: bool | None
    failed_checks: list[str]
    metric_name: str
    metric_value: float | None
    percentiles_s: dict[str, float]
    qps_with_overhead: float | None
    qps_without_overhead: float | None
    early_stopping: dict[str, Any]
    latencies_s: list[float]
    log_dir: str
    settings: ScenarioSettings
    threads: dict[str, Any]
    samples_issued: int
    accuracy: dict[str, Any] | None = None
    #: The warm-up's measurements, LoadGen's warnings and errors, the executor calls.
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Every field, JSON-ready."""
        data = asdict(self)
        data["settings"] = self.settings.to_json()
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ScenarioResult:
        """The result :meth:`to_json` wrote."""
        values = dict(data)
        values["settings"] = ScenarioSettings.from_json(values["settings"])
        values["percentiles_s"] = {str(k): float(v) for k, v in values["percentiles_s"].items()}
        values["latencies_s"] = [float(v) for v in values["latencies_s"]]
        return cls(**values)


def _metric_label(label: str | None) -> str:
    if label is None:
        return ""
    return label.replace("(ns)", "(s)")


def read_result(
    executor: str,
    settings: ScenarioSettings,
    log_dir: Path,
    *,
    threads: Mapping[str, Any] | None = None,
    samples_issued: int = 0,
    details: Mapping[str, Any] | None = None,
) -> ScenarioResult:
    """The :class:`ScenarioResult` of the LoadGen logs in ``log_dir``.

    :raises ScenarioFailed: when LoadGen wrote no summary, or logged errors.
    """
    summary_path = log_dir / "mlperf_log_summary.txt"
    if not summary_path.is_file():
        raise ScenarioFailed(f"LoadGen wrote no summary into {log_dir}; the test did not run")
    summary = parse_summary(summary_path.read_text(errors="replace"))
    detail_path = log_dir / "mlperf_log_detail.txt"
    detail = parse_detail(detail_path.read_text(errors="replace")) if detail_path.is_file() else {}
    if detail.get("errors"):
        raise ScenarioFailed(f"LoadGen logged an error: {detail['errors'][0]}")
    trace_path = log_dir / "mlperf_log_trace.json"
    latencies = (
        trace_latencies(
            trace_path.read_text(errors="replace"), per_query=settings.scenario == "multi-stream"
        )
        if trace_path.is_file()
        else []
    )
    accuracy_mode = settings.mode == "accuracy"
    failed = [name for name, ok in summary["checks"].items() if not ok]
    valid: bool | None = None if accuracy_mode else summary["result"] == "VALID"
    percentiles = {k: v / 1e9 for k, v in summary["percentiles_ns"].items()}
    bound = settings.latency_bound_ms
    if not accuracy_mode and bound is not None and settings.scenario != "server":
        pct = "90" if settings.scenario == "single-stream" else "99"
        if pct in percentiles and percentiles[pct] * 1e3 > bound:
            seen = percentiles[pct] * 1e3
            failed.append(f"{LATENCY_BOUND_CHECK} (p{pct} {seen:.3g} ms > {bound:g} ms)")
            valid = False
    value = summary["metric_value"]
    label = summary["metric"]
    if value is not None and label is not None and "(ns)" in label:
        value = value / 1e9
    qps = summary["qps_with_overhead"]
    if qps is None and settings.scenario in ("server", "offline"):
        qps = value  # their metric is the rate LoadGen saw, its overhead included
    early = {
        "met": summary["checks"].get("Early stopping satisfied"),
        "lines": summary["early_stopping"]["lines"],
        "estimates_s": {k: v / 1e9 for k, v in summary["early_stopping"]["estimates_ns"].items()},
    }
    extra = dict(details or {})
    extra["loadgen"] = {
        "warnings": detail.get("warnings", []),
        "recommendations": summary["recommendations"],
        "query_count": (detail.get("values") or {}).get("result_query_count"),
        "summary_warnings": summary["warnings"],
    }
    return ScenarioResult(
        executor=executor,
        scenario=settings.scenario,
        mode=settings.mode,
        valid=valid,
        failed_checks=failed,
        metric_name=_metric_label(label),
        metric_value=value,
        percentiles_s=percentiles,
        qps_with_overhead=qps,
        qps_without_overhead=summary["qps_without_overhead"],
        early_stopping=early,
        latencies_s=latencies,
        log_dir=str(log_dir),
        settings=settings,
        threads=dict(threads or {}),
        samples_issued=samples_issued,
        details=extra,
    )


# -- the worker process --------------------------------------------------------------------


def _exit_description(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def _last_line(text: str) -> str:
    lines = [" ".join(line.split()) for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _events(stdout: str) -> list[dict[str, Any]]:
    events = []
    for line in stdout.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict) and "event" in event:
            events.append(event)
    return events


def default_timeout(settings: ScenarioSettings) -> float:
    """Seconds a worker may take before it is killed: generous, as an offline run whose
    expected QPS overshoots takes longer than its minimum duration."""
    return 300.0 + 20.0 * settings.min_duration_s


def run_scenario(
    model: str | Path,
    executor: str,
    settings: ScenarioSettings,
    log_dir: Path,
    *,
    batch: int | None = None,
    timeout_s: float | None = None,
) -> ScenarioResult:
    """Run ``executor`` on ``model`` under LoadGen in a fresh worker process and return
    what its logs say; see the module docstring.

    :param log_dir: where LoadGen writes its logs (created; files already there are
        replaced).
    :param batch: samples per executor call in multi-stream and offline (see
        :func:`~d5core.loadgen.sut.call_batch`).
    :param timeout_s: kill the worker after this long (:func:`default_timeout` when
        ``None``).
    :raises UsageError: for bad settings, an unknown model or executor (one line).
    :raises ScenarioFailed: when the worker dies, times out or fails (one line).
    """
    from d5core.lv1.runner import load_model

    settings.check()
    check_fits(load_model(str(model)), settings, batch)
    log_dir = Path(log_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    for stale in log_dir.glob("mlperf_log_*"):
        stale.unlink()
    request = {
        "model": str(model),
        "executor": executor,
        "settings": settings.to_json(),
        "log_dir": str(log_dir.resolve()),
        "batch": batch,
    }
    env = {**os.environ, **thread_environment(settings.threads)}
    limit = default_timeout(settings) if timeout_s is None else timeout_s
    proc = subprocess.Popen(
        [sys.executable, *_SAFE_PATH, "-m", _WORKER_MODULE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        preexec_fn=die_with_parent(),  # SIGKILL of d5 left it running 30-60 s
    )
    what = f"the {executor} worker ({settings.scenario})"
    try:
        stdout, stderr = proc.communicate(json.dumps(request), timeout=limit)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, stderr = proc.communicate()
        raise ScenarioFailed(f"{what} timed out after {limit:g} s and was killed") from None
    events = _events(stdout)
    for event in events:
        if event["event"] == "usage-error":
            raise UsageError(str(event["error"]))
        if event["event"] == "error":
            raise ScenarioFailed(f"{what} failed: {event['error']}")
    done = next((e for e in events if e["event"] == "done"), None)
    if done is None or proc.returncode != 0:
        why = _last_line(stderr)
        raise ScenarioFailed(
            f"{what} {_exit_description(proc.returncode)} before it reported a result"
            + (f": {why}" if why else "")
        )
    resolved = ScenarioSettings.from_json(done["settings"])
    result = read_result(
        executor,
        resolved,
        log_dir,
        threads=done.get("threads"),
        samples_issued=int(done.get("samples", 0)),
        details={"warm_up": done.get("warm_up", {}), "calls": done.get("calls", 0),
                 "batch": done.get("batch"), "started_us": done.get("started_us")},
    )  # fmt: skip
    if settings.mode == "accuracy":
        result.accuracy = {
            "log": str(log_dir / "mlperf_log_accuracy.json"),
            "sample_indices": list(range(resolved.sample_count)),
            "outputs": done.get("layout", []),
        }
    return result
