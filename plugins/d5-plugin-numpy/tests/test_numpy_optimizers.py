"""Reference optimizers against their closed forms on f(p) = 0.5 p^T A p - b^T p."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from d5_plugin_numpy.optimizers import (
    SGD,
    Adagrad,
    Adam,
    AdamW,
    Momentum,
    Nesterov,
    RMSprop,
)

from d5core.api import Optimizer, UsageError, get_plugin_manager
from d5core.testing.training import weight_decay

A = np.array([[3.0, 0.5], [0.5, 1.0]])
B = np.array([1.0, -2.0])
P0 = np.array([0.7, -0.3])


def grad(p: np.ndarray) -> np.ndarray:
    return A @ p - B


def run(opt: Optimizer, steps: int) -> np.ndarray:
    params = {"p": P0.copy()}
    for _ in range(steps):
        opt.step(params, {"p": grad(params["p"])})
    return params["p"]


# Hand-written closed forms: each returns the parameter after ``steps`` steps.
def sgd_ref(steps: int, lr: float = 0.1) -> np.ndarray:
    p = P0.copy()
    for _ in range(steps):
        p = p - lr * (A @ p - B)
    return p


def momentum_ref(steps: int, lr: float = 0.1, m: float = 0.9, nesterov: bool = False) -> np.ndarray:
    p, v = P0.copy(), np.zeros(2)
    for _ in range(steps):
        g = A @ p - B
        v = m * v + g
        p = p - lr * (g + m * v if nesterov else v)
    return p


def adam_ref(steps: int, lr: float = 0.01, wd: float = 0.0) -> np.ndarray:
    b1, b2, eps = 0.9, 0.999, 1e-8
    p, m, s = P0.copy(), np.zeros(2), np.zeros(2)
    for t in range(1, steps + 1):
        g = A @ p - B
        p = p * (1 - lr * wd)
        m = b1 * m + (1 - b1) * g
        s = b2 * s + (1 - b2) * g**2
        p = p - lr * (m / (1 - b1**t)) / (np.sqrt(s / (1 - b2**t)) + eps)
    return p


def adagrad_ref(steps: int, lr: float = 0.1, init: float = 0.0) -> np.ndarray:
    p, acc = P0.copy(), np.full(2, init)
    for _ in range(steps):
        g = A @ p - B
        acc = acc + g**2
        p = p - lr * g / (np.sqrt(acc) + 1e-10)
    return p


def rmsprop_ref(
    steps: int, lr: float = 0.01, mom: float = 0.0, centered: bool = False
) -> np.ndarray:
    alpha, eps = 0.99, 1e-8
    p, s, a, buf = P0.copy(), np.zeros(2), np.zeros(2), np.zeros(2)
    for _ in range(steps):
        g = A @ p - B
        s = alpha * s + (1 - alpha) * g**2
        if centered:
            a = alpha * a + (1 - alpha) * g
            d = np.sqrt(s - a**2) + eps
        else:
            d = np.sqrt(s) + eps
        if mom:
            buf = mom * buf + g / d
            p = p - lr * buf
        else:
            p = p - lr * g / d
    return p


CASES: list[tuple[str, Callable[[], Optimizer], Callable[[int], np.ndarray]]] = [
    ("sgd", lambda: SGD(lr=0.1), sgd_ref),
    ("momentum", lambda: Momentum(lr=0.1), momentum_ref),
    ("nesterov", lambda: Nesterov(lr=0.1), lambda n: momentum_ref(n, nesterov=True)),
    ("adam", lambda: Adam(lr=0.01), adam_ref),
    ("adamw", lambda: AdamW(lr=0.01, weight_decay=0.1), lambda n: adam_ref(n, wd=0.1)),
    ("adagrad", lambda: Adagrad(lr=0.1), adagrad_ref),
    (
        "adagrad-init",
        lambda: Adagrad(lr=0.1, initial_accumulator=0.5),
        lambda n: adagrad_ref(n, init=0.5),
    ),
    ("rmsprop", lambda: RMSprop(lr=0.01), rmsprop_ref),
    (
        "rmsprop-centered-momentum",
        lambda: RMSprop(lr=0.01, momentum=0.5, centered=True),
        lambda n: rmsprop_ref(n, mom=0.5, centered=True),
    ),
]


@pytest.mark.parametrize(("label", "make", "ref"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("steps", [1, 4])
def test_optimizer_matches_its_closed_form_on_a_quadratic(
    label: str, make: Callable[[], Optimizer], ref: Callable[[int], np.ndarray], steps: int
) -> None:
    np.testing.assert_allclose(run(make(), steps), ref(steps), rtol=1e-12, atol=1e-14)


def test_sgd_one_step_is_p_minus_lr_times_gradient() -> None:
    expected = P0 - 0.1 * (A @ P0 - B)
    np.testing.assert_allclose(run(SGD(lr=0.1), 1), expected, rtol=1e-15)


def test_adam_first_step_moves_each_coordinate_by_lr_against_the_gradient_sign() -> None:
    g = grad(P0)
    np.testing.assert_allclose(run(Adam(lr=0.01), 1), P0 - 0.01 * np.sign(g), rtol=1e-6)


def test_adamw_decoupled_decay_differs_from_adam_with_l2() -> None:
    params_w = {"p": P0.copy()}
    params_l2 = {"p": P0.copy()}
    adamw, adam = AdamW(lr=0.01, weight_decay=0.1), Adam(lr=0.01)
    for _ in range(3):
        adamw.step(params_w, {"p": grad(params_w["p"])})
        g = weight_decay({"p": grad(params_l2["p"])}, params_l2, 0.1)
        adam.step(params_l2, g)
    assert not np.allclose(params_w["p"], params_l2["p"], rtol=1e-6)
    np.testing.assert_allclose(params_w["p"], adam_ref(3, wd=0.1), rtol=1e-12)


def test_updates_are_in_place_and_state_keeps_the_parameter_dtype() -> None:
    p = np.ones(3, dtype=np.float32)
    opt = Adam()
    opt.step({"w": p}, {"w": np.full(3, 0.5)})
    assert p.dtype == np.float32 and np.all(p < 1)
    assert {a.dtype for a in opt.state["w"].values()} == {np.dtype(np.float32)}


def test_lr_set_between_steps_is_used_by_the_next_step() -> None:
    opt, p = SGD(lr=1.0), np.zeros(1)
    opt.lr = 0.5
    opt.step({"w": p}, {"w": np.ones(1)})
    assert p[0] == -0.5


def test_state_dict_round_trip_resumes_exactly_and_reset_forgets() -> None:
    a = Adam(lr=0.01)
    pa = {"p": P0.copy()}
    for _ in range(2):
        a.step(pa, {"p": grad(pa["p"])})
    b = Adam(lr=0.5)
    b.load_state_dict(a.state_dict())
    pb = {"p": pa["p"].copy()}
    a.step(pa, {"p": grad(pa["p"])})
    b.step(pb, {"p": grad(pb["p"])})
    np.testing.assert_array_equal(pa["p"], pb["p"])
    np.testing.assert_allclose(pa["p"], adam_ref(3), rtol=1e-12)
    a.reset()
    assert a.state == {} and a.steps == {}


def test_defaults_follow_the_documented_values() -> None:
    assert Adam().lr == 1e-3 and AdamW().hyper["weight_decay"] == 0.01
    assert Momentum().hyper == {"momentum": 0.9}
    assert Adagrad().hyper == {"eps": 1e-10, "initial_accumulator": 0.0}
    assert RMSprop().lr == 0.01 and RMSprop().hyper["alpha"] == 0.99


def test_unknown_option_is_a_one_line_usage_error() -> None:
    with pytest.raises(
        UsageError,
        match=r"^optimizer 'adam' has no option 'beta'; its options: lr, beta1, beta2, eps$",
    ):
        Adam(beta=0.9)


def test_gradient_without_parameter_is_a_one_line_usage_error() -> None:
    with pytest.raises(UsageError, match=r"^optimizer 'sgd': gradient 'x' has no parameter$"):
        SGD().step({}, {"x": np.ones(1)})


@pytest.mark.parametrize(
    "name", ["sgd", "momentum", "nesterov", "adam", "adamw", "adagrad", "rmsprop"]
)
def test_every_optimizer_is_registered_under_its_name(name: str) -> None:
    cls = get_plugin_manager().load("d5.optimizers", name)
    assert issubclass(cls, Optimizer) and cls.name == name and cls.native is None
