"""Training on the tensorflow executor: ``d5 run`` with the digits recipe, seeded
determinism, and the native optimizer path against the numpy path and reference."""

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

RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "digits-mlp.toml"


def _trainer(optimizer: str, lr: float, *, native: bool | None, steps: int = 8) -> Trainer:
    """The digits MLP in float64 on the tensorflow executor, ``lr / (1 + step)``."""
    opt = get_plugin_manager().load("d5.optimizers", optimizer)(lr=lr)
    schedule = lambda s: lr / (1 + s)  # noqa: E731
    return digits_trainer("tensorflow", opt, steps=steps, schedule=schedule, native=native)


@pytest.mark.parametrize(("name", "lr"), [("momentum", 0.1), ("adam", 1e-2), ("rmsprop", 1e-2)])
def test_native_path_loss_curve_equals_the_numpy_reference_optimizers(name: str, lr: float) -> None:
    native = _trainer(f"tf-{name}", lr, native=None).run()
    reference = _trainer(name, lr, native=None).run()
    assert native.optimizer_path == "native" and reference.optimizer_path == "numpy"
    assert len(native.losses) == len(reference.losses) == 8
    np.testing.assert_allclose(native.losses, reference.losses, rtol=1e-10, atol=1e-12)
    assert (
        native.metrics["training_accuracy"]["value"]
        == reference.metrics["training_accuracy"]["value"]
    )


def test_a_tf_optimizer_gives_the_same_curve_on_the_native_and_numpy_paths() -> None:
    native = _trainer("tf-adamw", 1e-2, native=True).run()
    numpy = _trainer("tf-adamw", 1e-2, native=False).run()
    assert native.optimizer_path == "native" and numpy.optimizer_path == "numpy"
    np.testing.assert_allclose(native.losses, numpy.losses, rtol=1e-10, atol=1e-12)


def test_the_native_path_updates_the_executors_own_variables() -> None:
    trainer = _trainer("tf-sgd", 0.1, native=None, steps=2)
    before = {k: np.array(v) for k, v in trainer.executor.get_parameters().items()}
    live = dict(trainer.executor.native_parameters())
    trainer.run()
    assert trainer.params == {}  # nothing went through numpy
    after = trainer.executor.get_parameters()
    for name, variable in live.items():
        np.testing.assert_array_equal(variable.numpy(), after[name])
        assert not np.array_equal(after[name], before[name]), name


def _d5_run(d5_cli: Any, tmp_path: Path, *sets: str) -> dict[str, Any]:
    return d5_run_json(d5_cli, RECIPE, tmp_path / "r.sqlite", *sets)


def test_d5_run_digits_on_tensorflow_passes_with_the_recipes_numpy_optimizer(
    d5_cli: Any, tmp_path: Path
) -> None:
    """The recipe's ``momentum`` is the numpy reference: the run takes the numpy path."""
    _d5_run(d5_cli, tmp_path, "executor=tensorflow")
    assert prepare(RECIPE, ["executor=tensorflow"], seed=None).trainer.optimizer_path == "numpy"


def test_d5_run_with_tf_momentum_takes_the_native_path(d5_cli: Any, tmp_path: Path) -> None:
    sets = ["executor=tensorflow", "optimizer=tf-momentum"]
    _d5_run(d5_cli, tmp_path, *sets)
    prep = prepare(RECIPE, sets, seed=None)
    assert prep.trainer.optimizer_path == "native"


def test_two_runs_with_the_same_seed_give_identical_loss_curves() -> None:
    sets = ["executor=tensorflow", "optimizer=tf-momentum"]
    assert_seeded_runs_repeat(RECIPE, sets)


def test_a_native_state_of_convolution_kernels_is_saved_in_the_onnx_layout():
    """The executor keeps conv kernels channels-last; the optimizer's saved state uses the
    reference's (ONNX) layout, and loads back onto the same variables."""
    from d5_plugin_tensorflow.executor import TensorFlowExecutor

    from d5core.testing.executors import build_network, with_loss

    network, loss = with_loss(build_network("lenet5", input_shape=(1, 12, 12), classes=3, seed=0))
    executor = TensorFlowExecutor(network)
    optimizer = get_plugin_manager().load("d5.optimizers", "tf-momentum")(lr=0.1)
    optimizer.bind(executor)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 1, 12, 12)).astype(np.float32)
    feeds = executor.to_native({"input": x, "labels": np.array([0, 1, 2, 0])})
    _, grads = executor.native_train_step(feeds, loss)
    optimizer.native_step(grads)
    onnx_shapes = {k: v.shape for k, v in executor.get_parameters().items()}
    saved = optimizer.state_dict()["state"]
    assert {k: next(iter(v.values())).shape for k, v in saved.items()} == {
        k: onnx_shapes[k] for k in saved
    }
    again = get_plugin_manager().load("d5.optimizers", "tf-momentum")(lr=0.1)
    again.bind(executor)
    again.load_state_dict(optimizer.state_dict())
    again.native_step(grads)  # the loaded state fits the variables
    for name, slots in again.state_dict()["state"].items():
        for slot, value in slots.items():
            assert value.shape == onnx_shapes[name], (name, slot)
