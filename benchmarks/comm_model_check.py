"""The communication cost models (``d5 model comm``) against measured communication time.

For each recipe (digits-mlp's MLP, synthetic-cnn's LeNet-5), rank count (2 and 4) and
scheme (allreduce plain and with each compressor, both parameter servers, model
averaging every 4 steps, D-PSGD):

- **predicted**: the scheme's ``communication_cost`` for the recipe's parameters (every
  tensor, float32) with ``L`` and ``G`` from a ping-pong fit (``--fit RUN``, or a fresh
  ``d5 bench comm --collective pingpong`` this script runs into its database);
- **in training**: ``d5 run RECIPE --ranks P --scheme S --json`` (the recipe copied with
  fewer epochs; see ``--epochs``), each rank's ``rank_comm_time / rank_steps``,
  averaged over ranks. This holds everything a rank spends inside communication calls,
  waiting for a slower rank included;
- **synchronized**: the same scheme and parameter shapes run under ``mpiexec`` with
  random gradients, the ranks meeting at a barrier before each step; a step's time is
  the slowest rank's time inside communication calls (``comm_seconds``), and the
  figure is the median over steps (over windows of ``period`` steps for model
  averaging, divided by the period). This is what the model predicts: the transfer,
  not the wait for a rank that computed longer.

The relative error is ``predicted / measured - 1`` against the synchronized figure.
A row is bandwidth-bound when the model's bandwidth part exceeds its latency part.

    .venv/bin/python benchmarks/comm_model_check.py [--fit RUN] [--db PATH] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from _machine import load, machine
from d5_plugin_mpi.launch import build_command, under_launcher

ROOT = Path(__file__).resolve().parents[1]
D5 = [sys.executable, "-m", "d5core"]
#: The recipes, with the model their ranks train (as the recipe builds it).
RECIPES: dict[str, dict[str, Any]] = {
    "digits-mlp": {"name": "mlp", "hidden": [64], "input_shape": (64,), "classes": 10},
    "synthetic-cnn": {"name": "lenet5", "input_shape": (1, 28, 28), "classes": 4},
}
#: Each variant: label, scheme, scheme options.
VARIANTS: list[tuple[str, str, dict[str, Any]]] = [
    ("allreduce", "allreduce", {}),
    ("allreduce topk 1%", "allreduce", {"compression": {"name": "topk", "ratio": 0.01}}),
    ("allreduce qsgd 8 bits", "allreduce", {"compression": {"name": "qsgd", "bits": 8}}),
    ("allreduce sign", "allreduce", {"compression": {"name": "sign"}}),
    ("parameter-server", "parameter-server", {}),
    ("async-parameter-server", "async-parameter-server", {}),
    ("model-averaging k=4", "model-averaging", {"period": 4}),
    ("dpsgd", "dpsgd", {}),
]
SYNC_STEPS = 40


def param_sizes(spec: dict[str, Any] | str) -> dict[str, int]:
    """The trainable tensors of a recipe's model, or ``"flat:N"``: one tensor of N."""
    from d5core.lv1.runner import load_model

    if isinstance(spec, str):
        return {"flat": int(float(spec.split(":", 1)[1]))}

    options = {k: v for k, v in spec.items() if k != "name"}
    net = load_model(spec["name"], seed=0, **options)
    arrays = net.parameters
    return {name: int(arrays[name].size) for name in net.trainable}


def worker(recipe: str) -> list[dict[str, Any]]:
    """Under mpiexec: every variant's synchronized communication time per step."""
    from d5_plugin_mpi.comm import MPICommunicator
    from d5_plugin_mpi.schemes import make_distributed

    from d5core.plugins import get_plugin_manager

    comm = MPICommunicator()
    sgd = get_plugin_manager().load("d5.optimizers", "sgd")
    sizes = param_sizes(RECIPES.get(recipe, recipe))
    rng = np.random.default_rng(comm.rank)
    rows = []
    for label, scheme, options in VARIANTS:
        opt = make_distributed(scheme, sgd(lr=1e-4), comm, **options)
        params = {k: np.zeros(n, dtype=np.float32) for k, n in sizes.items()}
        period = int(options.get("period", 1))
        times = np.zeros(SYNC_STEPS, dtype=np.float64)
        for t in range(-4, SYNC_STEPS):  # 4 warm-up steps
            grads = {k: rng.standard_normal(n).astype(np.float32) for k, n in sizes.items()}
            comm.barrier()
            before = comm.comm_seconds
            opt.step(params, grads)
            if t >= 0:
                times[t] = comm.comm_seconds - before
        slowest = np.asarray(comm.allreduce(times, "max"))
        windows = slowest[: SYNC_STEPS - SYNC_STEPS % period].reshape(-1, period).sum(axis=1)
        rows.append({"variant": label, "sync_s": float(np.median(windows)) / period})
    return rows if comm.rank == 0 else []


