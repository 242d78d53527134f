"""d5's mxnet graph executor against the same networks written directly in Gluon.

The method is ``executor_fairness.py``'s (read its docstring): each network runs two
ways in the same process, on the same inputs (converted beforehand on both sides) and
with the same weights (copied from the d5 network), checked to compute the same thing
(logits or loss to ``1e-5 + 1e-4 * max|hand|``, gradients to 3% relative L2) before
anything is timed, then timed with the same ``perf_counter`` loop in blocks shuffled
per round, over fresh worker processes; the summary is the median over processes of the
per-process median ratio d5 / hand, with its CI. Its helpers are imported from there.

The sides, both on MXNet 1.9.1 in ``.venv-mxnet``:

- **d5**: the ``mxnet`` executor's prepared callables (``prepare_inference``,
  ``prepare_train_step``);
- **Gluon**: ``HybridBlock``s ``nn.Conv2D``, ``nn.Dense``, ``nn.BatchNorm`` (momentum 0.9,
  epsilon 1e-5), ``nn.MaxPool2D`` and ``nn.GlobalAvgPool2D``, hybridized with the flags
  the executor's ``CachedOp`` has (``static_alloc=True, static_shape=True``). Inference
  calls the block outside ``autograd.record``; the train step records the block and
  ``gluon.loss.SoftmaxCrossEntropyLoss`` (mean over the batch) with
  ``autograd.record()`` and runs ``backward()``, which writes every parameter's
  gradient, as the executor's step does; no optimizer update on either side.

MXNet's engine is asynchronous: every call of either side is followed by
``mx.nd.waitall()`` inside the timed loop, so each call's time includes its work.

    .venv-mxnet/bin/python benchmarks/mxnet_fairness.py [--processes 5] [--rounds 15]
        [--nets lenet5,resnet20] [--batches 1,32] [--modes inference,train]
        [--block-s 0.1] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
from _machine import allocator, load, machine
from executor_fairness import (
    CLASSES,
    MODES,
    MOONSHOT,
    NETS,
    TARGET,
    Binding,
    Comparison,
    Fn,
    Layers,
    Side,
    _batches,
    _case,
    _compare,
    _lenet_flat,
    _names,
    _table,
    measure,
    plain_bindings,
    summarize,
)

from d5core.lv1.runner import executor_by_name

FRAMEWORK = "mxnet"


def _mx() -> Any:
    from d5_plugin_mxnet._mx import mxnet

    return mxnet()


def gluon_model(net: str) -> tuple[Any, list[Binding]]:
    """The network as hybridizable Gluon blocks, and where each d5 parameter goes."""
    mx = _mx()
    from mxnet.gluon import nn

    layers = Layers()
    c, h, w = NETS[net]

    def conv(channels: int, kernel: int, stride: int, pad: int, cin: int, bias: bool) -> Any:
        return layers.add(
            "conv", nn.Conv2D(channels, kernel, stride, pad, use_bias=bias, in_channels=cin)
        )

    def bn(channels: int) -> Any:
        return layers.add(
            "batchnormalization", nn.BatchNorm(momentum=0.9, epsilon=1e-5, in_channels=channels)
        )

    def relu(F: Any, x: Any) -> Any:
        """Gluon's own activation layer's op (``nn.Activation``, ``Conv2D(activation=)``):
        MXNet's oneDNN build runs it in oneDNN, where ``F.relu`` is a plain elementwise op
        that first converts a oneDNN layout back (1.2 ms more per 256-image LeNet-5
        inference here)."""
        return F.Activation(x, act_type="relu")

    class LeNet5(nn.HybridBlock):
        def __init__(self) -> None:
            super().__init__()
            fc, fh, fw = _lenet_flat((c, h, w))
            self.conv1 = conv(6, 5, 1, 2, c, True)
            self.conv2 = conv(16, 5, 1, 0, 6, True)
            self.pool = nn.MaxPool2D(2)
            self.fc1 = layers.add("gemm", nn.Dense(120, in_units=fc * fh * fw))
            self.fc2 = layers.add("gemm", nn.Dense(84, in_units=120))
            self.fc3 = layers.add("gemm", nn.Dense(CLASSES, in_units=84))

        def hybrid_forward(self, F: Any, x: Any) -> Any:
            x = self.pool(relu(F, self.conv1(x)))
            x = self.pool(relu(F, self.conv2(x)))
            x = relu(F, self.fc1(x))  # Dense flattens (N, C, H, W) in ONNX's order
            x = relu(F, self.fc2(x))
            return self.fc3(x)

    class BasicBlock(nn.HybridBlock):
        def __init__(self, cin: int, cout: int, stride: int) -> None:
            super().__init__()
            self.conv1 = conv(cout, 3, stride, 1, cin, False)
            self.bn1 = bn(cout)
            self.conv2 = conv(cout, 3, 1, 1, cout, False)
            self.bn2 = bn(cout)
            self.shortcut = None
            if stride != 1 or cin != cout:
                self.shortcut = nn.HybridSequential()
                self.shortcut.add(conv(cout, 1, stride, 0, cin, False), bn(cout))

        def hybrid_forward(self, F: Any, x: Any) -> Any:
            out = relu(F, self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            return relu(F, out + (x if self.shortcut is None else self.shortcut(x)))

    class ResNet20(nn.HybridBlock):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = conv(16, 3, 1, 1, c, False)
            self.bn1 = bn(16)
            self.blocks = nn.HybridSequential()
            cin = 16
            for stage, cout in enumerate((16, 32, 64)):
                for index in range(3):
                    self.blocks.add(BasicBlock(cin, cout, 2 if stage > 0 and index == 0 else 1))
                    cin = cout
            self.pool = nn.GlobalAvgPool2D()
            self.fc = layers.add("gemm", nn.Dense(CLASSES, in_units=64))

        def hybrid_forward(self, F: Any, x: Any) -> Any:
            x = relu(F, self.bn1(self.conv1(x)))
            return self.fc(self.pool(self.blocks(x)))

    model = {"lenet5": LeNet5, "resnet20": ResNet20}[net]()
    model.initialize(ctx=mx.cpu())
    return model, plain_bindings(layers, ("gamma", "beta", "running_mean", "running_var"))


def _synchronized(fn: Fn) -> Fn:
    """``fn`` followed by ``mx.nd.waitall()``: the same wait on both sides."""
    waitall = _mx().nd.waitall

    def call() -> None:
        fn()
        waitall()

    return call


def mxnet_sides(net: str, batch: int, mode: str) -> list[Comparison]:
    """The mxnet executor against hybridized Gluon on one case."""
    mx = _mx()
    from mxnet import autograd, gluon

    network, loss, feeds = _case(net, batch, mode)
    executor: Any = executor_by_name("mxnet", network)
    model, bindings = gluon_model(net)
    params = network.parameters
    for b in bindings:
        b.target.set_data(mx.nd.array(b.to_hand(params[b.name]), dtype=np.float32))
    model.hybridize(static_alloc=True, static_shape=True)
    x = mx.nd.array(feeds["input"], dtype=np.float32)
    trained = [b for b in bindings if b.trainable]

    if mode == "inference":

        def hand() -> Any:
            return model(x)

        def hand_check() -> dict[str, np.ndarray]:
            return {"output": hand().asnumpy()}

        d5 = executor.prepare_inference(feeds)

        def d5_check() -> dict[str, np.ndarray]:
            return dict(executor.inference(feeds))
    else:
        y = mx.nd.array(feeds["labels"], dtype=np.float32)
        cross_entropy = gluon.loss.SoftmaxCrossEntropyLoss()
        # Hybridized too, as an expert writes it: left imperative, Gluon's loss costs
        # ~170 µs of separate engine operations per step that d5's compiled graph avoids.
        cross_entropy.hybridize(static_alloc=True, static_shape=True)

        def step() -> Any:
            with autograd.record():
                value = cross_entropy(model(x), y).mean()
            value.backward()
            return value

        hand = step

        def hand_check() -> dict[str, np.ndarray]:
            value = step()
            out = {b.name: b.target.grad().asnumpy() for b in trained}
            return {loss: value.asnumpy().reshape(()), **out}

        d5 = executor.prepare_train_step(feeds, loss)

        def d5_check() -> dict[str, np.ndarray]:
            outputs, grads = executor.inference_and_backprop(feeds, loss)
            return {**outputs, **grads}

    diffs = _compare(d5_check(), hand_check(), frozenset(b.name for b in trained))
    return [
        Comparison(
            "hybridized",
            Side("d5 mxnet", _synchronized(d5)),
            Side("gluon", _synchronized(hand)),
            diffs,
        )
    ]


def threads() -> str:
    """The thread settings the worker ran with."""
    from d5_plugin_mxnet import _mx as settings

    mx = _mx()
    found = settings.settings() or {}
    return (
        f"mxnet {mx.__version__}, OMP_NUM_THREADS {found.get('omp_num_threads')}, engine "
        f"{found.get('engine')}, worker threads {found.get('cpu_worker_threads')}"
    )


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """One process's measurement of every case."""
    policy = allocator()  # before MXNet allocates anything
    rng = random.Random(args.seed)
    before = os.getloadavg()[0]
    rows = []
    for net in args.nets:
        for batch in args.batches:
            for mode in args.modes:
                comparisons = mxnet_sides(net, batch, mode)
                calls = measure(comparisons, args.rounds, args.block_s, rng)
                for c in comparisons:
                    pairs = list(zip(c.d5.blocks, c.hand.blocks, strict=True))
                    ratios = [d / h for d, h in pairs]
                    rows.append(
                        {
                            "framework": FRAMEWORK,
                            "net": net,
                            "batch": batch,
                            "mode": mode,
                            "path": c.path,
                            "d5": c.d5.label,
                            "hand": c.hand.label,
                            "calls_per_block": calls,
                            "rounds": len(pairs),
                            "d5_s": statistics.median(c.d5.blocks),
                            "hand_s": statistics.median(c.hand.blocks),
                            "ratio": statistics.median(ratios),
                            "ratios": ratios,
                            "added_us": statistics.median((d - h) * 1e6 for d, h in pairs),
                            "added_us_rounds": [(d - h) * 1e6 for d, h in pairs],
                            "max_abs_diff": max(d["abs"] for d in c.diffs.values()),
                            "max_grad_rel": max(
                                (d["rel"] for d in c.diffs.values() if d["gradient"]), default=None
                            ),
                            "diffs": c.diffs,
                        }
                    )
                print(f"mxnet {net} batch {batch} {mode}: done", file=sys.stderr)
    return {
        "pid": os.getpid(),
        "framework": FRAMEWORK,
        "threads": f"{threads()}, {policy}",
        "load_before": before,
        "load_after": os.getloadavg()[0],
        "rows": rows,
    }


