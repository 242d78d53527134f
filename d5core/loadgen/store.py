"""Storing inference runs: LoadGen's figures and logs in the results store.

One ``d5 bench net --scenario`` invocation is one run (kind :data:`RUN_KIND`, named by
:func:`run_name`) holding every executor it ran. :func:`store_scenario` adds one
executor's :class:`~d5core.loadgen.loadgen.ScenarioResult`:

- the measurement ``latency`` (s, every latency LoadGen logged; labels executor,
  scenario and mode; lower is better);
- metrics labelled by executor and scenario: ``latency_p50`` ... ``latency_p99.9`` (s),
  ``qps`` and ``qps_without_overhead``, ``valid`` (1 or 0), ``early_stopping_latency_p90``
  and ``_p99`` where LoadGen estimates them, and ``accuracy_passed`` (1 or 0) once an
  accuracy check ran;
- under the config key ``inference``: the model, the scenario, and per executor its
  settings, failed checks, threads, and the names its logs are kept under.

LoadGen's log files are kept in the database as the run's artifacts
(:meth:`~d5core.results.ResultsStore.add_artifact`), named ``<executor>/<file>``, so
they live as long as the run does, on either backend, and travel with it (export,
merge); the large ones (the trace) gzip-compressed (:func:`keep_logs`). Runs stored
before kept them in files beside an SQLite database (:func:`artifacts_dir`);
:func:`kept_log_names` lists both. :func:`record_failure` notes an executor that could
not be run.
"""

from __future__ import annotations

import gzip
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from d5core.errors import UsageError
from d5core.loadgen.loadgen import PERCENTILES, ScenarioResult

__all__ = [
    "COMPRESS_ABOVE",
    "CONFIG_KEY",
    "RUN_KIND",
    "artifacts_dir",
    "keep_logs",
    "kept_log_names",
    "record_failure",
    "run_name",
    "store_scenario",
]

#: The kind of every inference run.
RUN_KIND = "inference"
#: The run config key under which inference runs keep their per-executor facts.
CONFIG_KEY = "inference"
#: Log files this large or larger are kept gzip-compressed (1 MiB).
COMPRESS_ABOVE = 1 << 20


def run_name(model: str, scenario: str) -> str:
    """The name of the run of ``model`` in ``scenario``: ``inference lenet5 server``."""
    return f"inference {model} {scenario}"


def artifacts_dir(db_path: str | Path, run_id: str) -> Path:
    """Where runs stored before LoadGen's logs went into the database kept them:
    ``<db stem>.artifacts/<run_id>`` next to the database file."""
    db = Path(db_path)
    return db.parent / f"{db.stem}.artifacts" / run_id


def keep_logs(store: Any, run_id: str, log_dir: str | Path, prefix: str) -> list[str]:
    """Keep every file of ``log_dir`` with the run, as the artifact ``prefix + name``;
    return the names kept (without ``prefix``), sorted.

    A file of :data:`COMPRESS_ABOVE` bytes or more is kept gzip-compressed, named with
    ``.gz`` added: LoadGen's trace of a few seconds of a fast model runs to tens of
    megabytes, and compresses about sixteenfold.

    :raises UsageError: when ``log_dir`` is missing or a file cannot be read.
    """
    source = Path(log_dir)
    if not source.is_dir():
        raise UsageError(f"LoadGen's log directory {source} does not exist; nothing to keep")
    names = []
    for item in sorted(source.iterdir()):
        if not item.is_file():
            continue
        try:
            data = item.read_bytes()
        except OSError as exc:
            raise UsageError(
                f"cannot read LoadGen's log {item} to keep it: {exc.strerror or exc}"
            ) from exc
        name = item.name
        if len(data) >= COMPRESS_ABOVE:
            name, data = f"{name}.gz", gzip.compress(data, compresslevel=1)
        store.add_artifact(run_id, prefix + name, data)
        names.append(name)
    return names


def kept_log_names(store: Any, run_id: str) -> list[str]:
    """The names of the log files kept with a run, sorted: its artifacts, and for a run
    stored before they went into the database, the files under :func:`artifacts_dir`
    beside an SQLite database (named by their path there, with ``/``)."""
    names = set(store.artifact_names(run_id))
    if store.backend == "sqlite":
        old = artifacts_dir(store.path, run_id)
        if old.is_dir():
            names.update(p.relative_to(old).as_posix() for p in old.rglob("*") if p.is_file())
    return sorted(names)


