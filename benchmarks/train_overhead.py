"""What d5's Trainer adds to a training epoch, against a hand-written torch loop.

Two workloads, each on the torch executor with a torch-native optimizer (momentum SGD):
the zoo ``mlp`` on ``synthetic_classification`` and ``lenet5`` on ``synthetic_images``
(1x28x28). Both sides use the same network (same initial weights), the same dataset, the
same sampler (``shuffle``, same seed, so the same batches), the same batch size and the
same number of steps per epoch; test passes are excluded from both.

- trainer: :class:`d5core.training.trainer.Trainer` with ``torch-momentum`` (native path:
  bound optimizer, ``native_train_step``), its default metrics attached, no progress bar,
  no test set. An epoch is the duration of its ``train.epoch`` span.
- by hand: a bare loop over the same sampler calling ``dataset.batch``, the executor's
  ``to_native`` and ``native_train_step``, ``loss.item()``, then ``torch.optim.SGD``
  (momentum, one parameter group) with ``p.grad = g; opt.step()`` on the executor's
  ``native_parameters()``. No bus, no metrics, no accuracy. An epoch is timed with
  ``perf_counter`` around the loop.

Rounds are interleaved (trainer, hand, trainer, hand, ...), a few epochs each, after one
warm-up round; the report gives the median epoch time of each side and their ratio
(target <= 1.02).

    .venv/bin/python benchmarks/train_overhead.py [--rounds 5] [--epochs 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from _machine import load, machine

from d5core.bus import TRAIN_EPOCH, Event, MetricBus
from d5core.networks import zoo
from d5core.plugins import get_plugin_manager
from d5core.runners.networks import executor_by_name, with_loss
from d5core.training.datasets import load_dataset
from d5core.training.samplers import make_sampler
from d5core.training.trainer import StopConditions, Trainer

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
        self.sampler = make_sampler("shuffle", len(self.data), w.batch_size, seed=0)


def trainer_epochs(side: Side, epochs: int) -> list[float]:
    """Seconds per epoch of a Trainer run of ``epochs`` epochs (no test passes)."""
    optimizer = get_plugin_manager().load("d5.optimizers", "torch-momentum")(
        lr=LR, momentum=MOMENTUM
    )
    bus = MetricBus()
    times: list[float] = []

    def on_epoch(event: Event) -> None:
        times.append(event.payload["duration_ns"] / 1e9)

    bus.subscribe(TRAIN_EPOCH + ".end", on_epoch)
    trainer = Trainer(
        side.executor, side.loss, optimizer, side.data, side.sampler,
        stop=StopConditions(max_epochs=epochs), bus=bus, progress=False,
    )  # fmt: skip
    result = trainer.run()
    assert result.optimizer_path == "native", result.optimizer_path
    return times


def hand_epochs(side: Side, epochs: int) -> list[float]:
    """Seconds per epoch of the bare loop (see the module docstring)."""
    ex, data, sampler = side.executor, side.data, side.sampler
    params = list(ex.native_parameters().values())
    opt = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)
    times: list[float] = []
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        t0 = time.perf_counter()
        for indices in sampler:
            x, y = data.batch(np.asarray(indices))
            feeds = ex.to_native({side.input: x, "labels": np.asarray(y, dtype=np.int64)})
            outputs, grads = ex.native_train_step(feeds, side.loss)
            float(outputs[side.loss].item())
            for p, g in zip(params, grads.values(), strict=True):
                p.grad = g
            opt.step()
        times.append(time.perf_counter() - t0)
    for p in params:
        p.grad = None
    return times


def measure(w: Workload, rounds: int, epochs: int) -> dict[str, Any]:
    """Interleaved rounds; median epoch time of each side and their ratio."""
    trainer_side, hand_side = Side(w), Side(w)
    trainer_epochs(trainer_side, 1)  # warm-up: first calls, torch.optim import
    hand_epochs(hand_side, 1)
    t_all: list[float] = []
    h_all: list[float] = []
    for _ in range(rounds):
        t_all += trainer_epochs(trainer_side, epochs)
        h_all += hand_epochs(hand_side, epochs)
    t_med, h_med = statistics.median(t_all), statistics.median(h_all)
    steps = -(-len(trainer_side.data) // w.batch_size)
    return {
        "workload": w.label,
        "batch_size": w.batch_size,
        "steps_per_epoch": steps,
        "epochs_each": len(t_all),
        "trainer_epoch_s": t_med,
        "hand_epoch_s": h_med,
        "ratio": t_med / h_med,
        "added_per_step_us": (t_med - h_med) / steps * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3, help="epochs per round per side")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rows = [measure(w, args.rounds, args.epochs) for w in WORKLOADS]
    info = {"machine": machine(), "load": load(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "rows": rows}  # fmt: skip
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        print()
        return 0
    print(f"{info['machine']}; torch {info['torch']}, {info['threads']} threads; {info['load']}")
    print()
    print("| workload | batch | steps/epoch | epochs | trainer epoch (ms) | hand epoch (ms) "
          "| ratio | added/step (µs) |")  # fmt: skip
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['workload']} | {r['batch_size']} | {r['steps_per_epoch']} | "
              f"{r['epochs_each']} | {r['trainer_epoch_s'] * 1e3:.1f} | "
              f"{r['hand_epoch_s'] * 1e3:.1f} | {r['ratio']:.3f} | "
              f"{r['added_per_step_us']:.1f} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
