"""Gradient modifiers: weight decay, clipping, and recipe specs."""

from __future__ import annotations

import numpy as np
import pytest

from d5core.errors import UsageError
from d5core.lv2.modifiers import (
    clip_by_global_norm,
    clip_by_value,
    make_modifiers,
    weight_decay,
)


def _grads() -> dict[str, np.ndarray]:
    return {"w": np.array([3.0, 0.0]), "b": np.array([[4.0]])}


def test_weight_decay_adds_decay_times_the_parameter() -> None:
    params = {"w": np.array([1.0, -2.0]), "b": np.array([[10.0]])}
    out = weight_decay(_grads(), params, 0.1)
    np.testing.assert_allclose(out["w"], [3.1, -0.2])
    np.testing.assert_allclose(out["b"], [[5.0]])


def test_clip_by_global_norm_keeps_direction_and_caps_the_norm() -> None:
    grads = _grads()  # global norm 5
    out, norm = clip_by_global_norm(grads, 1.0)
    assert norm == pytest.approx(5.0)
    total = np.sqrt(sum(np.sum(g**2) for g in out.values()))
    assert total == pytest.approx(1.0)
    np.testing.assert_allclose(out["w"], grads["w"] / 5)
    np.testing.assert_allclose(out["b"], grads["b"] / 5)
    np.testing.assert_array_equal(grads["w"], [3.0, 0.0])  # inputs untouched


def test_clip_by_global_norm_leaves_small_gradients_alone() -> None:
    out, norm = clip_by_global_norm(_grads(), 10.0)
    assert norm == pytest.approx(5.0)
    np.testing.assert_array_equal(out["w"], [3.0, 0.0])


def test_clip_by_global_norm_keeps_float32() -> None:
    out, _ = clip_by_global_norm({"w": np.full(4, 10.0, dtype=np.float32)}, 1.0)
    assert out["w"].dtype == np.float32


def test_clip_by_value_clips_each_element() -> None:
    out = clip_by_value({"w": np.array([-5.0, 0.5, 5.0])}, 1.0)
    np.testing.assert_array_equal(out["w"], [-1.0, 0.5, 1.0])


def test_make_modifiers_applies_the_list_in_order_and_records_the_norm() -> None:
    mods = make_modifiers(
        [{"name": "weight_decay", "decay": 1.0}, {"name": "clip_norm", "max_norm": 1.0}]
    )
    params = {"w": np.array([1.0, 0.0]), "b": np.array([[0.0]])}
    out = mods(params, _grads())  # after decay: w=[4,0], b=[[4]] -> norm sqrt(32)
    assert mods.last_norm == pytest.approx(np.sqrt(32))
    np.testing.assert_allclose(out["w"], np.array([4.0, 0.0]) / np.sqrt(32))
    v = make_modifiers([{"name": "clip_value", "limit": 2.0}])(params, _grads())
    np.testing.assert_array_equal(v["w"], [2.0, 0.0])


def test_make_modifiers_of_nothing_returns_gradients_unchanged() -> None:
    g = _grads()
    out = make_modifiers([])({}, g)
    np.testing.assert_array_equal(out["w"], g["w"])


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            [{"name": "dropout"}],
            "unknown gradient modifier 'dropout'; available: weight_decay, clip_norm, clip_value",
        ),
        (
            [{"name": "clip_norm", "max": 1}],
            "modifier 'clip_norm' has no option 'max'; its option: max_norm",
        ),
        ([{"name": "clip_norm"}], "modifier 'clip_norm' needs option 'max_norm'"),
        (
            [{"name": "clip_value", "limit": -1}],
            "modifier 'clip_value': limit must be positive, not -1",
        ),
        (
            [{"name": "weight_decay", "decay": "a"}],
            "modifier 'weight_decay': decay must be a finite number, not 'a'",
        ),
        ({"name": "clip_norm"}, "gradient modifiers are a list of mappings"),
        (["clip_norm"], "gradient modifier #1 must be a mapping, not 'clip_norm'"),
    ],
)
def test_make_modifiers_errors_are_one_line(spec: object, message: str) -> None:
    with pytest.raises(UsageError) as info:
        make_modifiers(spec)  # type: ignore[arg-type]
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(message)
