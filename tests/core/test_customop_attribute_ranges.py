"""A custom operator's attribute may declare the range of its values
(``D5_OP_FLOAT_ATTR("scale", 1.0, 0.1, 10.0)``): values outside it are refused, and
validation draws more values from it, so that a backward that ignores an attribute
cannot pass at the default alone."""

from __future__ import annotations

import pytest

from d5core.errors import UsageError
from d5core.lv0.customop.runner import DRAWN_ATTRIBUTE_SETS, custom_problem, drawn_problems
from d5core.lv0.customop.spec import parse_spec

HEAD = 'D5_OP_NAME("scaled");\nD5_OP_INPUTS("X");\nD5_OP_OUTPUTS("Y");\nD5_OP_SHAPES("3x4");\n'


def test_a_declared_range_is_read_with_the_default():
    spec = parse_spec(HEAD + 'D5_OP_FLOAT_ATTR("scale", 1.0, 0.1, 10.0);\nD5_OP_INT_ATTR("k", 2);')
    scale, k = spec.attributes
    assert (scale.default, scale.low, scale.high, scale.ranged) == (1.0, 0.1, 10.0, True)
    assert (k.default, k.ranged) == (2, False)


@pytest.mark.parametrize(
    "line",
    [
        'D5_OP_FLOAT_ATTR("scale", 1.0, 2.0, 10.0);',  # the default outside
        'D5_OP_FLOAT_ATTR("scale", 1.0, 1.0, 1.0);',  # an empty range
        'D5_OP_FLOAT_ATTR("scale", 1.0, 0.1);',  # a low without a high
        'D5_OP_INT_ATTR("k", 2, 1, 5.5);',  # a fractional bound of an int
    ],
)
def test_a_malformed_range_names_its_line(line):
    with pytest.raises(UsageError, match=r"<source>:5: ") as info:
        parse_spec(HEAD + line)
    assert "\n" not in str(info.value)


def test_a_value_outside_the_declared_range_is_refused():
    spec = parse_spec(HEAD + 'D5_OP_FLOAT_ATTR("scale", 1.0, 0.1, 10.0);')
    with pytest.raises(UsageError, match=r"takes values from 0.1 to 10.0 .* not 11"):
        spec.resolve_attributes({"scale": 11})
    assert spec.resolve_attributes({"scale": 10}) == {"scale": 10.0}


def test_validation_draws_attribute_values_from_the_declared_ranges():
    spec = parse_spec(HEAD + 'D5_OP_FLOAT_ATTR("scale", 1.0, 0.1, 10.0);\nD5_OP_INT_ATTR("k", 2);')
    problem = custom_problem(spec)
    drawn = drawn_problems(spec, problem, {}, seed=0)
    assert len(drawn) == DRAWN_ATTRIBUTE_SETS
    for made in drawn:
        assert 0.1 <= made.attributes["scale"] <= 10.0 and made.attributes["k"] == 2
        assert made.attributes["scale"] != 1.0 and "scale=" in made.label
    assert drawn_problems(spec, problem, {}, seed=0)[0].attributes == drawn[0].attributes
    # a value the user gives is kept, not drawn; nothing ranged left: nothing drawn
    assert drawn_problems(spec, problem, {"scale": 2.0}, seed=0) == []
