"""The recipe's training written by hand in MXNet Gluon, as its user would: a hybridized
``gluon.nn.HybridSequential``, ``gluon.Trainer`` with SGD and momentum,
``gluon.loss.SoftmaxCrossEntropyLoss`` under ``autograd.record()``, a test pass after
every epoch.

    .venv-mxnet/bin/python benchmarks/hand/mxnet_loop.py digits-mlp

Hybridized with ``static_alloc`` and ``static_shape``: what d5's MXNet executor compiles
its graph into (a ``CachedOp`` with static memory and shapes), and what Gluon's guides
advise for speed. Like d5, each new batch shape (the smaller last batch, the test
batches) compiles once.

MXNet's SGD keeps ``u = m u - lr g; p += u``: PyTorch's ``v = m v + g; p -= lr v`` with
``u = -lr v``, the same steps at a constant learning rate. The loss is the batch mean
(as d5's ``cross_entropy``) and ``trainer.step(1)`` leaves the gradient unscaled (Gluon's
``step(batch_size)`` rescales by ``1/batch_size`` for a summed loss: the same update).
Batches are gathered with ``take``: an ``NDArray``'s fancy indexing ``x[i]`` runs about
18 operators per batch here (1.4 ms a step), ``take`` one.
"""

from __future__ import annotations

import mxnet as mx
from _problems import Problem, Result, clock, epoch_batches, he_weights, load, main
from mxnet import autograd, gluon
from mxnet.gluon import nn


def model_of(problem: Problem, x_train: mx.nd.NDArray, classes: int) -> nn.HybridSequential:
    net = nn.HybridSequential()
    if problem.model == "mlp":
        hidden = problem.options["hidden"]
        net.add(nn.Dense(hidden, activation="relu", in_units=x_train.shape[1]),
                nn.Dense(classes, in_units=hidden))  # fmt: skip
    else:
        c = x_train.shape[1]
        flat = 16 * ((x_train.shape[2] // 2 - 4) // 2) * ((x_train.shape[3] // 2 - 4) // 2)
        net.add(
            nn.Conv2D(6, 5, padding=2, activation="relu", in_channels=c), nn.MaxPool2D(2),
            nn.Conv2D(16, 5, activation="relu", in_channels=6), nn.MaxPool2D(2),
            nn.Dense(120, activation="relu", in_units=flat),
            nn.Dense(84, activation="relu", in_units=120),
            nn.Dense(classes, in_units=84),
        )  # fmt: skip
    net.initialize()
    weights = he_weights(problem, x_train.asnumpy(), classes)
    for p, w in zip(net.collect_params().values(), weights, strict=True):
        p.set_data(mx.nd.array(w))
    net.hybridize(static_alloc=True, static_shape=True)
    return net


def train(problem: Problem) -> Result:
    t0 = clock()  # the first touch of data
    xa, ya, xb, yb = load(problem)
    x_train, y_train = mx.nd.array(xa), mx.nd.array(ya, dtype="int64")
    x_test, y_test = mx.nd.array(xb), mx.nd.array(yb, dtype="int64")
    net = model_of(problem, x_train, int(ya.max()) + 1)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    sgd = {"learning_rate": problem.lr, "momentum": problem.momentum}
    trainer = gluon.Trainer(net.collect_params(), "sgd", sgd)
    setup = clock() - t0
    steps, tested, accuracy, reached = 0, 0.0, 0.0, None
    for epoch in range(problem.epochs):
        for idx in epoch_batches(problem, epoch, len(ya)):
            i = mx.nd.array(idx, dtype="int64")
            x, y = x_train.take(i), y_train.take(i)
            with autograd.record():
                loss = loss_fn(net(x), y).mean()
            loss.backward()
            trainer.step(1)
            loss.asscalar()  # the loss of every step is read, as d5 records it
            steps += 1
        started = clock()
        correct = 0
        for s in range(0, len(yb), problem.eval_batch_size):
            batch = slice(s, s + problem.eval_batch_size)
            hits = net(x_test[batch]).argmax(axis=1) == y_test[batch].astype("float32")
            correct += int(hits.sum().asscalar())
        accuracy = correct / len(yb)
        tested += clock() - started
        if accuracy >= problem.target:
            reached = clock() - t0
            break
    return Result(reached, steps, epoch + 1, accuracy, tested, setup)


if __name__ == "__main__":
    raise SystemExit(main(train))
