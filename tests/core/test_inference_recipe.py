"""Issue 19: inference recipes (``kind = "inference"``): loading, ``--set``, hashes, and
bad recipes refused by ``d5 run`` with one line and exit 2 before anything is stored.
No executor runs here (tests/integration/test_bench_scenario.py runs one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5core.errors import UsageError
from d5core.loadgen.recipe import is_inference_recipe, load_inference_recipe
from d5core.lv2.recipes import load_recipe

ROOT = Path(__file__).resolve().parents[2]
GOOD = """kind = "inference"

[fixed]
model = "lenet5"
scenario = "server"
latency_bound_ms = 50
target_qps = 100

[mutable]
executor = "numpy"
threads = 1

[metrics]
latency_p99 = { max = 0.05 }
"""


def _write(tmp_path: Path, text: str, name: str = "r.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_the_shipped_recipe_is_an_inference_recipe():
    path = ROOT / "recipes" / "lenet5-server.toml"
    assert is_inference_recipe(path)
    recipe = load_inference_recipe(path)
    assert recipe.fixed["scenario"] == "server" and recipe.fixed["latency_bound_ms"] > 0
    assert set(recipe.mutable) == {"executor", "threads"}
    assert not is_inference_recipe(ROOT / "recipes" / "digits-mlp.toml")


def test_set_changes_mutable_keys_and_the_hash(tmp_path):
    recipe = load_inference_recipe(_write(tmp_path, GOOD))
    torch = recipe.with_overrides(["executor=torch", "threads=2"])
    assert torch.values()["executor"] == "torch" and torch.values()["threads"] == 2
    assert torch.overrides == {"executor": "torch", "threads": 2}
    assert torch.hash != recipe.hash and torch.loaded_hash == recipe.hash
    seeded = recipe.with_overrides(["seed=4"])
    assert seeded.hash == recipe.hash  # a MUTABLE seed is recorded, not hashed
    assert seeded.run_seed(None) == 4 and recipe.run_seed(7) == 7


@pytest.mark.parametrize(
    ("sets", "words"),
    [
        (["model=mlp"], ["model is FIXED", "executor, seed, threads"]),
        (["scenario=offline"], ["scenario is FIXED"]),
        (["batch_size=3"], ["unknown key 'batch_size'"]),
        (["executor"], ["KEY=VALUE"]),
        (["threads=two"], ["threads must be a whole number"]),
    ],
)
def test_bad_overrides_are_refused(tmp_path, sets, words):
    recipe = load_inference_recipe(_write(tmp_path, GOOD))
    with pytest.raises(UsageError) as caught:
        recipe.with_overrides(sets)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (("model = ", "modle = "), ["unknown key(s) modle in FIXED"]),
        (('executor = "numpy"', 'executor = "numpy"\nscenario = "server"'), ["both FIXED"]),
        (("[mutable]", "[mutable]\nmin_duration_s = 1"), ["min_duration_s", "belong in FIXED"]),
        (('model = "lenet5"\n', ""), ["missing required key(s) model"]),
        (("latency_p99 =", "latency_p42 ="), ["unknown metric 'latency_p42'"]),
        (("{ max = 0.05 }", "{ max = 'fast' }"), ["finite number"]),
        (("[metrics]", "[extra]\n[metrics]"), ["unknown table(s) extra"]),
        (("target_qps = 100", "target_qps = 'many'"), ["target_qps must be a number"]),
    ],
)
def test_bad_recipes_are_refused_with_one_line(tmp_path, change, words):
    path = _write(tmp_path, GOOD.replace(*change))
    with pytest.raises(UsageError) as caught:
        load_inference_recipe(path)
    message = str(caught.value)
    assert "\n" not in message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize(
    ("change", "args", "words"),
    [
        (("latency_bound_ms = 50", "latency_bound_ms = 0"), [], ["--latency-bound", "positive"]),
        (("target_qps = 100", "target_qps = -3"), [], ["--target-qps", "positive"]),
        (('scenario = "server"', 'scenario = "batch"'), [], ["unknown scenario 'batch'"]),
        ((), ["--set", "model=mlp"], ["model is FIXED"]),
        ((), ["--ranks", "2"], ["--ranks", "training recipes"]),
        ((), ["--metric", "latency"], ["--metric"]),
    ],
)
def test_d5_run_refuses_bad_inference_recipes_before_storing(d5_cli, tmp_path, change, args, words):
    path = _write(tmp_path, GOOD.replace(*change) if change else GOOD)
    db = tmp_path / "results.sqlite"
    result = d5_cli("run", str(path), "--db", str(db), *args)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("d5: error: ")
    for word in words:
        assert word in result.stderr, result.stderr
    assert not db.exists()


def test_a_training_loader_refuses_another_kind(tmp_path):
    with pytest.raises(UsageError, match="kind = 'inference'"):
        load_recipe(_write(tmp_path, GOOD))
    with pytest.raises(UsageError, match="kind = 'serving'"):
        load_recipe(_write(tmp_path, GOOD.replace('"inference"', '"serving"'), "s.toml"))
