"""What recording a run costs in the results store, SQLite beside PostgreSQL (issue 34).

One *run* is what every d5 command does to store its results: ``begin_run`` (with an
environment captured once beforehand, so that only the store is timed),
``add_measurement`` of N raw samples, ``add_metric``, ``finish_run``. It is written
``--repeats`` times for each N (10, 1000 and 100000 samples by default), the backends
taking turns within each repeat (the order alternating), and the table gives, per
backend and N, the median over the repeats with the min-max range: the whole run, the
measurement per sample, and each call.

None of this is inside a timed region: the script ends by citing, with their current
line numbers, where d5 writes to the store relative to its timers (``d5 bench op``
measures in worker processes and stores afterwards; ``d5 run`` times each step and
flushes the samples between steps, as the part ``recording`` of its time to accuracy).

    .venv/bin/python benchmarks/store_write_cost.py [--samples 10,1000,100000]
        [--repeats 7] [--backends sqlite,postgresql] [--postgres URL] [--json]

Without ``--postgres``, a private PostgreSQL cluster is started in a temporary folder
for the run (:mod:`d5core.testing.postgres`; needs Debian's PostgreSQL) and stopped.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from _machine import load, machine
from _stores import add_store_arguments, store_targets

from d5core.environment import capture_environment
from d5core.plugins import PluginManager
from d5core.results import ResultsStore

ROOT = Path(__file__).resolve().parents[1]
CALLS = ("begin_run", "add_measurement", "add_metric", "finish_run")

#: Where d5 writes to the store relative to its timers: (file, a pattern its line
#: matches, what that line shows). Found anew at every run, so the lines stay current.
PLACES: tuple[tuple[str, str, str], ...] = (
    ("d5core/lv0/bench_run.py", r"with store\.run\(\"op\"",
     "`d5 bench op` begins its run (begin_run) before any worker process starts"),
    ("d5core/lv0/bench_run.py", r"measured = measure\(",
     "the workers measure; the parent process waits and writes nothing meanwhile"),
    ("d5core/measure/_worker.py", r"m = measure\(",
     "the engine times the job in a worker process, which never opens the store"),
    ("d5core/lv0/bench_common.py", r"store\.update_config\(",
     "once every worker has ended: the rounds go into the run's config"),
    ("d5core/lv0/bench_run.py", r"rows, timings = _op_results\(",
     "then the samples (add_measurement) and metrics are stored"),
    ("d5core/lv2/trainer.py", r"loss, n, seconds = run_step\(",
     "`d5 run`: a training step times itself (step_time)"),
    ("d5core/lv2/trainer.py", r"on_progress\(curves\)$",
     "after the step's timer: the recorder flushes new samples (append_samples)"),
    ("d5core/lv2/trainer.py", r"spent\[\"recording\"\] \+=",
     "after a test pass, too; both named `recording` among the parts of the time to accuracy"),
)  # fmt: skip


def one_run(store: ResultsStore, env: dict[str, Any], values: list[float]) -> dict[str, float]:
    """Write one run of ``values`` and return each call's seconds."""
    clock = time.perf_counter
    t0 = clock()
    run_id = store.begin_run("measure", "store write cost", environment=env, seed=0)
    t1 = clock()
    store.add_measurement(run_id, "time", values, labels={"n": len(values)})
    t2 = clock()
    store.add_metric(run_id, "samples", float(len(values)))
    t3 = clock()
    store.finish_run(run_id)
    t4 = clock()
    return {"begin_run": t1 - t0, "add_measurement": t2 - t1, "add_metric": t3 - t2,
            "finish_run": t4 - t3, "run": t4 - t0}  # fmt: skip


def places() -> list[dict[str, Any]]:
    """The lines of :data:`PLACES`, looked up in the source now."""
    found = []
    for path, pattern, what in PLACES:
        lines = (ROOT / path).read_text().splitlines()
        hit = next((i for i, line in enumerate(lines, 1) if re.search(pattern, line)), None)
        found.append({"where": f"{path}:{hit}" if hit else f"{path} (not found)", "what": what})
    return found


def spread(values: list[float], scale: float = 1.0) -> dict[str, float]:
    return {
        "median": statistics.median(values) * scale,
        "min": min(values) * scale,
        "max": max(values) * scale,
    }


def _fmt(seconds: float) -> str:
    for unit, factor in (("s", 1.0), ("ms", 1e3), ("µs", 1e6), ("ns", 1e9)):
        if seconds * factor >= 1.0 or unit == "ns":
            return f"{seconds * factor:.3g} {unit}"
    raise AssertionError


def cell(s: dict[str, float]) -> str:
    return f"{_fmt(s['median'])} ({_fmt(s['min'])}–{_fmt(s['max'])})"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", default="10,1000,100000")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", action="store_true")
    add_store_arguments(parser)
    args = parser.parse_args()
    sizes = [int(n) for n in args.samples.split(",") if n]
    env = capture_environment()  # once: begin_run is timed, not the capture
    manager = PluginManager({}, discover_installed=False)  # the store alone, no plugin hooks
    times: dict[tuple[str, int], list[dict[str, float]]] = {}
    with store_targets(args) as targets:
        stores = {b: ResultsStore.open(db, manager=manager) for b, db in targets.items()}
        try:
            for store in stores.values():  # warm: tables made, statements prepared
                one_run(store, env, [1.0] * 10)
            for n in sizes:
                values = [1e-3 + i * 1e-9 for i in range(n)]
                for r in range(args.repeats):
                    order = list(stores) if r % 2 == 0 else list(reversed(stores))
                    for backend in order:
                        times.setdefault((backend, n), []).append(
                            one_run(stores[backend], env, values)
                        )
        finally:
            for store in stores.values():
                store.close()
    rows: list[dict[str, Any]] = []
    for (backend, n), runs in times.items():
        rows.append({
            "backend": backend, "samples": n, "repeats": len(runs),
            "run_s": spread([t["run"] for t in runs]),
            "per_sample_s": spread([t["add_measurement"] for t in runs], 1.0 / n),
            **{f"{c}_s": spread([t[c] for t in runs]) for c in CALLS},
        })  # fmt: skip
    rows.sort(key=lambda row: (row["samples"], row["backend"]))
    where = places()
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if args.json:
        doc = {"machine": machine(), "load": load(), "date": when, "rows": rows, "places": where}
        print(json.dumps(doc, indent=2))
        return 0
    print(f"# {machine()}; {load()}; {when}")
    print(f"# median over {args.repeats} repeats (min–max)")
    print("| samples | backend | a whole run | per sample (add_measurement / N) | "
          "begin_run | add_measurement | add_metric | finish_run |")  # fmt: skip
    print("|---:|---|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        cells = [cell(row["run_s"]), cell(row["per_sample_s"])]
        cells += [cell(row[f"{c}_s"]) for c in CALLS]
        print(f"| {row['samples']} | {row['backend']} | " + " | ".join(cells) + " |")
    print()
    print("Where d5 writes to the store, relative to its timers:")
    for place in where:
        print(f"- {place['where']}: {place['what']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
