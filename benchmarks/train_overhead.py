"""What d5's Trainer adds to a training epoch, against a hand-written torch loop.

Workloads, each on the torch executor with a torch-native optimizer (momentum SGD): the
zoo ``mlp`` on ``synthetic_classification`` and ``lenet5`` on ``synthetic_images``
(1x28x28), whose ratios have a target (<= 1.02), and a probe of the fixed cost per step: a
tiny MLP whose steps are nearly all framework overhead, so that the microseconds added
per step are measured with the least noise. Every side uses the same network (same
initial weights), the same dataset, the same sampler (``shuffle``, same seed, so the same
batches), the same batch size and the same number of steps per epoch; test passes are
excluded everywhere.

Four sides, so that each comparison is of equal work:

- ``trainer``: :class:`d5core.lv2.trainer.Trainer` with ``torch-momentum`` (native
  path: bound optimizer, ``native_train_step``) and its default metrics, training
  accuracy included (counted on the device, read once per epoch), no progress bar. An
  epoch is timed from the delivery of ``train.epoch.begin`` to the end of the delivery of
  ``train.epoch.end`` to the metrics (what they do at the end of an epoch counts).
- ``trainer, no logits``: the same with every default metric but ``training_accuracy``,
  so that no metric reads the logits.
- ``hand``: a bare loop over the same sampler calling ``dataset.batch``, the executor's
  ``to_native`` and ``native_train_step``, ``loss.item()``, then ``torch.optim.SGD``
  (momentum, one parameter group) with ``p.grad = g; opt.step()`` on the executor's
  ``native_parameters()``. No bus, no metrics. An epoch is timed with ``perf_counter``
  around the loop.
- ``hand, counting``: the bare loop counting correct predictions as an engineer would
  without a host sync: ``(logits.argmax(-1) == labels).sum()`` added to a tensor, read
  once per epoch.

The comparisons: ``trainer`` against ``hand, counting`` (the Trainer with its default
metrics, against a loop that does the same work) and ``trainer, no logits`` against
``hand``. What counting the accuracy costs by itself is ``hand, counting`` against
``hand``: the workload's, not the Trainer's.

The invocation is the unit of independence: the measurement runs in ``--processes``
fresh worker processes, one after the other. Each worker warms every side up, then runs
``--rounds`` rounds, each side once per round in an order shuffled per round, of
``--epochs`` measured epochs after one epoch that is left out (a fresh trainer run, like
a fresh hand loop, pays one-off costs in its first epoch). It reports the medians over
its rounds of each side's epoch, of each comparison's ratio within a round (measured
side by side, so that slow drifts of the machine cancel) and of the microseconds added
per step. The summary gives, per workload and comparison, the median of the per-process
ratios with the nonparametric CI of that median across processes (at 5 processes the CI
is [min, max], which covers the median with probability 94%) and the median µs added
per step. ``--processes 1`` leaves the between-run variance unknown.

    .venv/bin/python benchmarks/train_overhead.py [--processes 5] [--rounds 15] [--epochs 1]
        [--threads N] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from _machine import allocator, load, machine

from d5core.bus import TRAIN_EPOCH
from d5core.levels.metrics import Metric, MetricResult
from d5core.lv1 import zoo
from d5core.lv1.runner import executor_by_name, with_loss
from d5core.lv2.datasets import load_dataset
from d5core.lv2.samplers import make_sampler
from d5core.lv2.trainer import StopConditions, Trainer, default_metrics
from d5core.measure.stats import median_ci, median_ci_coverage
from d5core.plugins import get_plugin_manager

LR, MOMENTUM = 0.01, 0.9


@dataclass
class Workload:
    """One model and dataset."""

    label: str
    model: str
    model_options: dict[str, Any]
    dataset: str
    dataset_options: dict[str, Any]
    batch_size: int


WORKLOADS = [
    Workload("mlp / synthetic_classification", "mlp", {"hidden": [256, 256]},
             "synthetic_classification", {"samples": 4096, "features": 64, "classes": 10}, 64),
    Workload("lenet5 / synthetic_images 1x28x28", "lenet5", {},
             "synthetic_images", {"samples": 1024, "shape": (1, 28, 28), "classes": 10}, 64),
    # Steps of ~0.1 ms, nearly all framework overhead: the µs the Trainer adds per step
    # are measured here with the least noise (the 2% target is for the two above).
    Workload("probe: tiny mlp / synthetic_classification", "mlp", {"hidden": [16]},
             "synthetic_classification", {"samples": 4096, "features": 16, "classes": 10}, 64),
]  # fmt: skip


class Side:
    """The data, network and executor of one side of the comparison."""

    def __init__(self, w: Workload) -> None:
        self.data = load_dataset(w.dataset, "train", **w.dataset_options)
        classes = int(self.data.num_classes or 10)
        shape = tuple(self.data.input_shape)
        net = zoo.build(w.model, input_shape=shape, classes=classes, seed=0, **w.model_options)
        self.network, self.loss = with_loss(net)
        self.executor: Any = executor_by_name("torch", self.network)
        self.input = next(i.name for i in self.network.inputs if i.name != "labels")
        self.logits = str(self.network.outputs[0].name)  # what the Trainer reads
        self.sampler = make_sampler("shuffle", len(self.data), w.batch_size, seed=0)


class EpochClock(Metric):
    """Wall time of each epoch, from the delivery of ``train.epoch.begin`` to the end of
    the delivery of ``train.epoch.end``: attached after the default metrics, it counts
    what they do at the end of an epoch too (the training accuracy read once per
    epoch), not only the epoch span."""

    name: ClassVar[str] = "epoch_clock"

    def __init__(self) -> None:
        self.times: list[float] = []
        self._start = 0.0

    def attach(self, bus: Any) -> None:
        self.listen(bus, TRAIN_EPOCH + ".begin", self._begin)
        self.listen(bus, TRAIN_EPOCH + ".end", self._end)

    def _begin(self, _event: Any) -> None:
        self._start = time.perf_counter()

    def _end(self, _event: Any) -> None:
        self.times.append(time.perf_counter() - self._start)

    def result(self) -> MetricResult:
        return {"value": len(self.times), "unit": "epochs"}


def _no_logits() -> list[Metric]:
    return [m for m in default_metrics(None) if m.name != "training_accuracy"]


def trainer_epochs(side: Side, epochs: int, *, accuracy: bool = True) -> list[float]:
    """Seconds per epoch of a Trainer run of ``epochs`` epochs (no test passes)."""
    optimizer = get_plugin_manager().load("d5.optimizers", "torch-momentum")(
        lr=LR, momentum=MOMENTUM
    )
    clock = EpochClock()
    metrics = default_metrics(None) if accuracy else _no_logits()
    trainer = Trainer(
        side.executor, side.loss, optimizer, side.data, side.sampler,
        stop=StopConditions(max_epochs=epochs), progress=False, metrics=[*metrics, clock],
    )  # fmt: skip
    result = trainer.run()
    assert result.optimizer_path == "native", result.optimizer_path
    return clock.times


def hand_epochs(side: Side, epochs: int, *, counting: bool = False) -> list[float]:
    """Seconds per epoch of the bare loop (see the module docstring)."""
    ex, data, sampler = side.executor, side.data, side.sampler
    params = list(ex.native_parameters().values())
    opt = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)
    logits = side.logits
    times: list[float] = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        correct = None
        t0 = time.perf_counter()
        for indices in sampler:
            x, y = data.batch(np.asarray(indices))
            feeds = ex.to_native({side.input: x, "labels": np.asarray(y, dtype=np.int64)})
            outputs, grads = ex.native_train_step(feeds, side.loss)
            float(outputs[side.loss].item())
            if counting:
                hits = (outputs[logits].argmax(-1) == feeds["labels"]).sum()
                if correct is None:
                    correct = hits
                else:
                    correct += hits
            for p, g in zip(params, grads.values(), strict=True):
                p.grad = g
            opt.step()
        if correct is not None:
            int(correct.item())
        times.append(time.perf_counter() - t0)
    for p in params:
        p.grad = None
    return times


#: The sides, by name: how each runs ``epochs`` epochs and returns their seconds.
SIDES: dict[str, Any] = {
    "trainer": lambda side, n: trainer_epochs(side, n),
    "trainer, no logits": lambda side, n: trainer_epochs(side, n, accuracy=False),
    "hand": lambda side, n: hand_epochs(side, n),
    "hand, counting": lambda side, n: hand_epochs(side, n, counting=True),
}
#: (label, numerator side, denominator side): the comparisons reported.
COMPARISONS = [
    ("default metrics vs hand loop counting accuracy", "trainer", "hand, counting"),
    ("no metric reads the logits vs bare hand loop", "trainer, no logits", "hand"),
    ("counting accuracy by hand vs bare hand loop (the workload's cost)", "hand, counting",
     "hand"),
]  # fmt: skip


def measure(w: Workload, rounds: int, epochs: int, rng: random.Random) -> dict[str, Any]:
    """Rounds in this process, sides shuffled within each: the median over rounds of
    each side's epoch, and of each comparison's ratio and difference per step within a
    round (side by side in time, so slow drifts cancel)."""
    sides = {name: Side(w) for name in SIDES}
    for name, run in SIDES.items():  # warm-up: first calls, torch.optim import
        run(sides[name], 1)
    per_round: dict[str, list[float]] = {name: [] for name in SIDES}
    order = list(SIDES)
    for _ in range(rounds):
        rng.shuffle(order)
        for name in order:
            # The first epoch of each run is left out: it pays what a run pays once (the
            # trainer binds its optimizer; both create the momentum buffers).
            per_round[name].append(statistics.median(SIDES[name](sides[name], epochs + 1)[1:]))
    steps = -(-len(sides["hand"].data) // w.batch_size)
    out: dict[str, Any] = {
        "workload": w.label,
        "batch_size": w.batch_size,
        "steps_per_epoch": steps,
        "epochs_each": rounds * epochs,
        "epoch_s": {name: statistics.median(v) for name, v in per_round.items()},
        "comparisons": {},
    }
    for label, num, den in COMPARISONS:
        pairs = list(zip(per_round[num], per_round[den], strict=True))
        out["comparisons"][label] = {
            "ratio": statistics.median(a / b for a, b in pairs),
            "added_per_step_us": statistics.median((a - b) / steps * 1e6 for a, b in pairs),
        }
    return out


def worker(rounds: int, epochs: int, threads: int | None, seed: int) -> dict[str, Any]:
    """One process's measurement of every workload."""
    allocator()  # d5's allocator policy, as the d5 command applies it
    if threads is not None:
        torch.set_num_threads(threads)
    torch.manual_seed(0)
    rng = random.Random(seed)
    before = os.getloadavg()[0]
    rows = [measure(w, rounds, epochs, rng) for w in WORKLOADS]
    return {"pid": os.getpid(), "threads": torch.get_num_threads(), "load_before": before,
            "load_after": os.getloadavg()[0], "rows": rows}  # fmt: skip


