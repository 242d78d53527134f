"""Selecting installed metrics by name (issue 13, item 7): a plugin's metric in a recipe's
METRICS, with options, and on the command line with ``--metric``; every mistake is a
one-line error before any training. No run trains here (this lane has no executor):
tests/integration/test_metric_selection_run.py trains with the selected metrics."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from qa_plugin import add_qa_plugin

from d5core.errors import UsageError
from d5core.lv2.assembly import run_metrics
from d5core.lv2.recipes import check_thresholds, load_recipe
from d5core.lv2.runner import metric_values
from d5core.metrics.selection import value_of

RECIPE = """
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


@pytest.fixture
def qa_site(d5_site):
    """``d5-plugin-qa`` installed: it offers the metric ``qa_step_count``."""
    return add_qa_plugin(d5_site, {"qa_step_count": "QAStepCount", "qa_misnamed": "QAStepCount"})


def _recipe(tmp_path: Path, metrics: str = "", name: str = "r.toml") -> Path:
    path = tmp_path / name
    path.write_text(RECIPE + metrics)
    return path


def _one_line_error(path: Path) -> str:
    with pytest.raises(UsageError) as info:
        load_recipe(path)
    message = str(info.value)
    assert "\n" not in message
    return message


# -- METRICS ----------------------------------------------------------------------------


def test_a_plugin_metric_in_metrics_is_selected_with_its_threshold_and_options(qa_site, tmp_path):
    recipe = load_recipe(
        _recipe(tmp_path, "qa_step_count = { min = 5, options = { min_batch = 8 } }\n")
    )
    assert recipe.metrics["qa_step_count"] == {"min": 5.0, "options": {"min_batch": 8}}
    assert recipe.selected_metrics() == {"qa_step_count": {"min_batch": 8}}
    checks = check_thresholds(recipe, {"final_test_accuracy": 0.9, "qa_step_count": 4.0})
    assert [(c["metric"], c["passed"]) for c in checks] == [
        ("final_test_accuracy", True),
        ("qa_step_count", False),
    ]


def test_the_run_attaches_the_selected_metric_built_with_its_options(qa_site, tmp_path):
    recipe = load_recipe(
        _recipe(tmp_path, "qa_step_count = { min = 5, options = { min_batch = 8 } }\n")
    )
    metrics, selected = run_metrics(recipe)
    (qa,) = [m for m in metrics if m.name == "qa_step_count"]
    assert selected == {"qa_step_count": qa} and qa.min_batch == 8
    # every run's own metrics are still attached beside it
    assert {"loss_curve", "test_accuracy", "time_to_accuracy"} <= {m.name for m in metrics}


def test_a_metric_every_run_measures_is_reused_without_options_and_replaced_with_them(
    tmp_path,
):
    text = "loss_curve = { max = 10 }\ntest_accuracy = { min = 0.1, options = { key = 'acc' } }\n"
    metrics, selected = run_metrics(load_recipe(_recipe(tmp_path, text)))
    names = [m.name for m in metrics]
    assert names.count("loss_curve") == 1 and names.count("test_accuracy") == 1
    assert selected["loss_curve"] is metrics[names.index("loss_curve")]
    assert selected["test_accuracy"] is metrics[names.index("test_accuracy")]
    assert selected["test_accuracy"].key == "acc"


def test_options_alone_measure_a_metric_without_a_threshold(qa_site, tmp_path):
    recipe = load_recipe(_recipe(tmp_path, "qa_step_count = { options = { min_batch = 2 } }\n"))
    assert recipe.selected_metrics() == {"qa_step_count": {"min_batch": 2}}
    checks = check_thresholds(recipe, {"final_test_accuracy": 0.9, "qa_step_count": 0.0})
    assert [c["metric"] for c in checks] == ["final_test_accuracy"]


def test_a_metrics_options_are_part_of_the_recipe_hash(qa_site, tmp_path):
    a = load_recipe(_recipe(tmp_path, "qa_step_count = { min = 1 }\n", "a.toml"))
    b = load_recipe(
        _recipe(tmp_path, "qa_step_count = { min = 1, options = { min_batch = 4 } }\n", "b.toml")
    )
    assert a.hash != b.hash


