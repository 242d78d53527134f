"""Recipes: loading both forms, the content hash, and one-line errors for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5core.errors import UsageError
from d5core.lv2.recipes import check_thresholds, load_recipe, parse_value

RECIPES = Path(__file__).resolve().parents[2] / "recipes"

GOOD = """
[fixed]
model = "mlp"
dataset = "digits"
epochs = 3
target_accuracy = 0.5

[mutable]
executor = "numpy"
optimizer = "sgd"
lr = 0.1
batch_size = 32

[metrics]
final_test_accuracy = { min = 0.5 }
"""


def _write(tmp_path: Path, text: str, name: str = "r.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_shipped_recipes_load():
    from d5core.loadgen.recipe import is_inference_recipe, load_inference_recipe

    for path in sorted(RECIPES.glob("*.toml")):
        if is_inference_recipe(path):  # kind = "inference": docs/inference.md
            assert len(load_inference_recipe(path).hash) == 64
            continue
        recipe = load_recipe(path)
        assert recipe.form == "toml" and len(recipe.hash) == 64


def test_hash_depends_on_content_not_layout(tmp_path):
    a = load_recipe(_write(tmp_path, GOOD, "a.toml"))
    b = load_recipe(
        _write(tmp_path, "\n\n" + GOOD.replace("epochs = 3", "epochs   =   3"), "b.toml")
    )
    c = load_recipe(_write(tmp_path, GOOD.replace("epochs = 3", "epochs = 4"), "c.toml"))
    assert a.hash == b.hash != c.hash


def test_python_form_gives_the_same_recipe(tmp_path):
    py = _write(
        tmp_path,
        "FIXED = {'model': 'mlp', 'dataset': 'digits', 'epochs': 3, 'target_accuracy': 0.5}\n"
        "MUTABLE = {'executor': 'numpy', 'optimizer': 'sgd', 'lr': 0.1, 'batch_size': 32}\n"
        "METRICS = {'final_test_accuracy': {'min': 0.5}}\n",
        "r.py",
    )
    recipe = load_recipe(py)
    assert recipe.form == "python"
    assert recipe.hash == load_recipe(_write(tmp_path, GOOD)).hash


def test_overrides_change_mutable_keys_with_parsed_values(tmp_path):
    recipe = load_recipe(_write(tmp_path, GOOD)).with_overrides(
        ["lr=0.5", "executor=torch", "optimizer_options.momentum=0.9", "batch_size=16"]
    )
    settings = recipe.settings()
    assert settings["lr"] == 0.5 and settings["executor"] == "torch"
    assert settings["optimizer_options"] == {"momentum": 0.9} and settings["batch_size"] == 16
    assert recipe.overrides["lr"] == 0.5


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (["epochs=1"], "epochs is FIXED in recipe r; only MUTABLE keys"),
        (["colour=red"], "unknown key 'colour'"),
        (["lr"], "--set wants KEY=VALUE"),
        (["lr=-1"], "lr must be a positive number"),
    ],
)
def test_bad_overrides_are_usage_errors(tmp_path, sets, message):
    recipe = load_recipe(_write(tmp_path, GOOD))
    with pytest.raises(UsageError, match=message):
        recipe.with_overrides(sets)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (("epochs = 3", "epochs = 3\ncolour = 1"), "unknown key.*colour in FIXED; allowed:"),
        (("batch_size = 32", "batch_size = 32\nepochs = 2"), "epochs in both FIXED and MUTABLE"),
        (("lr = 0.1\n", ""), "missing required key.*lr"),
        (("{ min = 0.5 }", "{ least = 0.5 }"), "needs a threshold"),
        (("{ min = 0.5 }", '{ min = "high" }'), "must be a finite number"),
        (("final_test_accuracy", "happiness"), "unknown metric 'happiness'"),
        (("epochs = 3", "epochs = [3"), r"does not parse: .*line \d+"),
        (("target_accuracy = 0.5", "target_accuracy = 0.5\n[other]"), "unknown table"),
    ],
)
def test_bad_recipes_are_one_line_usage_errors(tmp_path, edit, message):
    path = _write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(UsageError, match=message) as info:
        load_recipe(path)
    assert "\n" not in str(info.value)


def test_python_syntax_error_names_the_line(tmp_path):
    path = _write(tmp_path, "FIXED = {\nMUTABLE = }\n", "bad.py")
    with pytest.raises(UsageError, match="does not parse: line"):
        load_recipe(path)


def test_problem_keys_cannot_be_mutable(tmp_path):
    text = GOOD.replace("epochs = 3\n", "").replace(
        "batch_size = 32", "batch_size = 32\nepochs = 3"
    )
    with pytest.raises(UsageError, match="belong in FIXED"):
        load_recipe(_write(tmp_path, text))


def test_thresholds_fail_on_missing_or_out_of_range_values(tmp_path):
    recipe = load_recipe(_write(tmp_path, GOOD))
    assert check_thresholds(recipe, {"final_test_accuracy": 0.6})[0]["passed"]
    assert not check_thresholds(recipe, {"final_test_accuracy": 0.4})[0]["passed"]
    assert not check_thresholds(recipe, {"final_test_accuracy": None})[0]["passed"]


def test_values_parse_as_toml_then_json_then_text():
    assert parse_value("0.5") == 0.5 and parse_value("true") is True
    assert parse_value("[1, 2]") == [1, 2] and parse_value("torch") == "torch"