def run_worker(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Run :func:`worker` in a fresh interpreter and read its JSON."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--seed", str(seed),
           "--rounds", str(args.rounds), "--epochs", str(args.epochs)]  # fmt: skip
    if args.threads is not None:
        cmd += ["--threads", str(args.threads)]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"worker process failed (exit {done.returncode}): {last}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def summarize(w: Workload, label: str, processes: list[dict[str, Any]]) -> dict[str, Any]:
    """One comparison of one workload across processes: median ratio with its CI, and
    the median µs added per step with theirs."""
    rows = [next(r for r in p["rows"] if r["workload"] == w.label) for p in processes]
    found = [r["comparisons"][label] for r in rows]
    ratios = [c["ratio"] for c in found]
    added = [c["added_per_step_us"] for c in found]
    _, num, den = next(c for c in COMPARISONS if c[0] == label)
    n = len(rows)
    summary: dict[str, Any] = {
        "workload": w.label,
        "comparison": label,
        "batch_size": rows[0]["batch_size"],
        "steps_per_epoch": rows[0]["steps_per_epoch"],
        "processes": n,
        "epochs_each": rows[0]["epochs_each"],
        "epoch_s": statistics.median(r["epoch_s"][num] for r in rows),
        "baseline_epoch_s": statistics.median(r["epoch_s"][den] for r in rows),
        "ratio": statistics.median(ratios),
        "ratios": ratios,
        "added_per_step_us": statistics.median(added),
    }
    if n > 1:
        summary["ratio_ci"] = list(median_ci(ratios))
        summary["ratio_ci_coverage"] = median_ci_coverage(n)
        summary["added_per_step_us_ci"] = list(median_ci(added))
    return summary