def run_worker(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """Run :func:`worker` in a fresh interpreter and read its JSON."""
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--worker",
        "--seed",
        str(seed),
        "--nets",
        ",".join(args.nets),
        "--batches",
        ",".join(map(str, args.batches)),
        "--modes",
        ",".join(args.modes),
        "--rounds",
        str(args.rounds),
        "--block-s",
        str(args.block_s),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SystemExit(f"mxnet worker failed (exit {done.returncode}): {last}")
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--processes", type=int, default=5, help="fresh worker processes")
    parser.add_argument("--rounds", type=int, default=15, help="rounds per process")
    parser.add_argument(
        "--nets",
        type=_names(tuple(NETS)),
        default=list(NETS),
        help="comma-separated: lenet5, resnet20 (default both)",
    )
    parser.add_argument(
        "--batches",
        type=_batches,
        default=[1, 32],
        help="comma-separated batch sizes (default 1,32)",
    )
    parser.add_argument(
        "--modes",
        type=_names(MODES),
        default=list(MODES),
        help="comma-separated: inference, train (default both)",
    )
    parser.add_argument(
        "--block-s",
        type=float,
        default=0.1,
        help="seconds of calls per block of the fastest side of a case",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the orders of the sides")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("processes", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, got {getattr(args, name)}")
    if not args.block_s > 0:
        parser.error(f"--block-s must be positive, got {args.block_s}")
    if args.worker:
        json.dump(worker(args), sys.stdout)
        print()
        return 0
    start_load = load()
    processes = [run_worker(args, args.seed * 1000 + i) for i in range(args.processes)]
    summary = summarize(processes)
    info = {
        "machine": machine(),
        "load_start": start_load,
        "load_end": load(),
        "threads": processes[0]["threads"],
        "rounds": args.rounds,
        "block_s": args.block_s,
        "processes": processes,
        "summary": summary,
    }
    if args.json:
        json.dump(info, sys.stdout, indent=2)
        print()
        return 0
    plural = "process" if args.processes == 1 else "processes"
    print(
        f"{info['machine']}; {info['threads']}; {info['load_start']} at the start, "
        f"{info['load_end']} at the end; {args.processes} {plural} × {args.rounds} rounds"
    )
    if args.processes == 1:
        print("one process: the CIs are over rounds; between-process variance unknown")
    print()
    print("\n".join(_table(summary)))
    print()
    for r in summary:
        each = ", ".join(f"{v:.3f}" for v in r["ratios"])
        print(f"mxnet {r['net']} b{r['batch']} {r['mode']}: ratio per process {each}")
    ratios = [r["ratio"] for r in summary]
    over = [r for r in summary if r["ratio"] > TARGET]
    print(
        f"\nratio d5/hand: median {statistics.median(ratios):.3f}, max {max(ratios):.3f}; "
        f"target ≤ {TARGET} {'met' if not over else f'missed by {len(over)} case(s)'}; "
        f"moonshot ≤ {MOONSHOT}: {sum(r <= MOONSHOT for r in ratios)} of {len(ratios)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
