"""The polyak-sgd optimizer and algorithm on their own, then through ``d5 run`` on an MLP
for two epochs (d5's generated ``synthetic_classification`` data: no download, nothing
to install besides d5 and this plugin)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from d5_polyak.algorithm import PolyakAlgorithm
from d5_polyak.optimizer import PolyakSGD

from d5core.api import ALGORITHMS_GROUP, get_plugin_manager

RECIPE = """
[fixed]
model = "mlp"
model_options = { hidden = [32] }
dataset = "synthetic_classification"
dataset_options = { samples = 512, features = 16, classes = 4 }
epochs = 2
test_every = "epoch"

[mutable]
executor = "numpy"
optimizer = "sgd"
lr = 0.1
batch_size = 32
"""


def test_the_averages_are_the_bias_corrected_exponential_average_of_the_steps():
    opt = PolyakSGD(lr=0.5, momentum=0.0, decay=0.5)
    params = {"w": np.array([1.0])}
    seen = []
    for grad in (1.0, 2.0):
        opt.step(params, {"w": np.array([grad])})
        seen.append(params["w"][0])
    assert seen == [0.5, -0.5]
    # a = 0.5 * (0.5 * 0 + 0.5 * 0.5) + 0.5 * -0.5 = -0.125; corrected by 1 - 0.5**2
    assert opt.averages()["w"][0] == pytest.approx(-0.125 / 0.75)


def test_prepare_for_eval_evaluates_the_average_once_there_is_one():
    algorithm = PolyakAlgorithm()
    opt = PolyakSGD(lr=1.0, momentum=0.0, decay=0.9)
    params = {"w": np.array([2.0])}
    assert algorithm.prepare_for_eval(params, opt) is None  # no step yet
    opt.step(params, {"w": np.array([1.0])})
    chosen = algorithm.prepare_for_eval(params, opt)
    assert chosen is not None and chosen["w"][0] == pytest.approx(1.0)  # one step: p itself
    opt.step(params, {"w": np.array([1.0])})
    chosen = algorithm.prepare_for_eval(params, opt)
    assert chosen is not None and 0.0 < chosen["w"][0] < 1.0  # between p_1 = 1 and p_2 = 0


def test_the_settings_name_the_optimizer_with_the_points_options():
    point = {"lr": 0.05, "momentum": 0.9, "decay": 0.99}
    assert PolyakAlgorithm().settings("digits-mlp", point) == {
        "optimizer": "polyak-sgd",
        "lr": 0.05,
        "optimizer_options": {"momentum": 0.9, "decay": 0.99},
    }


def test_the_algorithm_is_installed_in_d5_algorithms():
    assert get_plugin_manager().load(ALGORITHMS_GROUP, "polyak-sgd") is PolyakAlgorithm


def test_d5_run_trains_an_mlp_with_the_algorithm(d5_cli, tmp_path: Path):
    recipe = tmp_path / "blobs-mlp.toml"
    recipe.write_text(RECIPE)
    result = d5_cli(
        "run", str(recipe), "--set", "algorithm=polyak-sgd",
        "--set", "hyperparameters.lr=0.1", "--json", "--db", str(tmp_path / "runs.db"),
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (run,) = json.loads(result.stdout)["data"]["runs"]
    assert run["epochs"] == 2 and run["metrics"]["final_test_accuracy"] > 0.5


def test_a_hyperparameter_outside_the_search_space_is_refused(d5_cli, tmp_path: Path):
    recipe = tmp_path / "blobs-mlp.toml"
    recipe.write_text(RECIPE)
    result = d5_cli(
        "run", str(recipe), "--set", "algorithm=polyak-sgd", "--set", "hyperparameters.decay=0.5",
        "--db", str(tmp_path / "runs.db"),
    )  # fmt: skip
    assert result.exit_code == 2
    assert "decay" in result.stderr and "0.5" in result.stderr
