"""The trainer's native optimizer path (torch executor, torch optimizer) against the numpy path."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from d5core.cli.output import read_json
from d5core.errors import UsageError
from d5core.lv1 import zoo
from d5core.lv1.runner import executor_by_name, with_loss
from d5core.lv2.datasets import load_dataset
from d5core.lv2.samplers import make_sampler
from d5core.lv2.trainer import StopConditions, Trainer
from d5core.plugins import get_plugin_manager

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"


def _trainer(optimizer: str, lr: float, *, native: bool | None, steps: int = 8) -> Trainer:
    train = load_dataset("digits", "train")
    net = zoo.build("mlp", input_shape=tuple(train.input_shape), classes=10, hidden=[64], seed=0)
    trained, loss = with_loss(net.as_float64())
    executor = executor_by_name("torch", trained)
    opt = get_plugin_manager().load("d5.optimizers", optimizer)(lr=lr)
    sampler = make_sampler("shuffle", len(train), 32, seed=0)
    return Trainer(
        executor, loss, opt, train, sampler, schedule=lambda s: lr / (1 + s),
        transforms=lambda x, rng: x.astype(np.float64),
        stop=StopConditions(max_epochs=1, max_steps=steps), progress=False, native=native,
    )  # fmt: skip


@pytest.mark.parametrize(("optimizer", "lr"), [("torch-sgd", 0.1), ("torch-adam", 1e-3)])
def test_native_and_numpy_paths_give_the_same_loss_curve(optimizer: str, lr: float) -> None:
    native = _trainer(optimizer, lr, native=None).run()
    numpy = _trainer(optimizer, lr, native=False).run()
    assert native.optimizer_path == "native" and numpy.optimizer_path == "numpy"
    assert len(native.losses) == len(numpy.losses) == 8
    np.testing.assert_allclose(native.losses, numpy.losses, rtol=1e-10, atol=1e-12)
    acc_n = native.metrics["training_accuracy"]["value"]
    assert acc_n == numpy.metrics["training_accuracy"]["value"]


def test_native_path_matches_the_numpy_reference_optimizer() -> None:
    native = _trainer("torch-sgd", 0.1, native=None).run()
    reference = _trainer("sgd", 0.1, native=None).run()
    assert reference.optimizer_path == "numpy"
    np.testing.assert_allclose(native.losses, reference.losses, rtol=1e-10, atol=1e-12)


def test_modifiers_force_the_numpy_path() -> None:
    t = _trainer("torch-sgd", 0.1, native=None)
    forced = Trainer(
        t.executor, t.loss, t.optimizer, t.train_set, t.sampler, modifiers=lambda p, g: g,
        stop=StopConditions(max_epochs=1, max_steps=2), progress=False,
    )  # fmt: skip
    assert forced.optimizer_path == "numpy"
    with pytest.raises(UsageError, match="natively"):
        Trainer(t.executor, t.loss, t.optimizer, t.train_set, t.sampler,
                modifiers=lambda p, g: g, native=True)  # fmt: skip


def test_d5_run_torch_momentum_takes_the_native_path(d5_cli, tmp_path) -> None:
    from d5core.lv2.assembly import prepare

    sets = ["executor=torch", "optimizer=torch-momentum"]
    result = d5_cli("run", str(RECIPE), "--db", str(tmp_path / "r.sqlite"), "--json",
                    *(a for s in sets for a in ("--set", s)))  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (doc,) = read_json(result.stdout, "run")["runs"]
    assert doc["passed"] is True and doc["metrics"]["final_test_accuracy"] >= 0.9
    prep = prepare(RECIPE, sets, seed=None)
    assert prep.trainer.optimizer_path == "native"
    run = prep.trainer.run()
    assert run.optimizer_path == "native" and run.final_test_accuracy >= 0.9
