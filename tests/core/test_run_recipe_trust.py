"""Recipes that cannot be bypassed: a frozen seed, a hash of what runs, isolated Python
recipes, and one-line errors for bad recipe files (issue 11, items 13 and 18)."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5core.errors import UsageError
from d5core.lv2 import recipes
from d5core.lv2.recipes import load_recipe, run_hash

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

PY_SECTIONS = (
    "FIXED = {'model': 'mlp', 'dataset': 'digits', 'epochs': 3, 'target_accuracy': 0.5}\n"
    "MUTABLE = {'executor': 'numpy', 'optimizer': 'sgd', 'lr': 0.1, 'batch_size': 32}\n"
    "METRICS = {'final_test_accuracy': {'min': 0.5}}\n"
)


def _write(tmp_path: Path, text: str | bytes, name: str = "r.toml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def _one_line_error(path: Path) -> str:
    with pytest.raises(UsageError) as info:
        load_recipe(path)
    message = str(info.value)
    assert "\n" not in message and len(message) < 250
    return message


# -- item 13: FIXED cannot be bypassed -------------------------------------------------


def test_a_seed_frozen_in_fixed_refuses_another_seed(tmp_path):
    frozen = load_recipe(_write(tmp_path, GOOD.replace("epochs = 3", "epochs = 3\nseed = 4")))
    with pytest.raises(UsageError, match="seed is FIXED in recipe r"):
        frozen.run_seed(5)
    assert frozen.run_seed(None) == 4
    assert frozen.run_seed(4) == 4  # naming the frozen seed changes nothing
    free = load_recipe(_write(tmp_path, GOOD, "free.toml"))
    assert (free.run_seed(None), free.run_seed(5)) == (0, 5)


def test_the_hash_is_of_the_configuration_after_overrides(tmp_path):
    recipe = load_recipe(_write(tmp_path, GOOD))
    same = recipe.with_overrides([])
    changed = recipe.with_overrides(["lr=0.5"])
    assert same.hash == recipe.hash == recipe.loaded_hash
    assert changed.hash != recipe.hash and changed.loaded_hash == recipe.hash
    direct = load_recipe(_write(tmp_path, GOOD.replace("lr = 0.1", "lr = 0.5"), "b.toml"))
    assert changed.hash == direct.hash


def test_a_seed_left_to_the_competitor_does_not_change_the_hash(tmp_path):
    recipe = load_recipe(_write(tmp_path, GOOD))
    assert recipe.with_overrides(["seed=9"]).hash == recipe.hash
    frozen = load_recipe(
        _write(tmp_path, GOOD.replace("epochs = 3", "epochs = 3\nseed = 9"), "f.toml")
    )
    assert frozen.hash != recipe.hash


def test_the_stored_hash_changes_with_the_data_read():
    a = run_hash("r" * 64, {"train": "a" * 64, "test": "b" * 64})
    b = run_hash("r" * 64, {"train": "c" * 64, "test": "b" * 64})
    assert a != b and len(a) == 64
    assert a == run_hash("r" * 64, {"test": "b" * 64, "train": "a" * 64})


def test_a_python_recipe_cannot_patch_d5_to_let_a_fixed_key_through(tmp_path):
    path = _write(
        tmp_path,
        "import d5core.lv2.recipes as r\n"
        "r.Recipe.settable = lambda self: ['epochs']\n"
        "r.Recipe.with_overrides = lambda self, sets: self\n"
        "r.PROBLEM_KEYS.clear()\n" + PY_SECTIONS,
        "patch.py",
    )
    recipe = load_recipe(path)
    assert "epochs" in recipes.PROBLEM_KEYS
    with pytest.raises(UsageError, match="epochs is FIXED in recipe patch"):
        recipe.with_overrides(["epochs=1"])
    assert recipe.hash == load_recipe(_write(tmp_path, GOOD)).hash


def test_a_python_recipe_calling_sys_exit_is_a_one_line_usage_error(tmp_path):
    path = _write(tmp_path, "import sys\nsys.exit(7)\n" + PY_SECTIONS, "exits.py")
    assert "called sys.exit(7) while loading" in _one_line_error(path)


def test_a_python_recipe_whose_process_dies_is_a_usage_error(tmp_path):
    path = _write(tmp_path, "import os\nos._exit(9)\n", "dies.py")
    assert "exit code 9" in _one_line_error(path)


def test_a_python_recipe_failing_or_holding_objects_is_a_one_line_usage_error(tmp_path):
    fails = _write(tmp_path, "raise RuntimeError('no\\nway')\n", "fails.py")
    assert "failed to run: RuntimeError: no way" in _one_line_error(fails)
    objects = _write(tmp_path, PY_SECTIONS + "FIXED['model'] = object()\n", "objects.py")
    assert "plain data only" in _one_line_error(objects)


def test_what_a_python_recipe_prints_goes_to_stderr(tmp_path, capsys):
    path = _write(tmp_path, "print('hello from the recipe')\n" + PY_SECTIONS, "talks.py")
    load_recipe(path)
    out = capsys.readouterr()
    assert out.out == "" and "hello from the recipe" in out.err


# -- item 18: bad recipe files are one-line usage errors ---------------------------------


def test_a_latin1_toml_recipe_is_a_one_line_usage_error(tmp_path):
    path = _write(tmp_path, GOOD.replace('"mlp"', '"café"').encode("latin-1"), "latin.toml")
    message = _one_line_error(path)
    assert "is not UTF-8 text (byte 0xe9" in message and "save it as UTF-8" in message


def test_a_binary_toml_recipe_is_a_one_line_usage_error(tmp_path):
    path = _write(tmp_path, bytes(range(256)) * 4, "binary.toml")
    assert "is not UTF-8 text" in _one_line_error(path)


@pytest.mark.parametrize("target", ["7", "1.5", "100"])
def test_a_target_accuracy_above_one_is_refused(tmp_path, target):
    path = _write(tmp_path, GOOD.replace("target_accuracy = 0.5", f"target_accuracy = {target}"))
    assert "target_accuracy is a fraction of the test set in (0, 1]" in _one_line_error(path)


@pytest.mark.parametrize(
    "threshold",
    ["final_test_accuracy = { min = 7 }", "best_test_accuracy = { max = -0.1 }",
     "training_accuracy = { min = 90 }"],
)  # fmt: skip
def test_accuracy_thresholds_outside_zero_to_one_are_refused(tmp_path, threshold):
    path = _write(tmp_path, GOOD.replace("final_test_accuracy = { min = 0.5 }", threshold))
    assert "is a fraction in [0, 1]" in _one_line_error(path)
