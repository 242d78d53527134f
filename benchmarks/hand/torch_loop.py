"""The recipe's training written by hand in PyTorch, as its user would: ``nn.Sequential``,
``torch.optim.SGD`` with momentum, ``F.cross_entropy``, a test pass after every epoch.

    .venv/bin/python benchmarks/hand/torch_loop.py digits-mlp
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from _problems import Problem, Result, clock, epoch_batches, he_weights, load, main
from torch import nn


def model_of(problem: Problem, x_train: torch.Tensor, classes: int) -> nn.Module:
    if problem.model == "mlp":
        hidden = problem.options["hidden"]
        model = nn.Sequential(nn.Linear(x_train.shape[1], hidden), nn.ReLU(),
                              nn.Linear(hidden, classes))  # fmt: skip
    else:
        c = x_train.shape[1]
        flat = 16 * ((x_train.shape[2] // 2 - 4) // 2) * ((x_train.shape[3] // 2 - 4) // 2)
        model = nn.Sequential(
            nn.Conv2d(c, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
            nn.Linear(flat, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(),
            nn.Linear(84, classes),
        )  # fmt: skip
    with torch.no_grad():
        for p, w in zip(model.parameters(), he_weights(problem, x_train.numpy(), classes),
                        strict=True):  # fmt: skip
            p.copy_(torch.from_numpy(w))
    return model


def train(problem: Problem) -> Result:
    t0 = clock()  # the first touch of data
    xa, ya, xb, yb = load(problem)
    x_train, y_train = torch.from_numpy(xa), torch.from_numpy(ya)
    x_test, y_test = torch.from_numpy(xb), torch.from_numpy(yb)
    model = model_of(problem, x_train, int(ya.max()) + 1)
    opt = torch.optim.SGD(model.parameters(), lr=problem.lr, momentum=problem.momentum)
    setup = clock() - t0
    steps, tested, accuracy, reached = 0, 0.0, 0.0, None
    for epoch in range(problem.epochs):
        model.train()
        for idx in epoch_batches(problem, epoch, len(y_train)):
            i = torch.from_numpy(idx)
            loss = F.cross_entropy(model(x_train[i]), y_train[i])
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()  # the loss of every step is read, as d5 records it
            steps += 1
        started = clock()
        model.eval()
        correct = 0
        with torch.no_grad():
            for s in range(0, len(y_test), problem.eval_batch_size):
                logits = model(x_test[s : s + problem.eval_batch_size])
                correct += int((logits.argmax(1) == y_test[s : s + problem.eval_batch_size]).sum())
        accuracy = correct / len(y_test)
        tested += clock() - started
        if accuracy >= problem.target:
            reached = clock() - t0
            break
    return Result(reached, steps, epoch + 1, accuracy, tested, setup)


if __name__ == "__main__":
    raise SystemExit(main(train))
