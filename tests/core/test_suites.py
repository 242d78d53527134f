"""Workload suites: the shipped CPU suite loads, and every mistake in a suite is one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import tomllib

from d5core.errors import UsageError
from d5core.lv2.algorithms.suites import (
    TARGET_KEYS,
    find_suite,
    load_suite,
    suite_names,
    toml_document,
)

REPO = Path(__file__).resolve().parents[2]
DIGITS = REPO / "recipes" / "digits-mlp.toml"


def _suite(tmp_path: Path, body: str, name: str = "mine.toml") -> Path:
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return path


def _one(tmp_path: Path, workload: str, head: str = 'name = "mine"\n') -> Path:
    return _suite(tmp_path, head + "[[workload]]\n" + workload)


GOOD = f'name = "d"\nrecipe = "{DIGITS}"\ntarget = {{ accuracy = 0.9 }}\nbudget_s = 10\n'


def test_the_cpu_suite_loads_with_a_target_and_a_budget_for_each_of_its_four_workloads():
    suite = load_suite("cpu")
    assert suite.name == "cpu"
    assert "cpu" in suite_names()
    assert len(suite.workloads) == 4
    kinds = {w.target_kind for w in suite.workloads}
    assert kinds == {"accuracy", "perplexity", "loss"}
    for workload in suite.workloads:
        assert workload.recipe.is_file()
        assert workload.budget_s > 0
        assert workload.provenance.get("method")
        assert workload.executor == "numpy"


def test_a_recipe_path_is_relative_to_the_suite_file(tmp_path):
    folder = tmp_path / "suites"
    folder.mkdir()
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "d.toml").write_bytes(DIGITS.read_bytes())
    path = _one(
        folder,
        'name = "d"\nrecipe = "../recipes/d.toml"\ntarget = { loss = 0.5 }\nbudget_s = 2.5\n',
    )
    (workload,) = load_suite(path).workloads
    assert workload.recipe == (tmp_path / "recipes" / "d.toml").resolve()
    assert workload.target == {"loss": 0.5}
    assert workload.budget_s == 2.5


@pytest.mark.parametrize(
    ("workload", "expected"),
    [
        ('name = "d"\nrecipe = "nowhere.toml"\ntarget = { accuracy = 0.9 }\nbudget_s = 10\n',
         "recipe nowhere.toml not found"),
        (GOOD.replace("accuracy = 0.9", "accuracy = 1.5"), "fraction in (0, 1]"),
        (GOOD.replace("accuracy = 0.9", "speed = 3"), "unknown target 'speed'"),
        (GOOD.replace("accuracy = 0.9", "accuracy = 0.9, loss = 1.0"), "one of accuracy"),
        (GOOD.replace("accuracy = 0.9", "perplexity = 1.0"), "above 1"),
        (GOOD.replace("accuracy = 0.9", "loss = 0"), "target loss must be above 0"),
        (GOOD.replace("budget_s = 10", "budget_s = 0"), "budget_s must be a positive number"),
        (GOOD.replace("budget_s = 10", "budget_s = -3"), "budget_s must be a positive number"),
        (GOOD.replace("budget_s = 10", 'budget_s = "10"'), "budget_s must be a positive number"),
        (GOOD.replace("budget_s = 10", "budget_s = nan"), "budget_s must be a positive number"),
        (GOOD.replace("budget_s = 10\n", ""), "missing budget_s"),
        (GOOD + "epochs = 3\n", "unknown key(s) epochs"),
        (GOOD.replace('name = "d"', 'name = "a b"'), "name must be a word"),
    ],
)  # fmt: skip
def test_a_bad_workload_is_refused_in_one_line_naming_it(tmp_path, workload, expected):
    with pytest.raises(UsageError) as info:
        load_suite(_one(tmp_path, workload))
    message = str(info.value)
    assert expected in message
    assert "\n" not in message
    assert message.startswith("suite mine")


def test_a_recipe_that_does_not_load_is_refused_naming_the_workload(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[fixed]\nmodel = "mlp"\n', encoding="utf-8")
    path = _one(tmp_path, GOOD.replace(str(DIGITS), str(bad)))
    with pytest.raises(UsageError, match=r"workload d: recipe bad: missing required key"):
        load_suite(path)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('name = "mine"\nowner = "me"\n[[workload]]\n' + GOOD, "unknown key(s) owner"),
        ('name = "mine"\n', "has no workloads"),
        ('name = "mine"\n[[workload]]\n' + GOOD + "[[workload]]\n" + GOOD, "appears twice"),
        ('name = "mine\n', "does not parse"),
    ],
)
def test_a_bad_suite_is_refused_in_one_line(tmp_path, body, expected):
    with pytest.raises(UsageError) as info:
        load_suite(_suite(tmp_path, body))
    assert expected in str(info.value)
    assert "\n" not in str(info.value)


def test_an_unknown_suite_name_lists_the_known_ones():
    with pytest.raises(UsageError, match=r"unknown suite 'nope'; known suites: .*cpu"):
        find_suite("nope")
    with pytest.raises(UsageError, match="does not exist"):
        find_suite("nowhere/else.toml")


def test_the_suite_hash_follows_targets_and_budgets_not_provenance(tmp_path):
    base = load_suite(_one(tmp_path, GOOD)).hash
    noted = _one(tmp_path, GOOD + '[workload.provenance]\nmethod = "by hand"\n')
    assert load_suite(noted).hash == base
    assert load_suite(_one(tmp_path, GOOD.replace("0.9", "0.8"))).hash != base
    assert load_suite(_one(tmp_path, GOOD.replace("= 10", "= 11"))).hash != base


def test_a_written_suite_reads_back_as_the_same_data():
    data = {
        "name": "cpu",
        "description": 'quotes " and \\ and é',
        "workload": [
            {
                "name": "digits-mlp",
                "recipe": "../recipes/digits-mlp.toml",
                "target": {"accuracy": 0.93},
                "budget_s": 12.5,
                "provenance": {"method": "m", "date": "d", "algorithms": ["adam", "momentum"],
                               "figures": {"adam": [1.5, 2.0]}, "repeats": 3},
            },
            {"name": "lm", "recipe": "x.toml", "target": {"perplexity": 8.0}, "budget_s": 30},
        ],
    }  # fmt: skip
    assert tomllib.loads(toml_document(data)) == data
    assert set(TARGET_KEYS) == {"accuracy", "perplexity", "loss"}
