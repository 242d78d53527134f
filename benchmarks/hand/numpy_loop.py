"""The recipe's training written by hand in plain numpy, as its user would: each layer's
forward and backward spelt out (im2col convolution, 2x2 max pool, ReLU, dense layers,
softmax cross-entropy averaged over the batch), momentum SGD in PyTorch's convention
(``v = m v + g``; ``p -= lr v``), float32 throughout, a test pass after every epoch.

    .venv/bin/python benchmarks/hand/numpy_loop.py digits-mlp
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from _problems import Problem, Result, clock, epoch_batches, he_weights, load, main
from numpy.lib.stride_tricks import sliding_window_view


class Dense:
    """``y = x W^T + b`` with ``W`` in PyTorch's ``(out, in)`` layout."""

    def __init__(self, w: np.ndarray, b: np.ndarray) -> None:
        self.params = [w, b]

    def forward(self, x: np.ndarray) -> np.ndarray:
        self.x = x
        return x @ self.params[0].T + self.params[1]

    def backward(self, dy: np.ndarray) -> np.ndarray:
        self.grads = [dy.T @ self.x, dy.sum(axis=0)]
        return dy @ self.params[0]


class Conv:
    """A 2-D convolution, stride 1, as one matrix product over im2col patches laid out
    ``(c * kh * kw, n * ho * wo)``, so that copying the patches runs along image rows."""

    def __init__(self, w: np.ndarray, b: np.ndarray, pad: int = 0) -> None:
        self.params, self.pad = [w, b], pad

    def forward(self, x: np.ndarray) -> np.ndarray:
        p, (o, _, kh, kw) = self.pad, self.params[0].shape
        x = np.pad(x, ((0, 0), (0, 0), (p, p), (p, p))) if p else x
        self.shape = x.shape
        windows = sliding_window_view(x, (kh, kw), axis=(2, 3))  # (n, c, ho, wo, kh, kw)
        n, _, ho, wo = windows.shape[:4]
        self.cols = windows.transpose(1, 4, 5, 0, 2, 3).reshape(-1, n * ho * wo)
        y = self.params[0].reshape(o, -1) @ self.cols + self.params[1][:, None]
        return np.ascontiguousarray(y.reshape(o, n, ho, wo).transpose(1, 0, 2, 3))

    def backward(self, dy: np.ndarray) -> np.ndarray:
        w = self.params[0]
        o, c, kh, kw = w.shape
        n, _, ho, wo = dy.shape
        dy = dy.transpose(1, 0, 2, 3).reshape(o, -1)
        self.grads = [(dy @ self.cols.T).reshape(w.shape), dy.sum(axis=1)]
        dcols = (w.reshape(o, -1).T @ dy).reshape(c, kh, kw, n, ho, wo)
        dx = np.zeros(self.shape, dy.dtype)
        for i in range(kh):  # col2im: every patch adds its gradient back where it came from
            for j in range(kw):
                dx[:, :, i : i + ho, j : j + wo] += dcols[:, i, j].transpose(1, 0, 2, 3)
        p = self.pad
        return dx[:, :, p : dx.shape[2] - p, p : dx.shape[3] - p] if p else dx


class ReLU:
    params: ClassVar[list[np.ndarray]] = []

    def forward(self, x: np.ndarray) -> np.ndarray:
        self.mask = x > 0
        return x * self.mask

    def backward(self, dy: np.ndarray) -> np.ndarray:
        return dy * self.mask


class MaxPool2:
    """2x2 max pooling, stride 2, over the four strided corners of the windows; the
    gradient goes to each window's first maximum."""

    params: ClassVar[list[np.ndarray]] = []
    corners = ((0, 0), (0, 1), (1, 0), (1, 1))

    def forward(self, x: np.ndarray) -> np.ndarray:
        self.x = x
        c = [x[:, :, i::2, j::2] for i, j in self.corners]
        self.y = np.maximum(np.maximum(c[0], c[1]), np.maximum(c[2], c[3]))
        return self.y

    def backward(self, dy: np.ndarray) -> np.ndarray:
        dx = np.zeros_like(self.x)
        free = np.ones(dy.shape, bool)  # windows whose maximum has not been found yet
        for i, j in self.corners:
            hit = free & (self.x[:, :, i::2, j::2] == self.y)
            dx[:, :, i::2, j::2] = dy * hit
            free &= ~hit
        return dx


class Flatten:
    params: ClassVar[list[np.ndarray]] = []

    def forward(self, x: np.ndarray) -> np.ndarray:
        self.shape = x.shape
        return x.reshape(len(x), -1)

    def backward(self, dy: np.ndarray) -> np.ndarray:
        return dy.reshape(self.shape)


def model_of(problem: Problem, x_train: np.ndarray, classes: int) -> list:
    """The layers, holding ``he_weights`` (weight, bias pairs in layer order)."""
    w = he_weights(problem, x_train, classes)
    if problem.model == "mlp":
        return [Dense(*w[0:2]), ReLU(), Dense(*w[2:4])]
    return [Conv(*w[0:2], pad=2), ReLU(), MaxPool2(), Conv(*w[2:4]), ReLU(), MaxPool2(),
            Flatten(), Dense(*w[4:6]), ReLU(), Dense(*w[6:8]), ReLU(), Dense(*w[8:10])]  # fmt: skip


def forward(layers: list, x: np.ndarray) -> np.ndarray:
    for layer in layers:
        x = layer.forward(x)
    return x


def cross_entropy(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """The mean softmax cross-entropy over the batch, and its gradient for the logits."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    rows = np.arange(len(y))
    grad = np.exp(log_p)
    grad[rows, y] -= 1
    return float(-log_p[rows, y].mean()), grad / np.float32(len(y))


def train(problem: Problem) -> Result:
    t0 = clock()  # the first touch of data
    x_train, y_train, x_test, y_test = load(problem)
    layers = model_of(problem, x_train, int(y_train.max()) + 1)
    params = [p for layer in layers for p in layer.params]
    velocity = [np.zeros_like(p) for p in params]
    lr, momentum = np.float32(problem.lr), np.float32(problem.momentum)
    setup = clock() - t0
    steps, tested, accuracy, reached = 0, 0.0, 0.0, None
    for epoch in range(problem.epochs):
        for idx in epoch_batches(problem, epoch, len(y_train)):
            loss, grad = cross_entropy(forward(layers, x_train[idx]), y_train[idx])
            for layer in reversed(layers):
                grad = layer.backward(grad)
            grads = [g for layer in layers if layer.params for g in layer.grads]
            for p, v, g in zip(params, velocity, grads, strict=True):
                v *= momentum
                v += g
                p -= lr * v
            steps += 1  # (the loss of every step is read: cross_entropy returns a float)
        started = clock()
        correct = 0
        for s in range(0, len(y_test), problem.eval_batch_size):
            logits = forward(layers, x_test[s : s + problem.eval_batch_size])
            correct += int((logits.argmax(1) == y_test[s : s + problem.eval_batch_size]).sum())
        accuracy = correct / len(y_test)
        tested += clock() - started
        if accuracy >= problem.target:
            reached = clock() - t0
            break
    return Result(reached, steps, epoch + 1, accuracy, tested, setup, {"final_loss": loss})


if __name__ == "__main__":
    raise SystemExit(main(train))
