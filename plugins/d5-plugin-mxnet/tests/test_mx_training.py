"""Training on the mxnet executor: ``d5 run`` with the digits recipe, seeded determinism,
and the ``mx-*`` optimizers' native path against the numpy path and the reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from d5core.api import get_plugin_manager
from d5core.testing.training import (
    Trainer,
    assert_seeded_runs_repeat,
    d5_run_json,
    digits_trainer,
    prepare,
)

pytest.importorskip("mxnet")

RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "digits-mlp.toml"


def _trainer(optimizer: str, lr: float, *, native: bool | None, steps: int = 8) -> Trainer:
    """The digits MLP in float64 on the mxnet executor, ``lr / (1 + step)``."""
    opt = get_plugin_manager().load("d5.optimizers", optimizer)(lr=lr)
    schedule = lambda s: lr / (1 + s)  # noqa: E731
    return digits_trainer("mxnet", opt, steps=steps, schedule=schedule, native=native)


@pytest.mark.parametrize(("name", "lr"), [("momentum", 0.1), ("adam", 1e-2), ("rmsprop", 1e-2)])
def test_native_path_loss_curve_follows_the_numpy_reference_optimizers(name: str, lr: float):
    native = _trainer(f"mx-{name}", lr, native=None).run()
    reference = _trainer(name, lr, native=None).run()
    assert native.optimizer_path == "native" and reference.optimizer_path == "numpy"
    assert len(native.losses) == len(reference.losses) == 8
    # MXNet keeps lr, momentum and the betas as float32: 1e-8 of a step, not bit for bit
    np.testing.assert_allclose(native.losses, reference.losses, rtol=1e-6)


def test_an_mx_optimizer_gives_the_same_curve_on_the_native_and_numpy_paths():
    native = _trainer("mx-nesterov", 0.1, native=True).run()
    numpy = _trainer("mx-nesterov", 0.1, native=False).run()
    assert native.optimizer_path == "native" and numpy.optimizer_path == "numpy"
    np.testing.assert_allclose(native.losses, numpy.losses, rtol=1e-12)


def test_the_native_path_updates_the_executors_own_ndarrays():
    trainer = _trainer("mx-sgd", 0.1, native=None, steps=2)
    before = {k: np.array(v) for k, v in trainer.executor.get_parameters().items()}
    live = dict(trainer.executor.native_parameters())
    trainer.run()
    assert trainer.params == {}  # nothing went through numpy
    after = trainer.executor.get_parameters()
    for name, array in live.items():
        np.testing.assert_array_equal(array.asnumpy(), after[name])
        assert not np.array_equal(after[name], before[name]), name


def _d5_run(d5_cli: Any, tmp_path: Path, *sets: str) -> dict[str, Any]:
    return d5_run_json(d5_cli, RECIPE, tmp_path / "r.sqlite", *sets)


def test_d5_run_digits_on_mxnet_passes_with_the_recipes_numpy_optimizer(d5_cli, tmp_path):
    """The recipe's ``momentum`` is the numpy reference: the run takes the numpy path."""
    _d5_run(d5_cli, tmp_path, "executor=mxnet")
    assert prepare(RECIPE, ["executor=mxnet"], seed=None).trainer.optimizer_path == "numpy"


def test_d5_run_with_mx_momentum_takes_the_native_path(d5_cli, tmp_path):
    sets = ["executor=mxnet", "optimizer=mx-momentum"]
    _d5_run(d5_cli, tmp_path, *sets)
    assert prepare(RECIPE, sets, seed=None).trainer.optimizer_path == "native"


def test_two_native_runs_with_the_same_seed_give_identical_loss_curves():
    sets = ["executor=mxnet", "optimizer=mx-momentum"]
    assert_seeded_runs_repeat(RECIPE, sets)
