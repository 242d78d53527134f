"""A plugin's optimizers reproduce d5's numpy reference optimizers: a test kit.

An executor plugin that wraps its framework's optimizers registers them in
``d5.optimizers`` under a prefix (``torch-sgd``, ``tf-adam``, ...) with the reference's
options. :class:`OptimizerReferenceTests` steps each of :data:`CASES` five times on numpy
arrays, under a learning rate that changes between steps, and compares with the reference
optimizer of the same name. A plugin author subclasses it in a test module::

    from d5core.testing.optimizers import OptimizerReferenceTests

    class TestMyOptimizersMatchTheReference(OptimizerReferenceTests):
        prefix = "my-"

The helpers (:func:`gradients`, :func:`parameters`, :func:`reference_run`, :func:`lr_at`)
give a plugin's own native-step tests the same data and the same expected trajectory.
Import this module in tests only: it imports pytest.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

from d5core.levels.training import Optimizer

__all__ = [
    "CASES",
    "IDS",
    "OptimizerReferenceTests",
    "gradients",
    "load_optimizer",
    "lr_at",
    "parameters",
    "reference_run",
]

#: Reference optimizer names with the options each case sets.
CASES: list[tuple[str, dict[str, Any]]] = [
    ("sgd", {"lr": 0.1}),
    ("momentum", {"lr": 0.1, "momentum": 0.8}),
    ("nesterov", {"lr": 0.1}),
    ("adam", {"lr": 0.01, "beta1": 0.8}),
    ("adamw", {"lr": 0.01, "weight_decay": 0.1}),
    ("adagrad", {"lr": 0.1, "initial_accumulator": 0.2}),
    ("rmsprop", {"lr": 0.01}),
    ("rmsprop", {"lr": 0.01, "momentum": 0.5, "centered": True}),
]
#: pytest ids of :data:`CASES`.
IDS = [f"{n}-{i}" for i, (n, _) in enumerate(CASES)]


def load_optimizer(name: str) -> type[Optimizer]:
    """The optimizer class registered as ``name`` in ``d5.optimizers``."""
    from d5core.plugins import get_plugin_manager

    cls: type[Optimizer] = get_plugin_manager().load("d5.optimizers", name)
    return cls


def gradients(steps: int, dtype: Any = np.float64) -> list[dict[str, np.ndarray]]:
    """``steps`` gradients for :func:`parameters`, the same on every call."""
    rng = np.random.default_rng(7)
    return [
        {"w": rng.normal(size=(3, 2)).astype(dtype), "b": rng.normal(size=4).astype(dtype)}
        for _ in range(steps)
    ]


def parameters(dtype: Any = np.float64) -> dict[str, np.ndarray]:
    """Parameters ``w`` (3, 2) and ``b`` (4,), the same on every call."""
    rng = np.random.default_rng(1)
    return {"w": rng.normal(size=(3, 2)).astype(dtype), "b": rng.normal(size=4).astype(dtype)}


def lr_at(hyper: dict[str, Any], step: int) -> float:
    """The learning rate of ``step``: a schedule changes it between steps."""
    return float(hyper["lr"]) * (1 - 0.1 * step)


def reference_run(
    name: str, hyper: dict[str, Any], grads: list[dict[str, np.ndarray]], dtype: Any = np.float64
) -> tuple[dict[str, np.ndarray], Optimizer]:
    """The parameters after the reference optimizer ``name`` stepped through ``grads``
    under :func:`lr_at`, and the optimizer itself (for its state)."""
    opt, params = load_optimizer(name)(**hyper), parameters(dtype)
    for i, g in enumerate(grads):
        opt.lr = lr_at(hyper, i)
        opt.step(params, g)
    return params, opt


class OptimizerReferenceTests:
    """The plugin's optimizers, used on numpy arrays, follow the reference's trajectory;
    subclass it with ``prefix`` set (see the module docstring)."""

    #: What the plugin's optimizer names start with, for example ``"torch-"``.
    prefix: ClassVar[str]

    @pytest.mark.parametrize(("name", "hyper"), CASES, ids=IDS)
    def test_optimizer_on_numpy_matches_the_reference_over_five_steps(
        self, name: str, hyper: dict[str, Any]
    ) -> None:
        grads = gradients(5)
        expected, _ = reference_run(name, hyper, grads)
        opt, params = load_optimizer(f"{self.prefix}{name}")(**hyper), parameters()
        for i, g in enumerate(grads):
            opt.lr = lr_at(hyper, i)
            opt.step(params, g)
        for k in params:
            np.testing.assert_allclose(params[k], expected[k], rtol=1e-12, atol=1e-14)
