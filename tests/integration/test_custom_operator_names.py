"""A custom operator registered under a name other than its ``op_type`` (issue 13, item
7): ``d5 validate op`` compares it with the reference's operator of its ``op_type``, says
so, and names it one way (the registered name, the ``op_type`` shown once); one the
reference lacks under both names says that only central differences ran."""

from __future__ import annotations

import json

import pytest

from d5core.lv0.runner import problem_for, validate_op

OPERATORS = """
import numpy as np
from d5core.hookspecs import hookimpl
from d5core.levels.operators import Operator
d5_plugin_api = ">=1.0"

class Tanh(Operator):
    op_type = "Tanh"
    scale = 1.0
    def forward(self, inputs):
        return [self.scale * np.tanh(inputs[0])]
    def backward(self, grad_outputs, inputs, outputs):
        t = np.tanh(inputs[0])
        return [(self.scale * grad_outputs[0] * (1 - t ** 2)).astype(inputs[0].dtype)]

class LoudTanh(Tanh):
    # consistent with its own backward, so only a comparison with the reference finds it
    scale = 1.01

class Cube(Operator):
    op_type = "Cube"
    def forward(self, inputs):
        return [inputs[0] ** 3]
    def backward(self, grad_outputs, inputs, outputs):
        return [3 * inputs[0] ** 2 * grad_outputs[0]]

@hookimpl
def d5_custom_operators():
    return {"FastTanh": Tanh, "LoudTanh": LoudTanh, "Cube": Cube, "MyCube": Cube}
"""


@pytest.fixture(autouse=True)
def _custom_operators(d5_site, tmp_path, monkeypatch):
    d5_site.add(
        "d5-plugin-custom-names",
        entry_points={"d5.hooks": {"custom_names": "custom_names_mod"}},
        modules={"custom_names_mod.py": OPERATORS},
    )
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))


def _validate(name: str):
    return validate_op(problem_for(name, shapes=[(3, 4)]), "custom", dtype="float64")


def test_an_operator_under_another_name_is_compared_with_the_reference_of_its_op_type():
    result = _validate("FastTanh")
    assert result.passed and (result.against, result.reference_op) == ("numpy", "Tanh")
    assert [o.label for o in result.report.outputs] == ["output 0"]
    assert "reference" in {g.method for g in result.report.gradients}
    assert result.note == (
        "numpy has no operator 'FastTanh'; FastTanh declares op_type 'Tanh', so it was "
        "compared with numpy's Tanh"
    )


def test_a_wrong_forward_under_another_name_fails_against_the_reference(d5_cli):
    result = d5_cli("validate", "op", "LoudTanh", "--backend", "custom", "--shape", "3x4",
                    "--dtype", "float64")  # fmt: skip
    assert result.exit_code == 1
    assert result.stderr.startswith("d5: error: LoudTanh on custom (float64) failed: output 0")


def test_the_report_names_the_operator_as_selected_and_its_op_type_once(d5_cli):
    result = d5_cli("validate", "op", "FastTanh", "--backend", "custom", "--shape", "3x4")
    assert result.exit_code == 0, result.stderr
    text = " ".join(result.stdout.split())
    assert text.startswith(
        "FastTanh (op_type Tanh) on custom (float32), against numpy's Tanh: FastTanh[3x4] "
    )
    assert text.count("op_type") == 2  # the title, and the note
    assert "note: numpy has no operator 'FastTanh'; FastTanh declares op_type 'Tanh'" in text
    data = json.loads(d5_cli("validate", "op", "FastTanh", "--backend", "custom",
                             "--shape", "3x4", "--json").stdout)["data"]  # fmt: skip
    assert (data["op"], data["op_type"], data["reference_op"]) == ("FastTanh", "Tanh", "Tanh")


def test_an_operator_of_the_same_name_has_no_note(d5_cli):
    result = validate_op(problem_for("Tanh"), "numpy")
    assert (result.reference_op, result.note) == ("Tanh", "")
    shown = d5_cli("validate", "op", "Tanh", "--backend", "numpy")
    assert " ".join(shown.stdout.split()).startswith("Tanh on numpy (float32), against numpy:")
    assert "note:" not in shown.stdout


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("Cube", "numpy has no operator 'Cube': "),
        ("MyCube", "numpy has no operator 'MyCube' nor 'Cube', the op_type MyCube declares: "),
    ],
)
def test_an_operator_the_reference_lacks_says_only_central_differences_ran(name, why, d5_cli):
    result = _validate(name)
    assert result.passed and result.against == "central differences only"
    assert result.reference_op is None and result.report.outputs == []
    assert result.note == (
        f"{why}nothing to compare the outputs with, so only the backward was checked, by "
        "central differences"
    )
    shown = d5_cli("validate", "op", name, "--backend", "custom", "--shape", "3x4")
    assert f"note: {result.note}" in " ".join(shown.stdout.split())
