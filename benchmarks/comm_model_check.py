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
  random gradients, the ranks meeting at a barrier before each step (and, compressed,
  before each allgather, as each tensor's compression comes first; the barriers are not
  counted); a step's time is
  the slowest rank's time inside communication calls (``comm_seconds``), and the
  figure is the median over steps (over windows of ``period`` steps for model
  averaging, divided by the period). This is what the model predicts: the transfer,
  not the wait for a rank that computed longer. The worker sets d5's allocator policy,
  as every process d5 measures in does;
- **predicted from this launch's fit**: the same model with ``L``, ``G``, ``Gx`` and ``R``
  fitted to a ping-pong (8 B to 16 MiB) the worker times after the schemes, in the same
  processes. On a shared virtual machine the speed of the same call changes from one
  launch to the next (MPICH's 1 MiB allreduce took 0.14, 0.33 or 0.56 ms in six
  consecutive 2-rank launches here, each rank on its own CPU); this column holds the
  model to the machine as it was while the scheme ran;
- **MPICH's own call**, where one call does what the scheme's communication does: the
  flat gradient's ``Allreduce`` in place (allreduce; a quarter of it for model averaging
  every 4 steps) and the ``Isend``/``Irecv`` of the parameters with each ring neighbour
  (D-PSGD), timed in the same steps. This launch's model against it says how good the
  model is; the scheme against it, what d5's scheme adds.

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
import time
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
    """Under mpiexec: every variant's synchronized communication time per step, and the
    library's own calls for the same bytes where one call does what the scheme does."""
    from d5_plugin_mpi.comm import MPICommunicator
    from d5_plugin_mpi.schemes import make_distributed
    from mpi4py import MPI

    from d5core.allocator import apply_allocator_policy
    from d5core.plugins import get_plugin_manager

    # as in every process d5 measures in (d5 run's ranks included): without it, a 16 MB
    # step page-faulted about 2,800 times here, on fresh gradients and buffers
    apply_allocator_policy()
    comm = MPICommunicator()
    sgd = get_plugin_manager().load("d5.optimizers", "sgd")
    sizes = param_sizes(RECIPES.get(recipe, recipe))
    rng = np.random.default_rng(comm.rank)
    flat = np.ones(sum(sizes.values()), dtype=np.float32)
    peers = sorted({(comm.rank - 1) % comm.size, (comm.rank + 1) % comm.size} - {comm.rank})
    into = {p: np.empty_like(flat) for p in peers}

    def allreduce() -> None:
        comm.comm.Allreduce(MPI.IN_PLACE, flat)

    def exchange() -> None:
        requests = [comm.comm.Irecv(into[p], source=p, tag=7) for p in peers]
        requests += [comm.comm.Isend(flat, dest=p, tag=7) for p in peers]
        MPI.Request.Waitall(requests)

    # MPICH's own call doing what the scheme's communication does, timed in the same
    # steps (after each of the scheme's), so that both see the same machine
    library = {"allreduce": (allreduce, 1), "model-averaging k=4": (allreduce, 4),
               "dpsgd": (exchange, 1)}  # fmt: skip
    rows = []
    for label, scheme, options in VARIANTS:
        # a compressed step compresses each tensor before its allgathers: the ranks meet
        # at a barrier (not counted) before each one, or the figure would hold the wait
        # for the other rank's compression, which is compute
        aligned = AlignedAllgather(comm) if "compression" in options else comm
        opt = make_distributed(scheme, sgd(lr=1e-4), aligned, **options)
        params = {k: np.zeros(n, dtype=np.float32) for k, n in sizes.items()}
        period = int(options.get("period", 1))
        call, every = library.get(label, (None, 1))
        times = np.zeros((2, SYNC_STEPS), dtype=np.float64)
        for t in range(-4, SYNC_STEPS):  # 4 warm-up steps
            grads = {k: rng.standard_normal(n).astype(np.float32) for k, n in sizes.items()}
            comm.barrier()
            before, waited = comm.comm_seconds, getattr(aligned, "waited_s", 0.0)
            opt.step(params, grads)
            if t >= 0:
                times[0, t] = comm.comm_seconds - before
                times[0, t] -= getattr(aligned, "waited_s", 0.0) - waited
            if call is not None and t % every == 0:
                comm.barrier()
                t0 = time.perf_counter()
                call()
                if t >= 0:
                    times[1, t] = time.perf_counter() - t0
        slowest = np.asarray(comm.allreduce(times, "max"))
        windows = slowest[:, : SYNC_STEPS - SYNC_STEPS % period].reshape(2, -1, period)
        per_step = np.median(windows.sum(axis=2), axis=1) / period
        rows.append({"variant": label, "sync_s": float(per_step[0]),
                     "library_s": None if call is None else float(per_step[1])})  # fmt: skip
    fit = same_launch_fit(comm)
    for row in rows:
        row["fit"] = fit
    return rows if comm.rank == 0 else []


class AlignedAllgather:
    """A communicator whose ``allgather`` first meets the other ranks at a barrier,
    whose time (held in :attr:`waited_s`) the caller takes out of ``comm_seconds``;
    everything else goes to ``comm`` unchanged."""

    def __init__(self, comm: Any) -> None:
        self._comm = comm
        self.waited_s = 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._comm, name)

    def allgather(self, array: np.ndarray) -> list[np.ndarray]:
        before = self._comm.comm_seconds
        self._comm.barrier()
        self.waited_s += self._comm.comm_seconds - before
        return self._comm.allgather(array)


