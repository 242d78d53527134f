"""The zoo's sequence models (bert, gpt, vit, lstm) on every executor in the environment.

The reference executor's gradients are checked against central differences of its own
forward in float64; every other executor's outputs (float32) and gradients (float64,
when it trains) against the reference's: every executor of this environment runs every
operator of these models. Then ``d5 validate net`` and ``d5 bench net`` on the models
at their default sizes.
"""

from __future__ import annotations

import numpy as np
import pytest

from d5core.cli.output import read_json
from d5core.lv1 import zoo_sequence
from d5core.lv1.runner import executor_by_name, make_feeds, with_loss
from d5core.onnx.network import Network
from d5core.testing.sequence_forward import TINY
from d5core.validate.gradcheck import GRADCHECK_TOLERANCE

MODELS = ("bert", "gpt", "vit", "lstm")
OTHERS = ("torch", "onnxruntime", "tensorflow")


def _tiny(name: str) -> Network:
    return Network(getattr(zoo_sequence, name)(**TINY[name]))


def _feeds(net: Network, batch: int = 3) -> dict[str, np.ndarray]:
    feeds = make_feeds(net, batch, seed=0)
    if "input_ids" in feeds:
        feeds["input_ids"][:, -1] = 0  # id 0 pads: bert masks it
    return feeds


@pytest.mark.parametrize("model", MODELS)
def test_reference_gradients_match_central_differences(model: str) -> None:
    trained, loss = with_loss(_tiny(model).as_float64())
    feeds = _feeds(trained, batch=2)
    if "input" in feeds:
        feeds["input"] = feeds["input"].astype(np.float64)
    reference = executor_by_name("numpy", trained)
    _, grads = reference.inference_and_backprop(feeds, loss)
    params = reference.get_parameters()
    assert sorted(grads) == sorted(trained.trainable)
    rng = np.random.default_rng(1)
    eps = 1e-6
    for name in sorted(params):
        direction = rng.standard_normal(params[name].shape)
        direction /= np.linalg.norm(direction)
        losses = []
        for sign in (1.0, -1.0):
            reference.set_parameters({name: params[name] + sign * eps * direction})
            losses.append(float(reference.inference(feeds)[loss]))
        reference.set_parameters({name: params[name]})
        estimate = (losses[0] - losses[1]) / (2 * eps)
        claimed = float(np.sum(grads[name] * direction))
        tol = GRADCHECK_TOLERANCE
        assert abs(estimate - claimed) <= tol.atol + tol.rtol * abs(estimate), (
            name,
            estimate,
            claimed,
        )
    assert any(np.abs(g).max() > 1e-3 for g in grads.values())


@pytest.mark.parametrize("executor", OTHERS)
@pytest.mark.parametrize("model", MODELS)
def test_executor_agrees_with_the_reference(model: str, executor: str) -> None:
    network = _tiny(model)
    feeds = _feeds(network)
    expected = executor_by_name("numpy", network).inference(feeds)["output"]
    actual = executor_by_name(executor, network).inference(feeds)["output"]
    np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-5)
    candidate = executor_by_name(executor, network)
    if not candidate.trains:
        return
    trained, loss = with_loss(network.as_float64())
    train_feeds = _feeds(trained)
    if "input" in train_feeds:
        train_feeds["input"] = train_feeds["input"].astype(np.float64)
    ref_out, ref_grads = executor_by_name("numpy", trained).inference_and_backprop(
        train_feeds, loss
    )
    out, grads = executor_by_name(executor, trained).inference_and_backprop(train_feeds, loss)
    np.testing.assert_allclose(out[loss], ref_out[loss], rtol=1e-9)
    assert sorted(grads) == sorted(ref_grads)
    for name, expected_grad in ref_grads.items():
        np.testing.assert_allclose(grads[name], expected_grad, rtol=1e-7, atol=1e-10, err_msg=name)


@pytest.fixture(autouse=True)
def _private_db(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))


@pytest.mark.parametrize("model", MODELS)
def test_validate_net_cli_on_the_default_model(model: str, d5_cli) -> None:  # type: ignore[no-untyped-def]
    result = d5_cli("validate", "net", model, "--executor", "torch", "--json")
    report = read_json(result.stdout)
    assert result.exit_code == 0, report["failures"]
    assert report["against"] == "numpy"
    assert report["outputs"] and all(o["passed"] for o in report["outputs"])
    assert len(report["gradients"]) == len(zoo_sequence.__dict__[model]().graph.initializer)


@pytest.mark.parametrize(
    ("model", "executor", "mode"),
    [
        ("bert", "onnxruntime", "inference"),
        ("gpt", "numpy", "train-step"),  # the loss over every position, labels (N, seq)
    ],
)
def test_bench_net_makes_its_own_feeds(model: str, executor: str, mode: str, d5_cli) -> None:  # type: ignore[no-untyped-def]
    result = d5_cli(
        "bench", "net", model, "--executors", executor, "--batch", "2", "--mode", mode,
        "--processes", "1", "--time-budget", "0.1", "--min-samples", "6",
        "--max-samples", "6", "--warmup", "1", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    (row,) = read_json(result.stdout, "bench net")
    assert (row["executor"], row["mode"]) == (executor, mode)
    assert row["median"] > 0 and row["throughput"] == pytest.approx(2 / row["median"])
