"""Out-of-range ``mx-*`` optimizer options are refused in one line (issue 28, section 3):
a beta or alpha of 1 or more made the bias correction the square root of a negative
number, and ``d5 run`` ended in ``internal error: ValueError: math domain error``."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from d5core.api import UsageError

pytest.importorskip("mxnet")

RECIPE = Path(__file__).resolve().parents[3] / "recipes" / "digits-mlp.toml"


def _optimizer(name: str):
    from d5_plugin_mxnet import optimizers

    return {"mx-adam": optimizers.MXAdam, "mx-rmsprop": optimizers.MXRMSprop}[name]


@pytest.mark.parametrize(
    ("name", "option", "value"),
    [
        ("mx-adam", "beta2", 1.5),
        ("mx-adam", "beta2", 1.0 + 1e-9),
        ("mx-adam", "beta1", -0.1),
        ("mx-adam", "beta2", math.nan),
        ("mx-rmsprop", "alpha", 2.0),
        ("mx-rmsprop", "alpha", -0.5),
    ],
)
def test_an_mx_optimizer_option_out_of_range_is_refused_before_any_step(
    name: str, option: str, value: float
) -> None:
    with pytest.raises(UsageError, match=f"{name}.*{option} must be in") as caught:
        _optimizer(name)(lr=0.01, **{option: value})
    assert "\n" not in str(caught.value)


def test_mx_adam_at_the_edge_of_its_range_still_steps() -> None:
    opt = _optimizer("mx-adam")(lr=0.01, beta1=0.0, beta2=0.999999)
    params = {"w": np.ones((2, 2))}
    opt.step(params, {"w": np.full((2, 2), 0.5)})
    assert np.all(np.isfinite(params["w"])) and np.all(params["w"] < 1)


def test_d5_run_with_an_mx_adam_beta_above_1_exits_2_in_one_line(d5_cli, tmp_path) -> None:
    result = d5_cli(
        "run", str(RECIPE), "--set", "executor=mxnet", "--set", "optimizer=mx-adam",
        "--set", "optimizer_options={beta2=1.5}", "--db", str(tmp_path / "r.sqlite"),
    )  # fmt: skip
    assert result.exit_code == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "beta2" in lines[0] and "math domain" not in lines[0], lines
