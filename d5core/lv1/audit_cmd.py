"""``d5 audit net``: MLPerf-style audit tests of a network's timed step on each executor
(accuracy while timed, no caching, seed variation), one line per check; exit 1 when one
fails. The runner is :func:`d5core.lv0.audit_run.run_audit`; see ``docs/audit.md``."""

from __future__ import annotations

from pathlib import Path

import click

from d5core.cli._parse import parse_list
from d5core.cli.options import db_option, json_option
from d5core.cli.tag_option import tag_option
from d5core.lv0.audit_cmd import audit_options_of, report_audit
from d5core.lv0.bench_common import timeout_option

__all__ = ["audit_net"]


@click.command("net")
@click.argument("model")
@click.option("--executors", required=True, help="Comma-separated executors, e.g. numpy,torch.")
@click.option("--batch", type=int, default=None, help="Samples per step (default 32).")
@click.option("--mode", type=click.Choice(["inference", "train-step"]), default="inference",
              show_default=True)  # fmt: skip
@audit_options_of
@timeout_option
@json_option
@db_option
@tag_option
def audit_net(
    model: str,
    executors: str,
    batch: int | None,
    mode: str,
    seed: int,
    processes: int,
    cpus: str | None,
    min_samples: int,
    time_budget: float,
    warmup: int,
    timeout: float | None,
    as_json: bool,
    db: str | Path | None,
    tags: tuple[str, ...],
) -> None:
    """Audit MODEL's step on each executor as MLPerf audits inference: the outputs of
    timed steps equal the untimed inference, repeated feeds are not faster than fresh
    ones, and other seeds time alike. One line per check; exit 1 when one fails."""
    from d5core.lv0.audit_run import audit_options, run_audit
    from d5core.lv1.runner import check_trains, executor_by_name, network_workload
    from d5core.measure.invocations import Job, parse_cpus

    names = parse_list(executors, "executors")
    work = network_workload(model, batch=batch, mode=mode, seed=seed)
    for name in names:
        check_trains(executor_by_name(name, work.network), name, mode)
    jobs: dict[str, dict[str, Job]] = {}
    for name in names:
        base = {"model": model, "executor": name, "batch": batch, "mode": mode}
        roles = {
            "base": Job("net", {**base, "seed": seed}, name=f"{name} base"),
            "seed+1": Job("net", {**base, "seed": seed + 1}, name=f"{name} seed+1"),
            "seed+2": Job("net", {**base, "seed": seed + 2}, name=f"{name} seed+2"),
        }
        for inputs in ("fresh", "same"):
            args = {**base, "seed": seed, "inputs": inputs}
            roles[inputs] = Job(
                "d5core.lv1.audit_jobs:audit_net_job", args, name=f"{name} {inputs}"
            )
        jobs[name] = roles
    config = {"model": model, "executors": names, "batch": work.batch, "mode": mode, "level": 1}
    found = run_audit(
        f"audit net {model} {mode}", jobs, config=config, processes=processes,
        options=audit_options(min_samples, time_budget, warmup), seed=seed,
        cpus=None if cpus is None else parse_cpus(cpus), db=db, tags=tags, timeout=timeout,
    )  # fmt: skip
    report_audit(found, as_json)