def test_an_unknown_metric_names_the_figures_and_the_installed_metrics(qa_site, tmp_path):
    message = _one_line_error(_recipe(tmp_path, "qa_step_cuont = { min = 1 }\n"))
    assert message.startswith("recipe r: unknown metric 'qa_step_cuont' in METRICS; ")
    assert "final_test_accuracy" in message and "qa_step_count" in message
    assert "peak_memory" in message


def test_an_option_the_metric_does_not_take_is_named_with_the_metric(qa_site, tmp_path):
    message = _one_line_error(
        _recipe(tmp_path, "qa_step_count = { min = 1, options = { min_bath = 2 } }\n")
    )
    assert message == (
        "recipe r: metric qa_step_count has no option 'min_bath'; its options: min_batch"
    )


def test_a_value_the_metric_refuses_is_refused_when_the_recipe_loads(qa_site, tmp_path):
    message = _one_line_error(
        _recipe(tmp_path, "qa_step_count = { min = 1, options = { min_batch = 0 } }\n")
    )
    assert message == (
        "recipe r: metric qa_step_count refuses its options (min_batch=0): min_batch must be "
        "a positive integer, got 0"
    )


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            "final_test_accuracy = { min = 0.5, options = { key = 'x' } }",
            "metric final_test_accuracy is one of the run's own figures and takes no options",
        ),
        ("peak_memory = { max = 1e12, options = 3 }", "options must be a table"),
        ("peak_memory = {}", "needs a threshold"),
        ("peak_memory = { max = 1e12, colour = 1 }", "needs a threshold"),
    ],
)
def test_malformed_metric_entries_are_one_line_errors(tmp_path, entry, message):
    text = RECIPE.replace("final_test_accuracy = { min = 0.5 }\n", "") + entry + "\n"
    path = tmp_path / "r.toml"
    path.write_text(text)
    assert message in _one_line_error(path)


def test_a_metric_class_registered_under_another_name_is_refused(qa_site, tmp_path):
    message = _one_line_error(
        _recipe(tmp_path, "qa_misnamed = { min = 1, options = { min_batch = 2 } }\n")
    )
    assert message == (
        "recipe r: metric qa_misnamed: the metric class QAStepCount declares name "
        "'qa_step_count' but is registered as 'qa_misnamed'; its plugin must give both the "
        "same name"
    )


# -- --metric ---------------------------------------------------------------------------


def test_metric_names_from_the_command_line_are_checked_and_leave_the_hash(qa_site, tmp_path):
    recipe = load_recipe(_recipe(tmp_path))
    chosen = recipe.with_metrics(["qa_step_count", "wall_time", "qa_step_count"])
    assert chosen.extra_metrics == ("qa_step_count", "wall_time")
    assert chosen.selected_metrics() == {"qa_step_count": {}}  # wall_time: a figure
    assert chosen.hash == recipe.hash
    with pytest.raises(UsageError, match=r"^--metric: unknown metric 'nope'; .*qa_step_count"):
        recipe.with_metrics(["nope"])


def test_d5_run_refuses_an_unknown_metric_before_anything_runs(qa_site, tmp_path, d5_cli):
    db = tmp_path / "r.sqlite"
    result = d5_cli("run", str(_recipe(tmp_path)), "--metric", "nope", "--db", str(db))
    assert result.exit_code == 2
    assert result.stderr.startswith("d5: error: --metric: unknown metric 'nope'; ")
    assert result.stderr.count("\n") == 1 and "qa_step_count" in result.stderr
    assert not db.exists()


# -- values -----------------------------------------------------------------------------


def test_a_selected_metrics_value_is_its_results_finite_number_or_none():
    assert value_of({"value": 3, "unit": "steps"}) == 3.0
    for result in ({"unavailable": "no RAPL", "unit": "J"}, {"value": float("nan")},
                   {"value": True}, {"value": [1]}, None):  # fmt: skip
        assert value_of(result) is None
    result = SimpleNamespace(
        metrics={"qa_step_count": {"value": 7, "unit": "steps"}, "energy": {"unavailable": "x"}},
        losses=[0.5], final_test_accuracy=0.9, best_test_accuracy=0.9, time_to_accuracy=1.0,
        throughput={"samples_per_s": 10.0}, wall_s=2.0, steps=7, epochs=1,
    )  # fmt: skip
    values = metric_values(result, ["qa_step_count", "energy"])
    assert values["qa_step_count"] == 7.0 and values["energy"] is None
    assert values["final_loss"] == 0.5
