"""Two frameworks' native paths, one problem: ``jax-momentum`` on the jax executor (its
whole step compiled as one call) ends where ``torch-momentum`` on the torch executor
ends, step for step, in float64. Here because the integration environment holds both
frameworks; each plugin's own lane holds one."""

from __future__ import annotations

import numpy as np

from d5core.api import get_plugin_manager
from d5core.testing.training import Trainer, digits_trainer


def _trainer(optimizer: str, executor: str, lr: float = 0.1, steps: int = 8) -> Trainer:
    """The digits MLP in float64 with ``lr / (1 + step)``, on the native path."""
    opt = get_plugin_manager().load("d5.optimizers", optimizer)(lr=lr)
    schedule = lambda s: lr / (1 + s)  # noqa: E731
    return digits_trainer(executor, opt, steps=steps, schedule=schedule, native=True)


def test_jax_momentum_on_jax_ends_where_torch_momentum_on_torch_ends() -> None:
    jax_run, torch_run = _trainer("jax-momentum", "jax"), _trainer("torch-momentum", "torch")
    got, want = jax_run.run(), torch_run.run()
    assert got.optimizer_path == want.optimizer_path == "native"
    np.testing.assert_allclose(got.losses, want.losses, rtol=1e-10, atol=1e-12)
    expected = torch_run.executor.get_parameters()
    for name, value in jax_run.executor.get_parameters().items():
        assert value.dtype == np.float64
        np.testing.assert_allclose(value, expected[name], rtol=1e-9, atol=1e-12)