def synchronized(recipe: str, ranks: int) -> dict[str, float]:
    argv = [sys.executable, __file__, "--worker", recipe]
    out = subprocess.run(build_command(ranks, argv), capture_output=True, text=True,
                         timeout=600, check=False)  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"mpiexec -n {ranks} failed: {out.stderr.strip()[-800:]}")
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    return {r["variant"]: r["sync_s"] for r in rows}


def short_recipe(recipe: str, epochs: int, folder: Path) -> Path:
    """The recipe with ``epochs`` epochs and no thresholds (only its timing matters)."""
    text = (ROOT / "recipes" / f"{recipe}.toml").read_text()
    text = re.sub(r"(?m)^epochs = .*$", f"epochs = {epochs}", text)
    text = re.sub(r"(?m)^target_accuracy = .*$", "", text)
    text = text.split("[metrics]")[0]
    path = folder / f"{recipe}.toml"
    path.write_text(text)
    return path


def in_training(path: Path, ranks: int, scheme: str, options: dict[str, Any], db: Path) -> dict:
    argv = [*D5, "run", str(path), "--ranks", str(ranks), "--scheme", scheme, "--json",
            "--db", str(db)]  # fmt: skip
    for key, value in options.items():
        argv += ["--scheme-option", f"{key}={json.dumps(value)}"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv[2:])} failed: {out.stderr.strip()[-800:]}")
    run = json.loads(out.stdout)["data"]["runs"][0]
    per_rank = run["distributed"]["per_rank"]
    per_step = [r["rank_comm_time"] / r["rank_steps"] for r in per_rank]
    sent = [r["rank_bytes_sent"] / r["rank_steps"] for r in per_rank]
    return {"train_s": statistics.fmean(per_step), "train_bytes": max(sent),
            "run_id": run["run_id"], "steps": per_rank[0]["rank_steps"]}  # fmt: skip


def get_fit(run: str | None, db: Path) -> Any:
    from d5core.lv3.comm_fit import load_fit

    if run is None:
        argv = [*D5, "bench", "comm", "--collective", "pingpong", "--db", str(db), "--json"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=900, check=False)
        if out.returncode != 0:
            raise SystemExit(f"the ping-pong failed: {out.stderr.strip()[-800:]}")
    return load_fit(run, db)


