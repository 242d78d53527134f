"""Search spaces: checked with one-line errors, sampled reproducibly within their bounds,
their defaults the self-tuning point, and given points checked and completed."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.lv2.algorithms.search_space import (
    complete_point,
    defaults,
    load_space,
    parse_space,
    sample,
)

SPACE = {
    "lr": {"distribution": "log_uniform", "min": 1e-4, "max": 1e-1},
    "momentum": {"distribution": "uniform", "min": 0.8, "max": 0.99},
    "warmup": {"distribution": "choice", "values": [0, 100]},
    "layers": {"distribution": "int_uniform", "min": 1, "max": 4},
    "beta2": 0.999,
}


@pytest.mark.parametrize(
    ("space", "words"),
    [
        ({}, ["empty"]),
        ({"lr": {"distribution": "gaussian", "min": 0, "max": 1}}, ["lr", "gaussian", "uniform"]),
        ({"lr": {"distribution": "uniform", "min": 1.0, "max": 1.0}}, ["lr", "min", "max"]),
        ({"lr": {"distribution": "uniform", "min": 2.0, "max": 1.0}}, ["lr", "min", "max"]),
        ({"lr": {"distribution": "log_uniform", "min": 0.0, "max": 1.0}}, ["lr", "above 0"]),
        ({"lr": {"distribution": "uniform", "min": 0.0}}, ["lr", "'max'"]),
        ({"lr": {"distribution": "uniform", "min": 0, "max": 1, "step": 1}}, ["lr", "'step'"]),
        ({"n": {"distribution": "int_uniform", "min": 0.5, "max": 3}}, ["n.min", "integer"]),
        ({"w": {"distribution": "choice", "values": []}}, ["w.values", "non-empty"]),
        ({"w": {"min": 0, "max": 1}}, ["w", "distribution"]),
        ({"lr": {"distribution": "uniform", "min": 0, "max": math.inf}}, ["lr.max", "finite"]),
        ([1, 2], ["table"]),
    ],
)
def test_a_malformed_space_is_one_line_naming_the_key(space, words):
    with pytest.raises(UsageError) as info:
        parse_space(space, where="algorithm x")
    message = str(info.value)
    assert "\n" not in message and message.startswith("algorithm x")
    assert all(word in message for word in words), message


def test_a_well_formed_space_parses_to_a_plain_copy():
    parsed = parse_space(SPACE)
    assert parsed == SPACE and parsed is not SPACE
    assert list(parsed) == list(SPACE)


def test_samples_lie_within_their_bounds_and_choices():
    rng = np.random.default_rng(0)
    points = [sample(SPACE, rng) for _ in range(200)]
    assert all(1e-4 <= p["lr"] <= 1e-1 for p in points)
    assert all(0.8 <= p["momentum"] <= 0.99 for p in points)
    assert {p["warmup"] for p in points} == {0, 100}
    assert {p["layers"] for p in points} == {1, 2, 3, 4}
    assert {p["beta2"] for p in points} == {0.999}
    assert all(type(p["layers"]) is int and type(p["lr"]) is float for p in points)


def test_log_uniform_samples_spread_evenly_over_the_decades():
    rng = np.random.default_rng(1)
    space = {"lr": {"distribution": "log_uniform", "min": 1e-4, "max": 1.0}}
    logs = [math.log10(sample(space, rng)["lr"]) for _ in range(4000)]
    below = sum(v < -2 for v in logs) / len(logs)  # half the decades: about half the draws
    assert 0.45 < below < 0.55


def test_the_same_generator_state_draws_the_same_point():
    a = sample(SPACE, np.random.default_rng(7))
    b = sample(SPACE, np.random.default_rng(7))
    c = sample(SPACE, np.random.default_rng(8))
    assert a == b and a != c


def test_defaults_are_the_middles_and_first_choices():
    point = defaults(SPACE)
    assert point["lr"] == pytest.approx(math.sqrt(1e-4 * 1e-1))
    assert point["momentum"] == pytest.approx(0.895)
    assert point["warmup"] == 0 and point["layers"] == 2 and point["beta2"] == 0.999


def test_a_middle_is_stored_without_rounding_noise():
    space = {"beta1": {"distribution": "uniform", "min": 0.85, "max": 0.95}}
    assert (0.85 + 0.95) / 2 != 0.9 and defaults(space) == {"beta1": 0.9}


def test_a_given_point_is_completed_with_the_defaults_in_the_spaces_order():
    point = complete_point(SPACE, {"layers": 3, "lr": 0.01})
    assert list(point) == list(SPACE)
    assert point["lr"] == 0.01 and point["layers"] == 3
    assert point["momentum"] == pytest.approx(0.895)


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"gamma": 1.0}, ["gamma", "lr, momentum"]),
        ({"lr": 0.5}, ["lr", "0.5", "[0.0001, 0.1]"]),
        ({"lr": "fast"}, ["lr", "number"]),
        ({"layers": 2.5}, ["layers", "integer"]),
        ({"warmup": 50}, ["warmup", "[0, 100]"]),
        ({"beta2": 0.9}, ["beta2", "fixed"]),
    ],
)
def test_a_point_outside_the_space_is_refused_naming_the_hyperparameter(given, words):
    with pytest.raises(UsageError) as info:
        complete_point(SPACE, given, where="algorithm a")
    assert all(word in str(info.value) for word in words), str(info.value)


def test_a_file_gives_its_search_space_table_or_is_one(tmp_path: Path):
    table = tmp_path / "algo.toml"
    table.write_text(
        'name = "mine"\n[search_space]\nlr = { distribution = "uniform", min = 0, max = 1 }\n'
    )
    whole = tmp_path / "space.toml"
    whole.write_text("beta2 = 0.999\n")
    assert load_space(table) == {"lr": {"distribution": "uniform", "min": 0, "max": 1}}
    assert load_space(whole) == {"beta2": 0.999}


def test_a_file_with_an_unknown_distribution_names_the_file_and_key(tmp_path: Path):
    path = tmp_path / "space.toml"
    path.write_text('lr = { distribution = "normal", min = 0, max = 1 }\n')
    with pytest.raises(UsageError, match=r"space\.toml: lr has unknown distribution 'normal'"):
        load_space(path)
