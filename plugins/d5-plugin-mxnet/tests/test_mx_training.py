"""Training on the mxnet executor: ``d5 run`` with the digits recipe, seeded determinism,
and the ``mx-*`` optimizers' native path against the numpy path and the reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from d5core.cli.output import read_json
from d5core.networks import zoo
from d5core.plugins import get_plugin_manager
from d5core.runners.networks import executor_by_name, with_loss
from d5core.training.assembly import prepare
from d5core.training.datasets import load_dataset
from d5core.training.samplers import make_sampler
from d5core.training.trainer import StopConditions, Trainer

pytest.importorskip("mxnet")

RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "digits-mlp.toml"


def _trainer(optimizer: str, lr: float, *, native: bool | None, steps: int = 8) -> Trainer:
    """The digits MLP in float64 on the mxnet executor, ``lr / (1 + step)``."""
    train = load_dataset("digits", "train")
    net = zoo.build("mlp", input_shape=tuple(train.input_shape), classes=10, hidden=[64], seed=0)
    trained, loss = with_loss(net.as_float64())
    executor = executor_by_name("mxnet", trained)
    opt = get_plugin_manager().load("d5.optimizers", optimizer)(lr=lr)
    sampler = make_sampler("shuffle", len(train), 32, seed=0)
    return Trainer(
        executor, loss, opt, train, sampler, schedule=lambda s: lr / (1 + s),
        transforms=lambda x, rng: x.astype(np.float64),
        stop=StopConditions(max_epochs=1, max_steps=steps), progress=False, native=native,
    )  # fmt: skip


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
    args = [a for s in sets for a in ("--set", s)]
    result = d5_cli("run", str(RECIPE), "--db", str(tmp_path / "r.sqlite"), "--json", *args)
    assert result.exit_code == 0, result.stderr
    (doc,) = read_json(result.stdout, "run")["runs"]
    assert doc["passed"] is True and doc["metrics"]["final_test_accuracy"] >= 0.9
    return dict(doc)


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
    first = prepare(RECIPE, sets, seed=3).trainer.run()
    second = prepare(RECIPE, sets, seed=3).trainer.run()
    assert first.optimizer_path == second.optimizer_path == "native"
    assert len(first.losses) > 40  # two epochs or more: the target takes a while
    np.testing.assert_array_equal(first.losses, second.losses)
    assert first.final_test_accuracy == second.final_test_accuracy
    other = prepare(RECIPE, sets, seed=4).trainer.run()  # the seed does matter
    assert other.losses[:10] != first.losses[:10]
