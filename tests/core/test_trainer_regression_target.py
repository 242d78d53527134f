"""Regression targets (issue 33): float labels train and test with a squared-error loss,
the run stops at ``target_loss`` and reports its test loss, never an accuracy.

A linear model fitted by mean squared error on numpy arrays stands in for a framework
(so the trainer itself is what is tested); one test trains the zoo's MLP on the
``synthetic_regression`` dataset with the numpy executor's MSE loss, as a recipe does.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
from native_fakes import BATCH, SIZE, Data, Executor, NumpySGD

from d5core.errors import UsageError
from d5core.lv2.recipes import load_recipe
from d5core.lv2.runner import metric_values
from d5core.lv2.samplers import make_sampler
from d5core.lv2.trainer import StopConditions, Trainer

FEATURES = 4
RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "synthetic-regression.toml"


class _Info:
    def __init__(self, name: str) -> None:
        self.name = name


class _Network:
    inputs: ClassVar[list[_Info]] = [_Info("x"), _Info("labels")]
    outputs: ClassVar[list[_Info]] = [_Info("prediction"), _Info("loss")]


class LinearMSE:
    """``prediction = x @ w`` and the mean squared error, on numpy arrays; records the
    dtype of every label batch it is fed."""

    name = "fake"
    network = _Network()

    def __init__(self) -> None:
        self.w = np.zeros((FEATURES, 1))
        self.label_dtypes: set[str] = set()

    def _forward(self, feeds: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        x, y = feeds["x"], feeds["labels"]
        self.label_dtypes.add(str(np.asarray(y).dtype))
        prediction = x @ self.w
        return prediction, prediction - y

    def inference(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        prediction, error = self._forward(feeds)
        return {"prediction": prediction, "loss": np.array([np.mean(error**2)])}

    def inference_and_backprop(
        self, feeds: dict[str, np.ndarray], loss: str
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        prediction, error = self._forward(feeds)
        grad = 2.0 * feeds["x"].T @ error / error.size
        return {"prediction": prediction, loss: np.array([np.mean(error**2)])}, {"w": grad}

    def get_parameters(self) -> dict[str, np.ndarray]:
        return {"w": self.w.copy()}

    def set_parameters(self, params: dict[str, np.ndarray]) -> None:
        self.w[...] = params["w"]


class Targets:
    """Float targets ``(N, 1)`` of a linear function plus a little noise."""

    num_classes = None

    def __init__(self, size: int = 64, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.x = rng.normal(size=(size, FEATURES))
        w = np.arange(1, FEATURES + 1, dtype=float).reshape(-1, 1) / FEATURES
        noise = 0.01 * rng.normal(size=(size, 1))
        self.y = (self.x @ w + noise).astype(np.float32)

    def __len__(self) -> int:
        return len(self.x)

    def batch(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.x[indices], self.y[indices]


def _regression(stop: StopConditions, **options: Any) -> tuple[Trainer, LinearMSE]:
    data, executor = Targets(), LinearMSE()
    optimizer = NumpySGD()
    optimizer.lr = 0.02  # the test loss falls by about half each epoch
    trainer = Trainer(
        executor, "loss", optimizer, data, make_sampler("shuffle", len(data), 8, seed=0),
        test_set=Targets(32, seed=1), progress=False, stop=stop, **options,
    )  # fmt: skip
    return trainer, executor


def test_training_stops_at_the_first_test_pass_whose_loss_reaches_the_target() -> None:
    trainer, _ = _regression(StopConditions(max_epochs=50, target_loss=0.01))
    result = trainer.run()
    losses = [p["loss"] for p in result.test_curve]
    assert result.stop_reason == "target_loss"
    assert len(losses) > 1
    assert losses[-1] <= 0.01 < min(losses[:-1])  # the first pass at the target ends it
    assert result.epochs < 50
    assert result.final_test_loss == pytest.approx(losses[-1])
    assert result.best_test_loss == pytest.approx(min(losses))
    assert result.time_to_loss is not None and 0 < result.time_to_loss <= result.wall_s
    assert result.metrics["time_to_loss"]["reached"] is True
    assert result.target_reached == "loss"


def test_regression_labels_are_fed_as_floats_and_give_no_accuracy() -> None:
    trainer, executor = _regression(StopConditions(max_epochs=3))
    result = trainer.run()
    assert executor.label_dtypes == {"float32"}
    assert all("accuracy" not in p for p in result.test_curve)
    assert result.final_test_accuracy is None and result.best_test_accuracy is None
    assert result.regression is True
    assert "unavailable" in result.metrics["training_accuracy"]
    assert "unavailable" in result.metrics["final_test_accuracy"]
    values = metric_values(result)
    assert values["final_test_accuracy"] is None and values["training_accuracy"] is None
    assert values["final_test_loss"] == pytest.approx(result.test_curve[-1]["loss"])
    assert "time_to_loss" not in values  # no target loss: nothing to time


def test_a_target_loss_never_reached_is_reported_as_such() -> None:
    trainer, _ = _regression(StopConditions(max_epochs=2, target_loss=1e-9))
    result = trainer.run()
    assert result.stop_reason == "max_epochs"
    assert result.time_to_loss is None and result.time_to_target_training is None
    assert metric_values(result)["time_to_loss"] is None


def test_patience_on_regression_counts_passes_without_a_lower_test_loss() -> None:
    trainer, _ = _regression(StopConditions(max_epochs=40, patience=1))
    trainer.optimizer.lr = 0.0  # nothing changes: the second pass is no better
    result = trainer.run()
    assert result.stop_reason == "plateau"
    assert len(result.test_curve) == 2


def test_a_target_loss_also_ends_a_classification_run() -> None:
    data = Data()
    trainer = Trainer(
        Executor(counter=False), "loss", NumpySGD(), data,
        make_sampler("shuffle", SIZE, BATCH, seed=0), test_set=data, progress=False,
        native=False, stop=StopConditions(max_epochs=5, target_loss=50.0),
    )  # fmt: skip
    result = trainer.run()
    assert result.stop_reason == "target_loss"
    assert len(result.test_curve) == 1
    assert result.final_test_accuracy is not None  # classes still have an accuracy
    assert result.time_to_loss is not None
    assert metric_values(result)["time_to_loss"] == result.time_to_loss


def test_a_target_accuracy_on_regression_labels_is_refused() -> None:
    with pytest.raises(UsageError, match="set target_loss instead"):
        _regression(StopConditions(target_accuracy=0.9))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"target_loss": 0.0}, "target_loss must be a positive number"),
        ({"target_loss": -1.0}, "target_loss must be a positive number"),
        ({"target_loss": math.inf}, "target_loss must be a positive number"),
        ({"budget_clock": "cpu"}, 'budget_clock must be "wall" or "training"'),
    ],
)
def test_bad_stop_conditions_are_one_line_usage_errors(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        StopConditions(**options)
    assert "\n" not in str(caught.value)


def test_the_regression_recipe_loads_with_its_target_and_training_clock() -> None:
    recipe = load_recipe(RECIPE)
    settings = recipe.settings()
    assert settings["loss"] == "mse"
    assert settings["target_loss"] > 0
    assert settings["budget_clock"] == "training"
    assert set(recipe.metrics) == {"final_test_loss", "time_to_loss"}


def _write(tmp_path: Path, fixed: str, metrics: str = "") -> Path:
    path = tmp_path / "r.toml"
    path.write_text(
        '[fixed]\nmodel = "mlp"\ndataset = "synthetic_regression"\nepochs = 1\n'
        f'{fixed}\n[mutable]\nexecutor = "numpy"\noptimizer = "sgd"\nlr = 0.1\n'
        f"batch_size = 8\n[metrics]\n{metrics}\n"
    )
    return path


@pytest.mark.parametrize(
    ("fixed", "metrics", "message"),
    [
        ("target_loss = 0", "", "target_loss must be a positive number"),
        ('target_loss = "low"', "", "target_loss must be a positive number"),
        ('budget_clock = "cpu"', "", 'budget_clock must be "wall"'),
        ('loss = "hinge"', "", r"use cross_entropy \(classes\) or mse"),
        ('loss = "mse"\ntarget_accuracy = 0.9', "", "set target_loss instead"),
        ("", "time_to_loss = { max = 5 }", "time_to_loss needs target_loss in FIXED"),
        ("", "time_to_target_training = { max = 5 }", "needs a target in FIXED"),
    ],
)
def test_bad_regression_keys_in_a_recipe_are_one_line_usage_errors(
    tmp_path: Path, fixed: str, metrics: str, message: str
) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        load_recipe(_write(tmp_path, fixed, metrics))
    assert "\n" not in str(caught.value)


def test_budget_clock_and_target_loss_belong_in_fixed(tmp_path: Path) -> None:
    path = _write(tmp_path, "")
    path.write_text(path.read_text().replace("[mutable]\n", "[mutable]\ntarget_loss = 0.1\n"))
    with pytest.raises(UsageError, match="target_loss describe the problem"):
        load_recipe(path)
