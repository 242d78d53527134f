"""The recipe keys ``algorithm`` and ``hyperparameters``: the algorithm's settings become
the run's MUTABLE values, conflicts and points outside the search space are one-line
errors, and ``d5 run`` trains with the algorithm and stores what it chose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from d5core.errors import UsageError
from d5core.lv2.recipes import load_recipe
from d5core.results.store import ResultsStore

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "recipes" / "digits-mlp.toml"

SMALL = """
[fixed]
model = "mlp"
model_options = {{ hidden = [32] }}
dataset = "digits"
epochs = {epochs}
test_every = "epoch"
{fixed}
[mutable]
executor = "numpy"
batch_size = 32
{mutable}
"""

#: Algorithms with the optional methods, and one that sets its own batch size.
ALGORITHMS = '''
import numpy as np
from d5core.api import TrainingAlgorithm


class ZeroEval(TrainingAlgorithm):
    """Trains with sgd, but evaluates all-zero parameters and half of each batch."""

    name = "zero-eval"
    search_space = {"lr": {"distribution": "log_uniform", "min": 0.01, "max": 1.0}}

    def settings(self, workload, hyperparameters):
        return {"optimizer": "sgd", "lr": hyperparameters["lr"]}

    def prepare_for_eval(self, params, optimizer):
        return {k: np.zeros_like(v) for k, v in params.items()}

    def data_selection(self, indices, step, rng):
        return indices[: max(1, len(indices) // 2)]


class BigBatch(ZeroEval):
    name = "big-batch"

    def get_batch_size(self, workload):
        return 64 if workload == "small" else None
'''


#: The MUTABLE choices of :func:`small` besides the executor and the batch size.
PLAIN = 'optimizer = "sgd"\nlr = 0.1'


def small(tmp_path: Path, *, epochs: int = 2, fixed: str = "", mutable: str = PLAIN) -> Path:
    """A digits-MLP recipe named ``small`` (few epochs), with extra FIXED/MUTABLE lines."""
    path = tmp_path / "small.toml"
    path.write_text(SMALL.format(epochs=epochs, fixed=fixed, mutable=mutable))
    return path


@pytest.fixture
def fake_algorithms(d5_site):
    d5_site.add(
        "d5-plugin-fake-algos",
        entry_points={
            "d5.hooks": {"fake-algos": "fake_algos_plugin"},
            "d5.algorithms": {
                "zero-eval": "fake_algos:ZeroEval",
                "big-batch": "fake_algos:BigBatch",
            },
        },
        modules={
            "fake_algos_plugin.py": 'd5_plugin_api = ">=1.10,<2"\n',
            "fake_algos.py": ALGORITHMS,
        },
    )
    return d5_site


# -- the recipe, before any training ---------------------------------------------------


def test_the_algorithms_settings_replace_the_recipes_training_choices():
    loaded = load_recipe(DIGITS)
    recipe = loaded.with_overrides(["algorithm=adam", "hyperparameters.lr=0.003"])
    assert loaded.mutable["optimizer"] == "momentum"
    settings = recipe.settings()
    assert settings["optimizer"] == "adam" and settings["lr"] == 0.003
    assert settings["optimizer_options"] == {"beta1": pytest.approx(0.9)}
    assert settings["executor"] == "numpy" and settings["batch_size"] == 32  # the recipe's
    assert recipe.mutable["algorithm"] == "adam"
    assert recipe.mutable["hyperparameters"] == {"lr": 0.003, "beta1": pytest.approx(0.9)}
    assert recipe.hash != loaded.hash


def test_without_hyperparameters_the_search_spaces_defaults_are_used_and_stored():
    recipe = load_recipe(DIGITS).with_overrides(["algorithm=momentum"])
    point = recipe.mutable["hyperparameters"]
    assert point["lr"] == pytest.approx(1e-3**0.5) and point["momentum"] == pytest.approx(0.895)
    assert recipe.settings()["lr"] == point["lr"]


def test_a_point_given_as_one_table_is_the_same_configuration_as_key_by_key():
    one = load_recipe(DIGITS).with_overrides(["algorithm=adam", 'hyperparameters={"lr": 0.01}'])
    keyed = load_recipe(DIGITS).with_overrides(["algorithm=adam", "hyperparameters.lr=0.01"])
    assert one.mutable == keyed.mutable and one.hash == keyed.hash


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        (["algorithm=adam", "lr=0.1"], ["--set lr", "algorithm adam"]),
        (["algorithm=momentum", "optimizer_options.momentum=0.5"], ["--set optimizer_options"]),
        (["algorithm=adam", "hyperparameters.gamma=2"], ["gamma", "lr, beta1"]),
        (["algorithm=adam", "hyperparameters.lr=5.0"], ["lr", "5.0", "[0.0001, 0.1]"]),
        (["algorithm=adam", "hyperparameters=3"], ["hyperparameters must be a table"]),
        (["hyperparameters.lr=0.1"], ["need an algorithm", "adam"]),
        (["algorithm=adamm"], ["unknown algorithm 'adamm'", "adamw"]),
        (["algorithm=4"], ["algorithm must be a name"]),
    ],
)
def test_a_bad_algorithm_setting_is_one_line(sets, words):
    with pytest.raises(UsageError) as info:
        load_recipe(DIGITS).with_overrides(sets)
    message = str(info.value)
    assert "\n" not in message and all(w in message for w in words), message


def test_a_key_the_recipe_freezes_cannot_be_set_by_the_algorithm(tmp_path):
    recipe = load_recipe(small(tmp_path, fixed='optimizer = "sgd"', mutable="lr = 0.1"))
    with pytest.raises(UsageError, match="freezes optimizer in FIXED, and algorithm adam sets"):
        recipe.with_overrides(["algorithm=adam"])


def test_the_recipes_own_choices_give_way_unless_the_user_set_them(tmp_path):
    path = small(tmp_path, mutable='optimizer = "sgd"\nlr = 0.1\nschedule = 0.05')
    dropped = load_recipe(path).with_overrides(["algorithm=adam"]).settings()
    assert dropped["optimizer"] == "adam" and dropped.get("schedule") is None
    kept = load_recipe(path).with_overrides(["algorithm=adam", "schedule=0.02"]).settings()
    assert kept["schedule"] == 0.02


def test_a_recipe_that_names_an_algorithm_needs_no_optimizer_or_lr(tmp_path):
    path = small(tmp_path, mutable='algorithm = "adagrad"\nhyperparameters = { lr = 0.05 }')
    recipe = load_recipe(path).with_overrides([])
    assert recipe.settings()["optimizer"] == "adagrad" and recipe.settings()["lr"] == 0.05


def test_the_algorithms_batch_size_for_the_workload_is_used(fake_algorithms, tmp_path):
    recipe = load_recipe(small(tmp_path)).with_overrides(["algorithm=big-batch"])
    assert recipe.settings()["batch_size"] == 64
    with pytest.raises(UsageError, match="--set batch_size conflicts with algorithm big-batch"):
        load_recipe(small(tmp_path)).with_overrides(["algorithm=big-batch", "batch_size=16"])


# -- d5 run ----------------------------------------------------------------------------


def _run(d5_cli, recipe: Path, db: Path, *sets: str) -> dict:
    args = ["run", str(recipe), "--json", "--db", str(db)]
    for item in sets:
        args += ["--set", item]
    result = d5_cli(*args)
    assert result.exit_code == 0, result.stderr
    (run,) = json.loads(result.stdout)["data"]["runs"]
    return run


def test_d5_run_trains_with_the_algorithm_and_stores_its_choice(d5_cli, tmp_path):
    db = tmp_path / "runs.db"
    run = _run(d5_cli, small(tmp_path), db, "algorithm=adam", "hyperparameters.lr=0.003")
    assert run["metrics"]["final_test_accuracy"] > 0.5
    with ResultsStore.open(db) as store:
        config = store.get_run(run["run_id"]).config
    assert config["mutable"]["algorithm"] == "adam"
    assert config["mutable"]["hyperparameters"] == {"lr": 0.003, "beta1": pytest.approx(0.9)}
    assert config["settings"]["optimizer"] == "adam" and config["settings"]["lr"] == 0.003
    assert config["overrides"] == {"algorithm": "adam", "hyperparameters.lr": 0.003}


def test_d5_run_refuses_a_conflicting_set_before_training(d5_cli, tmp_path):
    db = tmp_path / "runs.db"
    result = d5_cli("run", str(small(tmp_path)), "--db", str(db),
                    "--set", "algorithm=adam", "--set", "lr=0.1")  # fmt: skip
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "--set lr conflicts with algorithm adam" in result.stderr


def test_the_trainer_evaluates_what_prepare_for_eval_hands_back(fake_algorithms, d5_cli, tmp_path):
    """Zero parameters predict class 0 only: about a tenth of the digits are right, while
    the same training evaluated on its live parameters gets most of them."""
    db = tmp_path / "runs.db"
    zero = _run(d5_cli, small(tmp_path), db, "algorithm=zero-eval", "hyperparameters.lr=0.1")
    live = _run(d5_cli, small(tmp_path), db, "algorithm=sgd", "hyperparameters.lr=0.1")
    assert zero["metrics"]["final_test_accuracy"] < 0.2
    assert live["metrics"]["final_test_accuracy"] > 0.5


def test_a_framework_baseline_runs_on_its_executor(d5_cli, tmp_path):
    pytest.importorskip("torch")
    db = tmp_path / "runs.db"
    run = _run(d5_cli, small(tmp_path), db, "algorithm=torch-adam", "executor=torch",
               "hyperparameters.lr=0.003")  # fmt: skip
    assert run["metrics"]["final_test_accuracy"] > 0.5
    with ResultsStore.open(db) as store:
        settings = store.get_run(run["run_id"]).config["settings"]
    assert settings["optimizer"] == "torch-adam" and settings["executor"] == "torch"
