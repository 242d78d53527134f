"""Custom operators are validated at attribute values drawn from their declared ranges,
not only at the defaults: a backward that ignores ``scale`` fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from d5core.testing.customop import validate_custom

pytest.importorskip("d5_plugin_numpy")

SOURCE = r"""
#include <d5_op.h>

D5_OP_NAME("scaled");
D5_OP_INPUTS("X");
D5_OP_OUTPUTS("Y");
D5_OP_FLOAT_ATTR("scale", 1.0, 0.1, 10.0);
D5_OP_SHAPES("3x4");

void forward(const d5::Inputs& in, d5::Outputs& out, const d5::Attributes& attrs) {
  d5::dispatch(in[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t i = 0; i < in[0].size(); ++i)
      out[0].ptr<T>()[i] = static_cast<T>(attrs.f("scale") * in[0].ptr<T>()[i]);
  });
}

void backward(const d5::Inputs& grad_out, const d5::Inputs& in, d5::Outputs& grad_in,
              const d5::Attributes& attrs) {
  d5::dispatch(in[0].dtype, [&](auto zero) {
    using T = decltype(zero);
    for (std::int64_t i = 0; i < in[0].size(); ++i)
      grad_in[0].ptr<T>()[i] = static_cast<T>(SCALE * grad_out[0].ptr<T>()[i]);
  });
}
"""


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ops")


def _source(directory: Path, scale: str) -> Path:
    path = directory / "scaled.cpp"
    path.write_text(SOURCE.replace("SCALE", scale))
    return path


def test_a_backward_that_ignores_an_attribute_fails_at_the_values_drawn_from_its_range(
    tmp_path: Path, cache: Path
) -> None:
    outcome = validate_custom(_source(tmp_path, "1.0"), ["numpy"], cache=cache)
    assert [r.passed for r in outcome.results] == [True, False, False]  # default, drawn
    assert all(" scale=" in line for line in outcome.failures())
    assert outcome.failures()[0].startswith("numpy at scaled[3x4] scale=")


def test_a_backward_that_follows_the_attribute_passes_at_every_value(
    tmp_path: Path, cache: Path
) -> None:
    outcome = validate_custom(_source(tmp_path, 'attrs.f("scale")'), ["numpy"], cache=cache)
    assert outcome.passed and len(outcome.results) == 3
