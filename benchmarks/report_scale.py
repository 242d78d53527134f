"""How long `d5 report` takes on 500 stored runs (target: < 10 s, every file included).

A temporary results database is filled with 500 runs shaped as d5's commands store them:
operator benchmarks (`d5 bench op`: times and GFLOP/s per backend and problem from three
worker processes, the peak and bandwidth roofs, each problem's FLOPs and bytes), network
benchmarks (`d5 bench net`: time per step and throughput per executor, some with per-node
breakdowns, a few batch sizes), training runs (`d5 run`: loss, step times and test
accuracy per step, the final metrics, several settings repeated), distributed training
runs and collective sweeps (`d5 bench comm`). The same benchmarks are repeated over ten
commits, one of which makes a backend slower, so the history section has series to draw
and changes to mark.

Then `d5 report --last 500 --json` runs in fresh processes (the first, not counted,
warms the page cache); each sample is the wall time of one process, with the phases the
command reports (read, figures, save, html). The median is what docs/benchmarks.md
quotes.

    .venv/bin/python benchmarks/report_scale.py [--runs 500] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _machine import load, machine

from d5core.plugins import PluginManager
from d5core.results import ResultsStore

BIN = Path(sys.executable).parent

OPS: dict[str, list[tuple[str, float, float]]] = {
    # problem label, FLOPs, compulsory bytes
    "Gemm": [
        (f"gemm m={m} n={n} k={k}", 2.0 * m * n * k, 4.0 * (m * k + k * n + m * n))
        for m, n, k in (
            (512, 16, 512),
            (1024, 16, 512),
            (1760, 16, 1760),
            (2048, 32, 2048),
            (512, 512, 512),
            (1024, 1024, 1024),
        )
    ],
    "Conv": [
        (
            f"conv n={n} c={c} hw={hw} k={k}",
            2.0 * n * c * k * 9 * hw * hw,
            4.0 * (n * c * hw * hw + k * c * 9 + n * k * hw * hw),
        )
        for n, c, hw, k in ((8, 3, 64, 16), (8, 16, 32, 32), (16, 32, 16, 64), (16, 64, 8, 128))
    ],
    "Relu": [(f"relu n={n}", float(n), 8.0 * n) for n in (1 << 12, 1 << 16, 1 << 20, 1 << 22)],
}
BACKENDS = ("numpy", "torch", "tensorflow", "onnxruntime")
SPEED = {"numpy": 6.0, "torch": 9.0, "tensorflow": 7.0, "onnxruntime": 8.0}  # GFLOP/s-ish
NETS = {"lenet5": (32,), "resnet18": (1, 8, 32), "mlp": (64,)}
NODES = ["Conv", "Relu", "MaxPool", "Conv", "Relu", "MaxPool", "Gemm", "Relu", "Gemm", "Softmax"]
EXECUTORS = ("numpy", "torch", "onnxruntime", "tensorflow")
RECIPES = {
    "digits-mlp": ("numpy", "torch", "tensorflow", "mxnet"),
    "digits-cnn": ("torch", "numpy"),
}


def _environment(commit: int) -> dict[str, Any]:
    return {
        "hostname": "bench-host",
        "cpu": {"model": "Bench CPU @ 2.60GHz", "logical_cores": 2, "physical_cores": 2},
        "os": {"system": "Linux", "release": "6.1", "machine": "x86_64"},
        "python": {"version": "3.11.7", "implementation": "CPython"},
        "packages": {"d5core": "0.1.0", "numpy": "2.4.0", "torch": "2.13.0"},
        "git": {"commit": f"{commit * 7919 + 0xA5A5A5:040x}"[-40:], "dirty": False},
    }


def _processes(
    rng: random.Random, median: float, spread: float, per: int = 20
) -> tuple[list[float], list[int]]:
    """Samples of three worker processes, each with its own offset, as `bench` stores them."""
    samples: list[float] = []
    owners: list[int] = []
    for p in range(3):
        offset = median * rng.gauss(0, spread / 3)
        for _ in range(per):
            samples.append(
                max(
                    median * 0.2,
                    median
                    + offset
                    + median * rng.lognormvariate(0, 0.4) * spread
                    - median * spread,
                )
            )
            owners.append(p)
    return samples, owners


def _op_run(store: ResultsStore, rng: random.Random, op: str, commit: int) -> None:
    backends = list(BACKENDS[: rng.choice((2, 3, 4))])
    problems = OPS[op]
    config = {
        "op": op,
        "backends": backends,
        "suite": "cpu-small",
        "dtype": "float32",
        "problems": [p for p, _, _ in problems],
        "directions": ["forward"],
        "processes": 3,
    }
    with store.run("op", f"bench {op}", config=config, environment=_environment(commit)) as rid:
        store.add_metric(
            rid,
            "peak_gflops",
            332.3,
            labels={"dtype": "float32", "source": "estimate"},
            unit="GFLOP/s",
        )
        store.add_metric(rid, "peak_bandwidth", 21.5, labels={"source": "stream"}, unit="GB/s")
        for label, flops, nbytes in problems:
            labels = {"problem": label, "direction": "forward", "dtype": "float32"}
            store.add_metric(rid, "problem_flops", flops, labels=labels, unit="FLOP")
            store.add_metric(rid, "problem_bytes", nbytes, labels=labels, unit="B")
            for backend in backends:
                slower = 1.3 if (backend == "torch" and commit >= 6) else 1.0
                median = flops / (SPEED[backend] * 1e9) * slower + 2e-6
                times, owners = _processes(rng, median, 0.05)
                full = {"backend": backend, **labels}
                store.add_measurement(rid, "time", times, labels=full, unit="s", processes=owners)
                rates = [flops / t / 1e9 for t in times]
                store.add_measurement(
                    rid, "gflops", rates, labels=full, unit="GFLOP/s", processes=owners
                )
                store.add_metric(
                    rid, "peak_fraction", statistics.median(rates) / 332.3, labels=full
                )


def _net_run(store: ResultsStore, rng: random.Random, model: str, batch: int, commit: int) -> None:
    executors = list(EXECUTORS[: rng.choice((3, 4))])
    breakdown = rng.random() < 0.25
    config = {
        "model": model,
        "executors": executors,
        "batch": batch,
        "mode": "inference",
        "processes": 3,
        "breakdown": breakdown,
    }
    with store.run("net", f"bench {model}", config=config, environment=_environment(commit)) as rid:
        for e, executor in enumerate(executors):
            labels = {"executor": executor, "mode": "inference", "batch": batch}
            step = (1e-3 + 2e-4 * e) * batch * (4 if model == "resnet18" else 1)
            times, owners = _processes(rng, step, 0.04)
            store.add_measurement(rid, "time", times, labels=labels, unit="s", processes=owners)
            store.add_measurement(
                rid,
                "throughput",
                [batch / t for t in times],
                labels=labels,
                unit="samples/s",
                processes=owners,
            )
            if breakdown:
                total = 0.0
                for n, op_type in enumerate(NODES):
                    share = step * (n % 4 + 1) / 26
                    samples = [share * rng.lognormvariate(0, 0.05) for _ in range(30)]
                    total += statistics.median(samples)
                    store.add_measurement(
                        rid,
                        "node_time",
                        samples,
                        unit="s",
                        labels={
                            **labels,
                            "node": f"{op_type.lower()}_{n}",
                            "op_type": op_type,
                            "direction": "forward",
                        },
                    )
                store.add_metric(rid, "node_time_sum", total, labels=labels, unit="s")


def _train_run(
    store: ResultsStore,
    rng: random.Random,
    recipe: str,
    executor: str,
    seed: int,
    commit: int,
    ranks: int = 0,
) -> None:
    steps = 45
    settings = {
        "model": recipe.split("-")[1],
        "dataset": "digits",
        "epochs": 30,
        "target_accuracy": 0.9,
        "executor": executor,
        "optimizer": "momentum",
        "lr": 0.05,
        "batch_size": 32,
        "seed": seed,
    }
    config: dict[str, Any] = {
        "recipe": f"recipes/{recipe}.toml",
        "recipe_hash": f"{hash((recipe, executor)) & (2**64 - 1):016x}",
        "fixed": {k: settings[k] for k in ("model", "dataset", "epochs", "target_accuracy")},
        "mutable": {k: settings[k] for k in ("executor", "optimizer", "lr", "batch_size")},
        "settings": settings,
        "stop_reason": "target_accuracy",
    }
    if ranks:
        config["distributed"] = {
            "ranks": ranks,
            "scheme": rng.choice(("allreduce", "ps")),
            "per_rank_batch_size": 32,
            "global_batch_size": 32 * ranks,
        }
    env = _environment(commit)
    with store.run("train", recipe, config=config, environment=env, seed=seed) as rid:
        rate = rng.uniform(0.05, 0.09)
        loss = [2.3 * (1 - rate) ** s + rng.gauss(0, 0.03) + 0.1 for s in range(steps)]
        step_time = [rng.lognormvariate(-4.5, 0.2) for _ in range(steps)]
        store.add_measurement(rid, "loss", loss, unit="loss")
        store.add_measurement(rid, "step_time", step_time, unit="s")
        store.add_measurement(rid, "throughput", [32 / t for t in step_time], unit="samples/s")
        accuracy = [min(0.99, 0.5 + 0.1 * e + rng.gauss(0, 0.01)) for e in range(5)]
        store.add_measurement(rid, "test_accuracy", accuracy, unit="fraction")
        tta = sum(step_time[:40]) if accuracy[-1] >= 0.9 else float("nan")
        for name, value, unit in (
            ("final_test_accuracy", accuracy[-1], ""),
            ("best_test_accuracy", max(accuracy), ""),
            ("time_to_accuracy", tta, "s"),
            ("final_loss", loss[-1], ""),
            ("throughput", 32 * steps / sum(step_time), "samples/s"),
            ("wall_time", sum(step_time) * 1.1, "s"),
            ("steps", float(steps), ""),
        ):
            store.add_metric(rid, name, value, unit=unit)
        for r in range(ranks):
            store.add_metric(rid, "rank_bytes_sent", 4e6 * steps, labels={"rank": r}, unit="B")
            store.add_metric(
                rid, "rank_comm_time", rng.uniform(0.1, 0.3), labels={"rank": r}, unit="s"
            )
            store.add_metric(rid, "rank_wall_time", sum(step_time), labels={"rank": r}, unit="s")
        if ranks:
            store.add_metric(
                rid, "global_throughput", 32 * ranks * steps / sum(step_time), unit="samples/s"
            )


def _comm_run(store: ResultsStore, rng: random.Random, ranks: int, commit: int) -> None:
    config = {
        "collective": "allreduce",
        "ranks": [ranks],
        "dtype": "float32",
        "raw_baseline": True,
        "link_peak_gbps": 10.0,
    }
    with store.run(
        "comm", "comm allreduce", config=config, environment=_environment(commit)
    ) as rid:
        for size in (1 << 10, 1 << 14, 1 << 18, 1 << 20, 1 << 22, 1 << 24):
            for impl in ("d5", "raw"):
                labels = {"collective": "allreduce", "bytes": size, "ranks": ranks, "impl": impl}
                median = 2e-5 + size / 2e9 * (1.05 if impl == "d5" else 1.0)
                samples = [median * rng.lognormvariate(0, 0.08) for _ in range(30)]
                store.add_measurement(rid, "time", samples, labels=labels, unit="s")
                algbw = size / statistics.median(samples) / 1e9
                store.add_metric(rid, "algbw", algbw, labels=labels, unit="GB/s")
                store.add_metric(
                    rid, "busbw", algbw * 2 * (ranks - 1) / ranks, labels=labels, unit="GB/s"
                )


def fill(db: Path, runs: int, seed: int = 0) -> dict[str, int]:
    """Store ``runs`` runs in ``db``: 40% operators, 24% networks, 30% training, 6%
    distributed (training across ranks and collective sweeps), over ten commits."""
    rng = random.Random(seed)
    plan: list[str] = ["op"] * 20 + ["net"] * 12 + ["train"] * 15 + ["dist"] * 2 + ["comm"]
    random.Random(1).shuffle(plan)  # every 50 runs hold the whole mix, interleaved
    counts: dict[str, int] = {}
    with ResultsStore.open(db, manager=PluginManager({}, discover_installed=False)) as store:
        for i in range(runs):
            kind = plan[i % len(plan)]
            commit = i * 10 // runs
            counts[kind] = counts.get(kind, 0) + 1
            if kind == "op":
                _op_run(store, rng, list(OPS)[i % len(OPS)], commit)
            elif kind == "net":
                model = list(NETS)[i % len(NETS)]
                _net_run(store, rng, model, rng.choice(NETS[model]), commit)
            elif kind == "train":
                recipe = list(RECIPES)[i % len(RECIPES)]
                _train_run(store, rng, recipe, rng.choice(RECIPES[recipe]), i, commit)
            elif kind == "dist":
                _train_run(store, rng, "digits-mlp", "torch", i, commit, ranks=rng.choice((2, 4)))
            else:
                _comm_run(store, rng, rng.choice((2, 4)), commit)
    return counts


def report_once(db: Path, out: Path, runs: int) -> tuple[float, dict[str, Any]]:
    """One fresh `d5 report` process: its wall time and its --json data."""
    cmd = [
        str(BIN / "d5"),
        "report",
        "--last",
        str(runs),
        "--db",
        str(db),
        "-o",
        str(out),
        "--json",
    ]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"d5 report failed ({done.returncode}): {done.stderr.strip()}")
    data = json.loads(done.stdout)["data"]
    data["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, data


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=3, help="timed reports (after one warm-up)")
    parser.add_argument(
        "--keep", type=Path, default=None, help="write the database and report here"
    )
    args = parser.parse_args()

    print(machine())
    with tempfile.TemporaryDirectory(prefix="d5-report-scale-") as tmp:
        where = args.keep or Path(tmp)
        where.mkdir(parents=True, exist_ok=True)
        db, out = where / "results.sqlite", where / "report.html"
        db.unlink(missing_ok=True)
        start = time.perf_counter()
        counts = fill(db, args.runs)
        print(
            f"stored {args.runs} runs ({', '.join(f'{k} {n}' for k, n in counts.items())}) "
            f"in {time.perf_counter() - start:.1f} s; database {db.stat().st_size / 1e6:.1f} MB"
        )
        report_once(db, out, args.runs)  # warm-up: page cache, font cache
        walls: list[float] = []
        cpus: list[float] = []
        phases: dict[str, list[float]] = {}
        data: dict[str, Any] = {}
        for _ in range(args.repeat):
            wall, data = report_once(db, out, args.runs)
            walls.append(wall)
            cpus.append(data["cpu_s"])
            for phase, seconds in data["seconds"].items():
                phases.setdefault(phase, []).append(seconds)
        figures = data["figures"]
        folder = out.with_name(f"{out.stem}_figures")
        size = sum(p.stat().st_size for p in folder.iterdir()) / 1e6
        sections: dict[str, int] = {}
        for f in figures:
            sections[f["section"]] = sections.get(f["section"], 0) + 1
        print(
            f"{len(data['runs'])} runs -> {len(figures)} figures "
            f"({', '.join(f'{s} {n}' for s, n in sections.items())}); page "
            f"{out.stat().st_size / 1e6:.1f} MB, PNG+PDF {size:.1f} MB"
        )
        for problem in data["problems"]:
            print(f"  problem: {problem}")
        median = statistics.median(walls)
        print(
            f"d5 report --last {args.runs}: median {median:.2f} s over {len(walls)} fresh "
            f"processes (all: {', '.join(f'{w:.2f}' for w in walls)}); target < 10 s: "
            f"{'met' if median < 10 else 'MISSED'}"
        )
        in_process = statistics.median(phases["total"])
        print(
            "  inside the command (median): "
            + ", ".join(f"{p} {statistics.median(v):.2f} s" for p, v in phases.items())
            + f"; start-up and imports {median - in_process:.2f} s"
        )
        print(
            f"  CPU time of the command and its workers (median): {statistics.median(cpus):.2f} s "
            f"on {os.cpu_count()} cores; {load()}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