def _update(store: Any, run_id: str, model: str, scenario: str, name: str, facts: Any) -> None:
    """Merge one executor's ``facts`` into the run's ``inference`` config."""
    config = store.get_run(run_id).config
    current: dict[str, Any] = dict(config.get(CONFIG_KEY) or {})
    current.setdefault("model", model)
    current.setdefault("scenario", scenario)
    executors = dict(current.get("executors") or {})
    executors[name] = facts
    current["executors"] = executors
    store.update_config(run_id, {CONFIG_KEY: current})


def store_scenario(store: Any, run_id: str, result: ScenarioResult, model: str) -> dict[str, Any]:
    """Store ``result`` in the running run ``run_id`` of ``store`` (see the module
    docstring) and keep its logs as the run's artifacts ``<executor>/<file>``; return
    what was written to the config for it (``log_dir``: where LoadGen wrote them;
    ``artifacts``: the prefix of their names; ``log_files``: the names after it)."""
    labels = {"executor": result.executor, "scenario": result.scenario}
    if result.latencies_s:
        store.add_measurement(
            run_id, "latency", result.latencies_s, unit="s", better="lower",
            labels={**labels, "mode": result.mode},
        )  # fmt: skip
    for pct in PERCENTILES:
        if pct in result.percentiles_s:
            store.add_metric(
                run_id, f"latency_p{pct}", result.percentiles_s[pct], labels=labels, unit="s",
                better="lower",
            )  # fmt: skip
    rate_unit = "samples/s" if result.scenario in ("server", "offline") else "queries/s"
    for name, value in (
        ("qps", result.qps_with_overhead),
        ("qps_without_overhead", result.qps_without_overhead),
    ):
        if value is not None:
            store.add_metric(run_id, name, value, labels=labels, unit=rate_unit, better="higher")
    if result.valid is not None:
        store.add_metric(run_id, "valid", 1.0 if result.valid else 0.0, labels=labels,
                         better="higher")  # fmt: skip
    for pct, value in sorted((result.early_stopping.get("estimates_s") or {}).items()):
        if pct in ("90", "99"):
            store.add_metric(
                run_id, f"early_stopping_latency_p{pct}", value, labels=labels, unit="s",
                better="lower",
            )  # fmt: skip
    accuracy = result.accuracy or {}
    if "passed" in accuracy:
        store.add_metric(run_id, "accuracy_passed", 1.0 if accuracy["passed"] else 0.0,
                         labels=labels, better="higher")  # fmt: skip
    prefix = f"{result.executor}/"
    files = keep_logs(store, run_id, result.log_dir, prefix)
    facts = {
        "valid": result.valid,
        "failed_checks": list(result.failed_checks),
        "metric": {"name": result.metric_name, "value": result.metric_value},
        "settings": result.settings.to_json(),
        "threads": result.threads,
        "samples_issued": result.samples_issued,
        "early_stopping": result.early_stopping,
        "log_dir": result.log_dir,
        "artifacts": prefix,
        "log_files": files,
        "accuracy": _accuracy_facts(accuracy, prefix),
        "details": result.details,
    }
    _update(store, run_id, model, result.scenario, result.executor, facts)
    return facts


def _accuracy_facts(accuracy: Mapping[str, Any], prefix: str) -> dict[str, Any] | None:
    """The accuracy facts to store; ``log`` becomes the artifact name of the log."""
    if not accuracy:
        return None
    facts = {k: v for k, v in accuracy.items() if k != "sample_indices"}
    if "log" in facts:
        facts["log"] = prefix + Path(str(facts["log"])).name
    return facts


def record_failure(
    store: Any, run_id: str, model: str, scenario: str, executor: str, reason: str
) -> None:
    """Note in the running run that ``executor`` failed, with the one-line ``reason``
    (the caller then ends the run ``failed``); earlier executors stay as stored."""
    _update(store, run_id, model, scenario, executor, {"error": " ".join(reason.split())})