def check(args: argparse.Namespace) -> list[dict[str, Any]]:
    from d5core.lv3.launch import scheme_class

    db = Path(args.db) if args.db else Path(tempfile.mkdtemp(prefix="d5-model-check-")) / "r.sqlite"
    fit = get_fit(args.fit, db)
    print(f"fit: run {fit.run_id} ({fit.communicator}): L = {fit.latency_s * 1e6:.3g} µs, "
          f"G = {fit.seconds_per_byte * 1e9:.4g} ns/B, Gx = {fit.exchange_s_per_byte * 1e9:.4g}"
          f" ns/B, R = {fit.reduce_s_per_byte * 1e9:.4g} ns/B, max |residual| "
          f"{fit.max_abs_residual:.0%}", file=sys.stderr)  # fmt: skip
    rows = []
    with tempfile.TemporaryDirectory(prefix="d5-model-check-") as tmp:
        for recipe in [r for r in args.recipes.split(",") if r]:
            spec = RECIPES[recipe]
            sizes = param_sizes(spec)
            path = short_recipe(recipe, args.epochs, Path(tmp))
            for ranks in (int(r) for r in args.ranks.split(",")):
                sync = synchronized(recipe, ranks)
                for label, scheme, options in VARIANTS:
                    cost = scheme_class(scheme).communication_cost(
                        ranks=ranks, params=sizes, itemsize=4, latency_s=fit.latency_s,
                        seconds_per_byte=fit.seconds_per_byte, options=options,
                        exchange_s_per_byte=fit.exchange_or_p2p_s_per_byte,
                        reduce_s_per_byte=fit.reduce_s_per_byte,
                    )  # fmt: skip
                    trained = in_training(path, ranks, scheme, options, db)
                    row = {"recipe": recipe, "scheme": label, "ranks": ranks,
                           "params": sum(sizes.values()), "predicted_s": cost.seconds,
                           "sync_s": sync[label], "bound": cost.bound,
                           "model_bytes": cost.bytes_sent, **trained}  # fmt: skip
                    row["error"] = row["predicted_s"] / row["sync_s"] - 1
                    rows.append(row)
                    print(f"{recipe} {label} {ranks}: predicted {cost.seconds * 1e3:.3f} ms, "
                          f"synchronized {row['sync_s'] * 1e3:.3f} ms, in training "
                          f"{row['train_s'] * 1e3:.3f} ms", file=sys.stderr)  # fmt: skip
        for flat in args.flat.split(",") if args.flat else []:
            name = f"flat:{flat}"
            sizes = param_sizes(name)
            for ranks in (int(r) for r in args.ranks.split(",")):
                sync = synchronized(name, ranks)
                for label, scheme, options in VARIANTS:
                    cost = scheme_class(scheme).communication_cost(
                        ranks=ranks, params=sizes, itemsize=4, latency_s=fit.latency_s,
                        seconds_per_byte=fit.seconds_per_byte, options=options,
                        exchange_s_per_byte=fit.exchange_or_p2p_s_per_byte,
                        reduce_s_per_byte=fit.reduce_s_per_byte,
                    )  # fmt: skip
                    rows.append({"recipe": f"one tensor of {flat}", "scheme": label,
                                 "ranks": ranks, "params": sum(sizes.values()),
                                 "predicted_s": cost.seconds, "sync_s": sync[label],
                                 "bound": cost.bound, "model_bytes": cost.bytes_sent,
                                 "train_s": None, "train_bytes": None,
                                 "error": cost.seconds / sync[label] - 1})  # fmt: skip
                    print(
                        f"{name} {label} {ranks}: predicted {cost.seconds * 1e3:.3f} ms, "
                        f"synchronized {sync[label] * 1e3:.3f} ms",
                        file=sys.stderr,
                    )
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| recipe | scheme | ranks | params | predicted (ms/step) | measured, synchronized "
        "(ms/step) | relative error | measured in training (ms/step) | bound | bytes sent "
        "per step: model / counted in training |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        trained = "-" if r["train_s"] is None else f"{r['train_s'] * 1e3:.3f}"
        counted = "-" if r["train_bytes"] is None else f"{r['train_bytes']:,.0f}"
        lines.append(
            f"| {r['recipe']} | {r['scheme']} | {r['ranks']} | {r['params']:,} | "
            f"{r['predicted_s'] * 1e3:.3f} | {r['sync_s'] * 1e3:.3f} | {r['error']:+.0%} | "
            f"{trained} | {r['bound']} | {r['model_bytes']:,.0f} / {counted} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--fit", default=None, help="the ping-pong run (default: a fresh one)")
    parser.add_argument("--db", default=None, help="results database (default: a temporary one)")
    parser.add_argument("--ranks", default="2,4", help="comma-separated rank counts")
    parser.add_argument("--epochs", type=int, default=2, help="epochs of each training run")
    parser.add_argument(
        "--recipes",
        default=",".join(RECIPES),
        help="comma-separated recipes to train (default: all; '' for none)",
    )
    parser.add_argument(
        "--flat",
        default="",
        help="also, synchronized only: one tensor of each of these many "
        "float32 parameters (e.g. 262144,4194304)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON rows, not a table")
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker or under_launcher():
        found = worker(args.worker or "digits-mlp")
        if found:
            print(json.dumps(found))
        return 0
    rows = check(args)
    where = f"{machine()}; {load()} at the end; {os.cpu_count()} cores for up to 4 ranks"
    if args.json:
        print(json.dumps({"machine": where, "rows": rows}, indent=2))
    else:
        print(f"machine: {where}\n")
        print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
