"""Training-algorithm support on real executors (the core lane has none): a regression
trained to its target loss by the numpy reference executor's mean squared error, and
``prepare_for_eval`` on torch's native path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from d5core.lv2.samplers import make_sampler
from d5core.lv2.trainer import StopConditions, Trainer


def test_the_zoo_mlp_fits_synthetic_regression_with_the_numpy_executors_mse() -> None:
    from d5core.lv1.runner import executor_by_name, load_model
    from d5core.lv2.datasets import load_dataset
    from d5core.plugins import get_plugin_manager

    options = {"samples": 400, "features": 6, "noise": 0.05}
    train = load_dataset("synthetic_regression", "train", **options)
    test = load_dataset("synthetic_regression", "test", **options)
    network = load_model("mlp", input_shape=(6,), classes=1, hidden=[16], seed=0).copy()
    loss = network.add_loss(network.outputs[0].name, kind="mse", labels="labels")
    executor = executor_by_name("numpy", network)
    optimizer = get_plugin_manager().load("d5.optimizers", "momentum")(lr=0.02)
    trainer = Trainer(
        executor, loss, optimizer, train, make_sampler("shuffle", len(train), 16, seed=0),
        test_set=test, progress=False, stop=StopConditions(max_epochs=40, target_loss=0.05),
    )  # fmt: skip
    result = trainer.run()
    assert result.status == "complete"
    assert result.stop_reason == "target_loss"
    assert result.test_curve[0]["loss"] > result.final_test_loss  # it learned
    assert result.final_test_loss is not None and result.final_test_loss <= 0.05


@pytest.mark.slow  # imports torch
def test_prepare_for_eval_on_torch_evaluates_the_parameters_it_returns() -> None:
    from d5core.lv1.runner import executor_by_name, load_model, with_loss
    from d5core.lv2.datasets import load_dataset
    from d5core.plugins import get_plugin_manager

    def run(prepare: Any) -> Any:
        options = {"samples": 128, "classes": 4, "features": 8}
        train = load_dataset("synthetic_classification", "train", **options)
        test = load_dataset("synthetic_classification", "test", **options)
        network, loss = with_loss(load_model("mlp", input_shape=(8,), classes=4, hidden=[8]))
        executor = executor_by_name("torch", network)
        optimizer = get_plugin_manager().load("d5.optimizers", "torch-sgd")(lr=0.1)
        trainer = Trainer(
            executor, loss, optimizer, train, make_sampler("shuffle", len(train), 32, seed=0),
            test_set=test, progress=False, stop=StopConditions(max_epochs=2),
            prepare_for_eval=prepare,
        )  # fmt: skip
        return trainer, trainer.run()

    def zeros(params: Mapping[str, np.ndarray], optimizer: Any) -> dict[str, np.ndarray]:
        return {k: np.zeros_like(v) for k, v in params.items()}

    trainer, hooked = run(zeros)
    _, plain = run(None)
    assert trainer.optimizer_path == "native"
    assert hooked.losses == pytest.approx(plain.losses)  # training unchanged
    assert len({p["loss"] for p in hooked.test_curve}) == 1  # the zero model every pass
    assert hooked.test_curve[0]["loss"] == pytest.approx(np.log(4))  # uniform over 4
    assert plain.test_curve[-1]["loss"] < np.log(4)