#: The ping-pong the worker times in its own launch: 8 B to 16 MiB, 4 times a step.
LAUNCH_SIZES = (*(8 * 4**k for k in range(11)), 16 << 20)


def same_launch_fit(comm: Any) -> dict[str, float]:
    """``L``, ``G``, ``Gx`` and ``R`` fitted to a ping-pong timed in this launch, as ``d5
    bench comm --collective pingpong`` times it: the same processes on the same cores
    as the scheme's steps (this machine's speed differs from one launch to the next)."""
    from d5core.lv3.comm_fit import fit_pingpong
    from d5core.lv3.comm_sweep import PINGPONG, SweepSettings, rank_sweep

    swept = rank_sweep(comm, SweepSettings(PINGPONG, LAUNCH_SIZES, samples=30))
    series: dict[str, tuple[list[int], list[float]]] = {}
    for size in swept["sizes"]:
        for key, values in (("d5", size["samples"]["d5"]), ("exchange", size["exchange"]),
                            ("reduce", size["reduce"])):  # fmt: skip
            sizes, seconds = series.setdefault(key, ([], []))
            sizes.extend([int(size["bytes"])] * len(values))
            seconds.extend(float(v) for v in values)
    if comm.rank != 0:
        return {}
    fit = fit_pingpong(*series["d5"], communicator="mpi", ranks=comm.size,
                       exchange=series["exchange"], reduce=series["reduce"])  # fmt: skip
    return {"latency_s": fit.latency_s, "seconds_per_byte": fit.seconds_per_byte,
            "exchange_s_per_byte": fit.exchange_or_p2p_s_per_byte,
            "reduce_s_per_byte": fit.reduce_s_per_byte}  # fmt: skip


def synchronized(recipe: str, ranks: int) -> dict[str, float]:
    argv = [sys.executable, __file__, "--worker", recipe]
    out = subprocess.run(build_command(ranks, argv), capture_output=True, text=True,
                         timeout=600, check=False)  # fmt: skip
    if out.returncode != 0:
        raise SystemExit(f"mpiexec -n {ranks} failed: {out.stderr.strip()[-800:]}")
    rows = json.loads(out.stdout.strip().splitlines()[-1])
    return {r["variant"]: (r["sync_s"], r["library_s"], r["fit"]) for r in rows}


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
        jobs = [(r, RECIPES[r]) for r in args.recipes.split(",") if r]
        jobs += [(f"flat:{n}", f"flat:{n}") for n in (args.flat.split(",") if args.flat else [])]
        for name, spec in jobs:
            sizes = param_sizes(spec)
            path = None if name.startswith("flat:") else short_recipe(name, args.epochs, Path(tmp))
            for ranks in (int(r) for r in args.ranks.split(",")):
                sync = synchronized(name, ranks)
                for label, scheme, options in VARIANTS:
                    cost = scheme_class(scheme).communication_cost(
                        ranks=ranks, params=sizes, itemsize=4, latency_s=fit.latency_s,
                        seconds_per_byte=fit.seconds_per_byte, options=options,
                        exchange_s_per_byte=fit.exchange_or_p2p_s_per_byte,
                        reduce_s_per_byte=fit.reduce_s_per_byte,
                    )  # fmt: skip
                    measured, library, here = sync[label]
                    local = (
                        scheme_class(scheme)
                        .communication_cost(
                            ranks=ranks, params=sizes, itemsize=4, options=options, **here
                        )
                        .seconds
                    )
                    trained = ({"train_s": None, "train_bytes": None} if path is None
                               else in_training(path, ranks, scheme, options, db))  # fmt: skip
                    recipe = f"one tensor of {name[5:]}" if path is None else name
                    row = {"recipe": recipe, "scheme": label, "ranks": ranks,
                           "params": sum(sizes.values()), "predicted_s": cost.seconds,
                           "sync_s": measured, "library_s": library, "bound": cost.bound,
                           "model_bytes": cost.bytes_sent, **trained}  # fmt: skip
                    row["error"] = cost.seconds / measured - 1
                    row["library_error"] = None if library is None else local / library - 1
                    row["launch_predicted_s"] = local
                    row["launch_error"] = local / measured - 1
                    rows.append(row)
                    print(f"{name} {label} {ranks}: predicted {cost.seconds * 1e3:.3f} ms, "
                          f"synchronized {measured * 1e3:.3f} ms", file=sys.stderr)  # fmt: skip
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| recipe | scheme | ranks | params | bound | predicted, stored fit (ms/step) | "
        "predicted, this launch's fit | measured, synchronized (ms/step) | error: stored "
        "fit / this launch's | MPICH's own call (ms/step) | this launch's model against it "
        "| measured in training (ms/step) | bytes sent per step: model / counted in "
        "training |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1e3:.3f}"

    for r in rows:
        counted = "-" if r["train_bytes"] is None else f"{r['train_bytes']:,.0f}"
        against = "-" if r["library_error"] is None else f"{r['library_error']:+.0%}"
        lines.append(
            f"| {r['recipe']} | {r['scheme']} | {r['ranks']} | {r['params']:,} | {r['bound']} "
            f"| {ms(r['predicted_s'])} | {ms(r['launch_predicted_s'])} | {ms(r['sync_s'])} | "
            f"{r['error']:+.0%} / {r['launch_error']:+.0%} | {ms(r['library_s'])} | "
            f"{against} | {ms(r['train_s'])} | {r['model_bytes']:,.0f} / {counted} |"
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
