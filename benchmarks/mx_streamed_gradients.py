"""A numpy-path training step on MXNet, with the gradients read back all at once against
read back as the optimizer asks for them (``inference_and_backprop_streamed``).

Both sides run the step the trainer's numpy path runs: forward and backward, the loss and
the count of correct predictions read, d5's ``momentum`` optimizer stepping numpy copies
of the parameters, and ``set_parameters`` writing them back. The eager side takes the
gradients from ``inference_and_backprop`` (a dict read in trainable order, so its first
read waits for the whole backward pass); the streamed side from
``inference_and_backprop_streamed`` (read last layer first, each waiting for itself, so
the optimizer works while MXNet computes the first layers' gradients).

LeNet-5 on 1x28x28 images, 4 classes, batch 32: the synthetic-cnn recipe's step. The two
sides alternate in blocks of steps in one process (a warm-up block first); each process
prints the median step of each side and what streaming saved. Run it in several
processes: the machine's noise moves a single process's figures by 10% and more.

    .venv-mxnet/bin/python benchmarks/mx_streamed_gradients.py [--blocks 20] [--steps 40]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from d5_plugin_mxnet.executor import MXNetExecutor

from d5core.lv1.runner import with_loss
from d5core.plugins import get_plugin_manager
from d5core.testing.executors import build_network


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=20, help="blocks per side")
    parser.add_argument("--steps", type=int, default=40, help="steps per block (5 warm up)")
    args = parser.parse_args()
    net, loss = with_loss(build_network("lenet5", seed=0, input_shape=(1, 28, 28), classes=4))
    executor = MXNetExecutor(net)
    optimizer = get_plugin_manager().load("d5.optimizers", "momentum")(lr=0.02)
    rng = np.random.default_rng(0)
    x = rng.random((32, 1, 28, 28), dtype=np.float32)
    feeds = {net.model.graph.input[0].name: x, "labels": rng.integers(0, 4, 32)}
    logits = net.model.graph.output[0].name
    _, grads = executor.inference_and_backprop(feeds, loss)
    current = executor.get_parameters()
    params = {name: np.array(current[name], copy=True) for name in grads}

    def step(backprop: Callable[..., Any]) -> float:
        t0 = time.perf_counter_ns()
        outputs, grads = backprop(feeds, loss)
        float(np.asarray(outputs[loss]).reshape(-1)[0])
        int(np.sum(np.argmax(outputs[logits], axis=1) == feeds["labels"]))
        optimizer.step(params, grads)
        executor.set_parameters(params)
        return (time.perf_counter_ns() - t0) / 1e3

    sides = {
        "eager": executor.inference_and_backprop,
        "streamed": executor.inference_and_backprop_streamed,
    }
    times: dict[str, list[float]] = {side: [] for side in sides}
    for _ in range(args.blocks):
        for side, backprop in sides.items():
            block = [step(backprop) for _ in range(args.steps)]
            times[side].extend(block[5:])
    eager, streamed = (statistics.median(times[side]) for side in sides)
    print(
        f"median step: eager {eager:.0f} us, streamed {streamed:.0f} us; "
        f"streaming saved {eager - streamed:.0f} us ({(eager - streamed) / eager:.1%})"
    )


if __name__ == "__main__":
    main()
