"""Reference optimizers: clear numpy update rules, each a ``d5.optimizers`` entry.

Every rule follows PyTorch's formulation (``torch.optim``), so that a framework's
optimizer can be validated against these step for step. With ``g`` the gradient, ``p``
the parameter, ``t`` the step count from 1 and ``lr`` the learning rate of the step:

- ``sgd``: ``p -= lr * g``
- ``momentum``: ``v = momentum * v + g``; ``p -= lr * v`` (``v`` starts at 0)
- ``nesterov``: ``v = momentum * v + g``; ``p -= lr * (g + momentum * v)``
- ``adam``: ``m = b1 m + (1-b1) g``; ``s = b2 s + (1-b2) g²``;
  ``p -= lr * (m / (1-b1^t)) / (sqrt(s / (1-b2^t)) + eps)``
- ``adamw``: ``p *= 1 - lr * weight_decay``, then the ``adam`` update
- ``adagrad``: ``s += g²`` (``s`` starts at ``initial_accumulator``);
  ``p -= lr * g / (sqrt(s) + eps)``
- ``rmsprop``: ``s = alpha s + (1-alpha) g²``; centered: ``a = alpha a + (1-alpha) g``
  and ``d = sqrt(s - a²) + eps``, else ``d = sqrt(s) + eps``; with ``momentum > 0``:
  ``b = momentum b + g / d``, ``p -= lr * b``, else ``p -= lr * g / d``

docs/optimizers.md gives the same rules with their defaults.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from d5core.api import Optimizer

__all__ = [
    "SGD",
    "Adagrad",
    "Adam",
    "AdamW",
    "Momentum",
    "Nesterov",
    "RMSprop",
]

State = dict[str, np.ndarray]


class SGD(Optimizer):
    """Plain stochastic gradient descent: ``p -= lr * g``."""

    name: ClassVar[str] = "sgd"

    def update(self, param: np.ndarray, grad: np.ndarray, state: State, t: int) -> None:
        param -= self.lr * grad


class Momentum(Optimizer):
    """Heavy-ball momentum, PyTorch's convention: ``v = m v + g``; ``p -= lr v``.

    (The other common convention, ``v = m v - lr g``; ``p += v``, differs when ``lr``
    changes between steps.)
    """

    name: ClassVar[str] = "momentum"
    defaults: ClassVar[dict[str, float]] = {"momentum": 0.9}

    def update(self, param: np.ndarray, grad: np.ndarray, state: State, t: int) -> None:
        v = self.zeros(state, "velocity", param)
        v *= self.hyper["momentum"]
        v += grad
        param -= self.lr * v


class Nesterov(Optimizer):
    """Nesterov momentum, PyTorch's form: ``v = m v + g``; ``p -= lr (g + m v)``."""

    name: ClassVar[str] = "nesterov"
    defaults: ClassVar[dict[str, float]] = {"momentum": 0.9}

    def update(self, param: np.ndarray, grad: np.ndarray, state: State, t: int) -> None:
        m = self.hyper["momentum"]
        v = self.zeros(state, "velocity", param)
        v *= m
        v += grad
        param -= self.lr * (grad + m * v)


class Adam(Optimizer):
    """Adam (Kingma & Ba) with bias correction of both moments."""

    name: ClassVar[str] = "adam"
    defaults: ClassVar[dict[str, float]] = {"beta1": 0.9, "beta2": 0.999, "eps": 1e-8}

    def __init__(self, lr: float = 1e-3, **hyper: float) -> None:
        super().__init__(lr, **hyper)

    def update(self, param: np.ndarray, grad: np.ndarray, state: State, t: int) -> None:
        b1, b2, eps = self.hyper["beta1"], self.hyper["beta2"], self.hyper["eps"]
        m = self.zeros(state, "exp_avg", param)
        s = self.zeros(state, "exp_avg_sq", param)
        m *= b1
        m += (1 - b1) * grad
        s *= b2
        s += (1 - b2) * grad * grad
        m_hat = m / (1 - b1**t)
        s_hat = s / (1 - b2**t)
        param -= self.lr * m_hat / (np.sqrt(s_hat) + eps)


class AdamW(Adam):
    """Adam with decoupled weight decay: ``p *= 1 - lr * weight_decay`` before the step."""

    name: ClassVar[str] = "adamw"
    defaults: ClassVar[dict[str, float]] = {**Adam.defaults, "weight_decay": 0.01}

    def update(self, param: np.ndarray, grad: np.ndarray, state: State, t: int) -> None:
        param *= 1 - self.lr * self.hyper["weight_decay"]
        super().update(param, grad, state, t)


class Adagrad(Optimizer):
    """Adagrad: per-coordinate rates from the sum of squared gradients."""

    name: ClassVar[str] = "adagrad"
    defaults: ClassVar[dict[str, float]] = {"eps": 1e-10, "initial_accumulator": 0.0}

    def update(self, param: np.ndarray, grad: np.ndarray, state: State, t: int) -> None:
        if "sum" not in state:
            state["sum"] = np.full_like(param, self.hyper["initial_accumulator"])
        s = state["sum"]
        s += grad * grad
        param -= self.lr * grad / (np.sqrt(s) + self.hyper["eps"])


class RMSprop(Optimizer):
    """RMSprop, PyTorch's form (``eps`` outside the root, optional centering, momentum)."""

    name: ClassVar[str] = "rmsprop"
    defaults: ClassVar[dict[str, float]] = {
        "alpha": 0.99,
        "eps": 1e-8,
        "momentum": 0.0,
        "centered": False,
    }

    def update(self, param: np.ndarray, grad: np.ndarray, state: State, t: int) -> None:
        alpha, eps, mom = self.hyper["alpha"], self.hyper["eps"], self.hyper["momentum"]
        s = self.zeros(state, "square_avg", param)
        s *= alpha
        s += (1 - alpha) * grad * grad
        if self.hyper["centered"]:
            a = self.zeros(state, "grad_avg", param)
            a *= alpha
            a += (1 - alpha) * grad
            denom = np.sqrt(s - a * a) + eps
        else:
            denom = np.sqrt(s) + eps
        if mom > 0:
            b = self.zeros(state, "momentum_buffer", param)
            b *= mom
            b += grad / denom
            param -= self.lr * b
        else:
            param -= self.lr * grad / denom
