"""Learning-rate schedules: values at chosen steps, warmup, specs and their errors."""

from __future__ import annotations

import math

import pytest

from d5core.errors import UsageError
from d5core.lv2.schedules import (
    constant,
    cosine,
    from_callable,
    make_schedule,
    step,
    warmup,
)


def test_constant_is_the_same_at_every_step() -> None:
    s = constant(0.1)
    assert [s(t) for t in (0, 1, 1000)] == [0.1, 0.1, 0.1]


def test_step_decays_by_gamma_every_step_size_steps() -> None:
    s = step(1.0, step_size=10, gamma=0.5)
    assert [s(t) for t in (0, 9, 10, 19, 20, 35)] == [1.0, 1.0, 0.5, 0.5, 0.25, 0.125]


def test_cosine_goes_from_lr_to_min_lr_through_the_midpoint() -> None:
    s = cosine(0.1, total_steps=100, min_lr=0.01)
    assert s(0) == pytest.approx(0.1)
    assert s(50) == pytest.approx(0.055)
    assert s(25) == pytest.approx(0.01 + 0.09 * (1 + math.cos(math.pi / 4)) / 2)
    assert s(100) == pytest.approx(0.01)
    assert s(500) == pytest.approx(0.01)


def test_warmup_ramps_linearly_then_follows_the_wrapped_schedule() -> None:
    s = warmup(constant(1.0), warmup_steps=4, start_factor=0.2)
    assert [s(t) for t in range(6)] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0, 1.0])
    inner = step(1.0, step_size=5, gamma=0.1)
    w = warmup(inner, warmup_steps=2, start_factor=0.5)
    assert w(1) == pytest.approx(0.75)
    assert w(7) == pytest.approx(0.1)


def test_from_callable_makes_floats_of_any_per_step_function() -> None:
    s = from_callable(lambda t: 1 / (t + 1))
    assert s(3) == 0.25
    assert isinstance(from_callable(lambda t: 2)(0), float)


def test_make_schedule_takes_a_number_as_a_constant_rate() -> None:
    assert make_schedule(0.05)(123) == 0.05


def test_make_schedule_builds_a_named_schedule_and_fills_total_steps() -> None:
    s = make_schedule({"name": "cosine", "lr": 0.1}, total_steps=10)
    assert s(0) == pytest.approx(0.1)
    assert s(10) == pytest.approx(0.0)
    s2 = make_schedule({"name": "step", "lr": 1.0, "step_size": 2, "gamma": 0.1})
    assert s2(4) == pytest.approx(0.01)


def test_make_schedule_wraps_a_nested_spec_in_warmup() -> None:
    s = make_schedule(
        {
            "name": "warmup",
            "schedule": {"name": "cosine", "lr": 1.0},
            "warmup_steps": 2,
            "start_factor": 0.0,
        },
        total_steps=4,
    )
    assert s(0) == 0.0
    assert s(1) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)) / 2)
    assert s(4) == pytest.approx(0.0)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "bogus", "lr": 1}, "unknown learning-rate schedule 'bogus'; available: "),
        (
            {"name": "step", "lr": 1, "step_size": 2, "gama": 0.1},
            "schedule 'step' has no option 'gama'",
        ),
        ({"name": "cosine", "lr": 1}, "schedule 'cosine': "),
        ({"name": "step", "lr": 1, "step_size": 0}, "schedule 'step': step_size must be positive"),
        ("fast", "a learning-rate schedule is a number or a mapping"),
    ],
)
def test_make_schedule_errors_are_one_line(spec: object, message: str) -> None:
    with pytest.raises(UsageError) as info:
        make_schedule(spec)  # type: ignore[arg-type]
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(message)


def test_make_schedule_uses_schedules_offered_by_plugins(monkeypatch: pytest.MonkeyPatch) -> None:
    import d5core.lv2.schedules as schedules

    def fake_available() -> dict[str, object]:
        return {**schedules.BUILTIN_SCHEDULES, "halving": lambda lr: lambda t: lr / 2**t}

    monkeypatch.setattr(schedules, "_available", fake_available)
    assert make_schedule({"name": "halving", "lr": 1.0})(3) == 0.125
