"""Eight writers at once: the results store's throughput, SQLite beside PostgreSQL, and
that nothing is lost (issue 34, item 3).

Two loads, each run against every backend in turn (the order alternating between
repeats), each on a fresh store:

- ``store``: 8 Python processes, started together, each writing ``--runs`` runs as fast
  as it can through the store's API (``begin_run``, ``add_measurement`` of ``--samples``
  samples, ``add_metric``, ``finish_run``): what the store itself sustains.
- ``d5``: 8 real d5 commands at once, as ``tests/integration/test_store_many_writers.py``
  starts them: 4 ``d5 bench op Gemm`` on the numpy reference and 4 ``d5 run
  recipes/digits-mlp.toml`` (which streams its samples in many small transactions), half
  of them given the store as ``--db``, half as ``D5_DB``; here the commands' own start
  and work dominate.

Runs/s is the runs stored divided by the wall time from the first writer's start to the
last one's end. Afterwards every run a writer reported must be in the store exactly once,
``complete``, with all of its samples; any other run, a missing one, a failed writer or
"database is locked" in a writer's output counts as lost.

    .venv/bin/python benchmarks/store_writers.py [--loads store,d5] [--repeats 3]
        [--runs 25] [--samples 1000] [--backends sqlite,postgresql] [--postgres URL] [--json]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _machine import load, machine
from _stores import add_store_arguments, store_targets

ROOT = Path(__file__).resolve().parents[1]
D5 = str(Path(sys.executable).with_name("d5"))
RECIPE = ROOT / "recipes" / "digits-mlp.toml"
WRITERS = 8
LOADS = ("store", "d5")
#: How long one load of 8 writers may take.
DEADLINE_S = 900.0


def _writer_main(db: str, runs: int, samples: int, start_at: float) -> int:
    """One ``store`` writer (run as ``store_writers.py --writer ...``): wait for the common
    start, write the runs, print their ids as JSON."""
    from d5core.environment import capture_environment
    from d5core.plugins import PluginManager
    from d5core.results import ResultsStore

    env = capture_environment()
    values = [1e-3 + i * 1e-9 for i in range(samples)]
    ids = []
    with ResultsStore.open(db, manager=PluginManager({}, discover_installed=False)) as store:
        time.sleep(max(0.0, start_at - time.time()))
        started = time.time()
        for r in range(runs):
            run_id = store.begin_run("measure", f"writer {os.getpid()} run {r}", environment=env)
            store.add_measurement(run_id, "time", values)
            store.add_metric(run_id, "samples", float(samples))
            store.finish_run(run_id)
            ids.append(run_id)
    print(
        json.dumps({"runs": [{"run_id": i} for i in ids], "started": started, "ended": time.time()})
    )
    return 0


def _run_ids(document: Any) -> list[str]:
    """Every ``run_id`` a ``--json`` document names, however deep."""
    if isinstance(document, dict):
        own = [document["run_id"]] if isinstance(document.get("run_id"), str) else []
        return own + [r for key, v in document.items() if key != "run_id" for r in _run_ids(v)]
    if isinstance(document, list):
        return [r for item in document for r in _run_ids(item)]
    return []


def _commands(load_kind: str, db: str, args: argparse.Namespace) -> list[list[str]]:
    if load_kind == "store":
        start_at = time.time() + 8.0  # after every writer has imported d5core and connected
        return [[sys.executable, __file__, "--writer", db, str(args.runs), str(args.samples),
                 repr(start_at)] for _ in range(WRITERS)]  # fmt: skip
    commands = []
    for i in range(WRITERS):
        if i % 2 == 0:
            argv = [D5, "bench", "op", "Gemm", "--backends", "numpy", "--shape", "16x16,16x16",
                    "--processes", "1", "--min-samples", "40", "--max-samples", "40",
                    "--seed", str(i), "--json"]  # fmt: skip
        else:
            argv = [D5, "run", str(RECIPE), "--seed", str(i), "--json"]
        # as the test does: the store as --db for writers 0, 1, 4, 5, as D5_DB for the others
        commands.append([*argv, "--db", db] if i % 4 < 2 else argv)
    return commands


def one_load(load_kind: str, db: str, args: argparse.Namespace) -> dict[str, Any]:
    """Start the 8 writers on ``db``, wait for them, and check the store."""
    from d5core.plugins import PluginManager
    from d5core.results import ResultsStore

    env = {**os.environ, "D5_LOAD_PLUGINS": "d5-plugin-numpy", "D5_NOISE_FLOOR": "0.03",
           "D5_DB": db}  # fmt: skip
    commands = _commands(load_kind, db, args)
    t0 = time.monotonic()
    procs = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env) for c in commands]  # fmt: skip
    outputs = [p.communicate(timeout=DEADLINE_S) for p in procs]
    wall = time.monotonic() - t0
    problems = []
    reported: list[str] = []
    spans: list[tuple[float, float]] = []
    for proc, (out, err) in zip(procs, outputs, strict=True):
        if proc.returncode != 0:
            problems.append(f"a writer exited {proc.returncode}: {err.strip()[-200:]}")
        if "database is locked" in (out + err).lower() or "stayed locked" in err:
            problems.append("'database is locked' in a writer's output")
        try:
            document = json.loads(out)
        except ValueError:
            problems.append(f"a writer printed no JSON: {err.strip()[-200:]}")
            continue
        reported += _run_ids(document)
        if load_kind == "store":
            spans.append((document["started"], document["ended"]))
    if spans:  # the store's writers: from the common start to the last one's end
        wall = max(end for _, end in spans) - min(start for start, _ in spans)
    with ResultsStore.open(db, manager=PluginManager({}, discover_installed=False)) as store:
        runs = store.list_runs()
        stored = [r.id for r in runs]
        whole = 0
        for run in runs:
            ms = store.measurements(run.id)
            if run.status == "complete" and ms and all(len(store.samples(m.id)) == m.n for m in ms):
                whole += 1
            else:
                problems.append(f"run {run.id} is {run.status} with {len(ms)} measurements")
    if len(set(stored)) != len(stored):
        problems.append("a run id stored twice")
    lost = sorted(set(reported) - set(stored))
    extra = sorted(set(stored) - set(reported))
    if lost:
        problems.append(f"{len(lost)} reported runs not stored")
    if extra:
        problems.append(f"{len(extra)} stored runs nobody reported")
    if len(set(reported)) != len(reported):
        problems.append("two writers reported the same run id")
    return {"runs": len(reported), "stored": len(stored), "whole": whole, "lost": len(lost),
            "wall_s": wall, "runs_per_s": len(reported) / wall, "problems": problems}  # fmt: skip


def main() -> int:
    if len(sys.argv) == 6 and sys.argv[1] == "--writer":
        db, runs, samples, start_at = sys.argv[2:]
        return _writer_main(db, int(runs), int(samples), float(start_at))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loads", default=",".join(LOADS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--runs", type=int, default=25, help="runs per writer (load 'store')")
    parser.add_argument("--samples", type=int, default=1000, help="samples per run ('store')")
    parser.add_argument("--json", action="store_true")
    add_store_arguments(parser)
    args = parser.parse_args()
    loads = [k for k in args.loads.split(",") if k]
    if not loads or set(loads) - set(LOADS):
        raise SystemExit(f"--loads: choose from {', '.join(LOADS)}")
    rows: list[dict[str, Any]] = []
    with store_targets(args) as bases:
        for load_kind in loads:
            for r in range(args.repeats):
                order = list(bases) if r % 2 == 0 else list(reversed(bases))
                for backend in order:
                    db = _fresh(backend, bases[backend], f"{load_kind}{r}")
                    row = one_load(load_kind, db, args)
                    rows.append({"load": load_kind, "backend": backend, "repeat": r, **row})
                    if not args.json:
                        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    table = []
    for load_kind in loads:
        for backend in bases:
            mine = [r for r in rows if r["load"] == load_kind and r["backend"] == backend]
            rates = [r["runs_per_s"] for r in mine]
            table.append({
                "load": load_kind, "backend": backend, "repeats": len(mine),
                "runs per repeat": mine[0]["runs"] if mine else 0,
                "runs/s median": statistics.median(rates), "min": min(rates), "max": max(rates),
                "lost": sum(r["lost"] for r in mine),
                "problems": sum(len(r["problems"]) for r in mine),
            })  # fmt: skip
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    if args.json:
        doc = {"machine": machine(), "load": load(), "date": when, "table": table, "rows": rows}
        print(json.dumps(doc, indent=2))
    else:
        print(f"# {machine()}; {load()}; {when}")
        print("| load | backend | repeats | runs per repeat | runs/s (median) | min–max | "
              "runs lost | other problems |")  # fmt: skip
        print("|---|---|---:|---:|---:|---:|---:|---:|")
        for t in table:
            print(f"| {t['load']} | {t['backend']} | {t['repeats']} | {t['runs per repeat']} | "
                  f"{t['runs/s median']:.2f} | {t['min']:.2f}–{t['max']:.2f} | {t['lost']} | "
                  f"{t['problems']} |")  # fmt: skip
    return 0 if all(not r["problems"] for r in rows) else 1


def _fresh(backend: str, base: str, name: str) -> str:
    """A fresh store for one load: a new file beside ``base``, or a new database on the
    server of the URL ``base`` (its name suffixed with ``name``)."""
    if backend == "sqlite":
        return str(Path(base).with_name(f"{name}.sqlite"))
    import psycopg

    prefix, _, dbname = base.rpartition("/")
    fresh = f"{dbname.split('?')[0]}_{name}_{os.getpid()}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{fresh}"')
    return f"{prefix}/{fresh}"


if __name__ == "__main__":
    sys.exit(main())
