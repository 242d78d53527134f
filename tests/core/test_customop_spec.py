"""Reading a custom operator's declaration from its C++ source (no compiler runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5core.errors import UsageError
from d5core.lv0.customop.runner import custom_problem
from d5core.lv0.customop.spec import parse_spec, read_spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "custom_ops" / "bias_gelu.cpp"

DECLARED = """
#include <d5_op.h>
D5_OP_NAME("my_op");   // the name
D5_OP_INPUTS("X", "W");
D5_OP_OUTPUTS("Y", "Z");
/* D5_OP_NAME("commented_out"); */
D5_OP_FLOAT_ATTR("alpha", 0.25);
D5_OP_INT_ATTR("k", 3);
D5_OP_SHAPES("4x5", "5");
"""


def test_the_example_declares_bias_gelu():
    spec = read_spec(EXAMPLE)
    assert (spec.name, spec.inputs, spec.outputs) == ("bias_gelu", ("X", "B"), ("Y",))
    assert [(a.name, a.kind, a.default) for a in spec.attributes] == [("scale", "float", 1.0)]
    assert spec.shapes == ((32, 64), (64,))


def test_every_declaration_is_read_and_comments_are_ignored():
    spec = parse_spec(DECLARED)
    assert spec.name == "my_op"
    assert spec.outputs == ("Y", "Z")
    assert spec.resolve_attributes({}) == {"alpha": 0.25, "k": 3}
    assert spec.resolve_attributes({"k": 7.0, "alpha": 1}) == {"alpha": 1.0, "k": 7}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"beta": 1}, "my_op has no attribute 'beta'; its attributes: alpha, k"),
        ({"k": 1.5}, "attribute 'k' is an int, not 1.5"),
        ({"alpha": "big"}, "attribute 'alpha' is a float, not 'big'"),
    ],
)
def test_a_bad_attribute_is_a_usage_error_naming_it(given, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(")):
        parse_spec(DECLARED).resolve_attributes(given)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('D5_OP_INPUTS("X");\nD5_OP_OUTPUTS("Y");', r"no D5_OP_NAME\(...\) line"),
        ('D5_OP_NAME("BadName");\nD5_OP_INPUTS("X");\nD5_OP_OUTPUTS("Y");', "operator name"),
        ('D5_OP_NAME("a");\nD5_OP_NAME("b");', "declared twice"),
        ('D5_OP_NAME("a");\nD5_OP_INPUTS(X);\nD5_OP_OUTPUTS("Y");', "string literals only"),
        (
            'D5_OP_NAME("a");\nD5_OP_INPUTS("X");\nD5_OP_OUTPUTS("Y");\nD5_OP_INT_ATTR("n", 1.5);',
            "must be a whole number",
        ),
        (
            'D5_OP_NAME("a");\nD5_OP_INPUTS("X", "W");\nD5_OP_OUTPUTS("Y");\nD5_OP_SHAPES("4");',
            "gives 1 shapes for 2 inputs",
        ),
    ],
)
def test_a_malformed_declaration_names_its_line(text, message):
    with pytest.raises(UsageError, match=message):
        parse_spec(text, "op.cpp")


def test_the_problem_takes_declared_shapes_unless_given():
    spec = parse_spec(DECLARED)
    assert [s.shape for s in custom_problem(spec).inputs] == [(4, 5), (5,)]
    given = custom_problem(spec, [(2, 3), (3,)], {"k": 1})
    assert [(s.shape, s.name) for s in given.inputs] == [((2, 3), "X"), ((3,), "W")]
    assert given.attributes == {"alpha": 0.25, "k": 1}
    with pytest.raises(UsageError, match="takes 2 inputs"):
        custom_problem(spec, [(2, 3)])