def _table(rows: list[dict[str, Any]]) -> list[str]:
    head = ("| workload | steps/epoch | processes × epochs | epoch (ms) | baseline epoch (ms) | "
            "ratio, median of processes | CI across processes | added/step (µs), median | "
            "CI (µs) |")  # fmt: skip
    lines = [head, "|---|---:|---:|---:|---:|---:|---|---:|---|"]
    for r in rows:
        ci = r.get("ratio_ci")
        us = r.get("added_per_step_us_ci")
        lines.append(
            f"| {r['workload']} | {r['steps_per_epoch']} | "
            f"{r['processes']} × {r['epochs_each']} | {r['epoch_s'] * 1e3:.1f} | "
            f"{r['baseline_epoch_s'] * 1e3:.1f} | {r['ratio']:.3f} | "
            + (f"{ci[0]:.3f}–{ci[1]:.3f} ({r['ratio_ci_coverage']:.0%})" if ci else "unknown")
            + f" | {r['added_per_step_us']:.1f} | "
            + (f"{us[0]:.1f} – {us[1]:.1f}" if us else "unknown")
            + " |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--processes",
        type=int,
        default=5,
        help="fresh worker processes, each measuring every workload",
    )
    parser.add_argument("--rounds", type=int, default=15, help="rounds per process")
    parser.add_argument("--epochs", type=int, default=1, help="epochs per round per side")
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads in the workers (torch's default if left out)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the orders of the sides")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("processes", "rounds", "epochs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if args.threads is not None and args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    if args.worker:
        json.dump(worker(args.rounds, args.epochs, args.threads, args.seed), sys.stdout)
        print()
        return 0
    start_load = load()
    processes = [run_worker(args, args.seed * 1000 + i) for i in range(args.processes)]
    summary = [summarize(w, label, processes) for label, _, _ in COMPARISONS for w in WORKLOADS]
    info = {"machine": machine(), "load_start": start_load, "load_end": load(),
            "torch": torch.__version__, "threads": processes[0]["threads"],
            "rounds": args.rounds, "epochs": args.epochs, "processes": processes,
            "summary": summary}  # fmt: skip
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        print()
        return 0
    design = f"{args.processes} processes × {args.rounds} rounds × {args.epochs} epochs per side"
    loads = f"{info['load_start']} at the start, {info['load_end']} at the end"
    print(f"{info['machine']}; torch {info['torch']}, {info['threads']} threads; {loads}; {design}")
    if args.processes == 1:
        print("one process: between-run variance unknown")
    for label, num, den in COMPARISONS:
        print()
        print(f"{label} ({num!r} / {den!r})")
        print()
        print("\n".join(_table([r for r in summary if r["comparison"] == label])))
    print()
    for r in summary:
        each = ", ".join(f"{x:.3f}" for x in r["ratios"])
        print(f"{r['workload']}, {r['comparison']}: ratio per process {each}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
