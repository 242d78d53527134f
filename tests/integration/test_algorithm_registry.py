"""Algorithms by name: ``d5.algorithms`` entries first, else every local optimizer as a
baseline with its family's search space; distribution schemes are no algorithm."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5core.cli.output import read_json
from d5core.errors import UsageError
from d5core.levels.training import TrainingAlgorithm
from d5core.lv2.algorithms.baselines import (
    FAMILIES,
    BaselineAlgorithm,
    family_of,
    family_space,
)
from d5core.lv2.algorithms.registry import algorithm_names, load_algorithm
from d5core.lv2.algorithms.search_space import defaults
from d5core.plugins import get_plugin_manager

ALGORITHMS = '''
from d5core.api import TrainingAlgorithm


class Adam(TrainingAlgorithm):
    """An algorithm that takes the name of the numpy optimizer adam."""

    name = "adam"
    search_space = {"lr": {"distribution": "uniform", "min": 0.1, "max": 0.2}}

    def settings(self, workload, hyperparameters):
        return {"optimizer": "sgd", "lr": hyperparameters["lr"]}


class BadSpace(Adam):
    name = "bad-space"
    search_space = {"lr": {"distribution": "normal", "min": 0, "max": 1}}


class NoSettings(TrainingAlgorithm):
    name = "no-settings"
    search_space = {"lr": 0.1}


NotAnAlgorithm = object()
'''


@pytest.fixture
def fake_algorithms(d5_site):
    """A distribution with d5.algorithms entries: one named like an optimizer, broken ones."""
    d5_site.add(
        "d5-plugin-fake-algos",
        entry_points={
            "d5.hooks": {"fake-algos": "fake_algos_plugin"},
            "d5.algorithms": {
                "adam": "fake_algos:Adam",
                "bad-space": "fake_algos:BadSpace",
                "no-settings": "fake_algos:NoSettings",
                "not-an-algorithm": "fake_algos:NotAnAlgorithm",
            },
        },
        modules={
            "fake_algos_plugin.py": 'd5_plugin_api = ">=1.10,<2"\n',
            "fake_algos.py": ALGORITHMS,
        },
    )
    return d5_site


@pytest.mark.parametrize(
    ("name", "family"),
    [("adam", "adam"), ("torch-adamw", "adamw"), ("tf-nesterov", "nesterov"),
     ("mx-rmsprop", "rmsprop"), ("allreduce", None), ("model-averaging", None),
     ("lion", None)],
)  # fmt: skip
def test_the_family_is_read_from_the_name_after_a_framework_prefix(name, family):
    assert family_of(name) == family


@pytest.mark.parametrize("family", [*FAMILIES, None])
def test_every_family_space_has_a_log_uniform_learning_rate(family):
    space = family_space(family)
    assert space["lr"]["distribution"] == "log_uniform"
    assert set(space) - {"lr"} <= {"momentum", "beta1", "weight_decay", "alpha"}


@pytest.mark.parametrize("name", ["sgd", "momentum", "nesterov", "adam", "adamw", "adagrad",
                                  "rmsprop"])  # fmt: skip
def test_a_numpy_optimizer_is_a_baseline_whose_options_the_optimizer_takes(name):
    algorithm = load_algorithm(name)
    assert isinstance(algorithm, BaselineAlgorithm) and algorithm.name == name
    chosen = algorithm.settings("digits-mlp", defaults(algorithm.search_space))
    assert chosen["optimizer"] == name and chosen["lr"] > 0
    optimizer_class = get_plugin_manager().load("d5.optimizers", name)
    assert set(chosen["optimizer_options"]) <= set(optimizer_class.defaults)
    optimizer_class(lr=chosen["lr"], **chosen["optimizer_options"])  # it builds


def test_the_adamw_baseline_tunes_weight_decay_and_the_recipes_batch_size_stays():
    algorithm = load_algorithm("adamw")
    assert set(algorithm.search_space) == {"lr", "beta1", "weight_decay"}
    point = {"lr": 0.003, "beta1": 0.9, "weight_decay": 0.01}
    assert algorithm.settings("w", point) == {
        "optimizer": "adamw",
        "lr": 0.003,
        "optimizer_options": {"beta1": 0.9, "weight_decay": 0.01},
    }
    assert algorithm.get_batch_size("w") is None


def test_framework_optimizers_are_baselines_without_importing_their_framework():
    names = algorithm_names()
    for name in ("adam", "momentum", "torch-adam", "torch-momentum"):
        assert name in names
    assert names == sorted(names)
    assert load_algorithm("torch-adam").search_space == family_space("adam")


def test_distribution_schemes_are_not_baselines():
    installed = get_plugin_manager().names("d5.optimizers")
    if "allreduce" not in installed:
        pytest.skip("the mpi plugin's schemes are not usable here")
    assert "allreduce" not in algorithm_names()
    with pytest.raises(UsageError, match="unknown algorithm 'allreduce'"):
        load_algorithm("allreduce")


def test_an_unknown_name_is_one_line_listing_the_known_ones():
    with pytest.raises(UsageError) as info:
        load_algorithm("adamm")
    message = str(info.value)
    assert "\n" not in message and "unknown algorithm 'adamm'" in message
    assert "adam, adamw" in message


def test_an_algorithm_entry_wins_over_the_baseline_of_the_same_name(fake_algorithms):
    algorithm = load_algorithm("adam")
    assert isinstance(algorithm, TrainingAlgorithm)
    assert not isinstance(algorithm, BaselineAlgorithm)
    assert algorithm.settings("w", {"lr": 0.15}) == {"optimizer": "sgd", "lr": 0.15}
    assert "adam" in algorithm_names() and "bad-space" in algorithm_names()


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("bad-space", ["bad-space", "lr", "unknown distribution 'normal'"]),
        ("no-settings", ["no-settings", "cannot be built"]),
        ("not-an-algorithm", ["not-an-algorithm", "not a TrainingAlgorithm"]),
    ],
)
def test_a_broken_algorithm_entry_is_a_one_line_error(fake_algorithms, name, words):
    with pytest.raises(UsageError) as info:
        load_algorithm(name)
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_list_plugins_shows_the_algorithms_group(fake_algorithms, d5_cli):
    result = d5_cli("list-plugins", "--json")
    assert result.exit_code == 0, result.stderr
    rows = [r for r in read_json(result.stdout) if r["group"] == "d5.algorithms"]
    assert {r["name"] for r in rows} == {"adam", "bad-space", "no-settings", "not-an-algorithm"}
    table = d5_cli("list-plugins").stdout
    assert "d5.algorithms" in table and "training algorithm" in table


@pytest.mark.parametrize(
    "argv",
    [
        ("bench", "algorithms", "cpu", "--algorithms", "bad-space", "--studies", "1",
         "--trials", "1"),
        ("run", str(Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"),
         "--set", "algorithm=bad-space"),
    ],
    ids=["bench-algorithms", "run"],
)  # fmt: skip
def test_a_search_space_with_an_unknown_distribution_stops_the_command_in_one_line(
    fake_algorithms, d5_cli, tmp_path, argv
):
    result = d5_cli(*argv, "--db", str(tmp_path / "r.sqlite"))
    assert result.exit_code == 2, result.stdout + result.stderr
    message = result.stderr.strip()
    assert "\n" not in message and "unknown distribution 'normal'" in message, message
    assert "Traceback" not in result.stderr
