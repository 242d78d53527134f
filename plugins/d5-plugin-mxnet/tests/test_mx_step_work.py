"""What a training step and a test pass ask of MXNet's engine, and that doing less keeps
every result: the correct predictions counted by the step's own graph, the optimizer's
aggregated updates, a new shape's first inference taken from its compiling pass."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from d5_plugin_mxnet._mx import mxnet
from d5_plugin_mxnet.executor import MXNetCorrectCounter, MXNetExecutor
from d5_plugin_mxnet.optimizers import MXSGD, MXMomentum

from d5core.testing.executors import build_network, make_feeds, with_loss
from d5core.testing.networks import cnn, feeds_for, mlp

mx = mxnet()


def _lenet() -> tuple[MXNetExecutor, str, str]:
    net, loss = with_loss(build_network("lenet5", seed=0))
    return MXNetExecutor(net), loss, net.outputs[0].name


def test_the_counter_adds_the_count_the_steps_own_graph_made() -> None:
    ex, loss, logits = _lenet()
    counter = ex.native_correct_counter()
    want = 0
    for seed in (1, 2):
        feeds = ex.to_native(make_feeds(ex.network, 8, seed=seed))
        outs, _ = ex.native_train_step(feeds, loss)
        assert ex.counted(outs[logits], feeds["labels"]) is not None
        counter.add(outs[logits], feeds["labels"])
        want += int((outs[logits].asnumpy().argmax(-1) == feeds["labels"].asnumpy()).sum())
    assert counter.take() == want and counter.take() == 0


def test_the_counter_counts_other_arrays_itself() -> None:
    ex, loss, logits = _lenet()
    counter = ex.native_correct_counter()
    feeds = make_feeds(ex.network, 8, seed=1)
    outs, _ = ex.native_train_step(ex.to_native(feeds), loss)
    labels = mx.nd.array(feeds["labels"], dtype="int64")  # not the step's own array
    assert ex.counted(outs[logits], labels) is None
    counter.add(outs[logits], labels)
    assert counter.take() == int((outs[logits].asnumpy().argmax(-1) == feeds["labels"]).sum())
    assert MXNetCorrectCounter().take() == 0


def test_a_counting_graph_returns_the_same_outputs_and_gradients() -> None:
    plain, loss, _ = _lenet()
    counting, _, _ = _lenet()
    counting.native_correct_counter()
    feeds = make_feeds(plain.network, 8, seed=3)
    outs, grads = plain.native_train_step(plain.to_native(feeds), loss)
    outs2, grads2 = counting.native_train_step(counting.to_native(feeds), loss)
    assert list(outs2) == list(outs)
    for name in outs:
        np.testing.assert_array_equal(outs2[name].asnumpy(), outs[name].asnumpy())
    for name in grads:
        np.testing.assert_array_equal(grads2[name].asnumpy(), grads[name].asnumpy())


def _weights(dtypes: list[str]) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {f"p{i}": rng.standard_normal((3, 2)).astype(t) for i, t in enumerate(dtypes)}


class _Live:
    name = "mxnet"

    def __init__(self, params: dict[str, np.ndarray]) -> None:
        self.params = {k: mx.nd.array(v, dtype=v.dtype) for k, v in params.items()}

    def native_parameters(self) -> dict[str, object]:
        return self.params


@pytest.mark.parametrize("make", [MXMomentum, MXSGD])
def test_aggregated_updates_equal_one_update_per_parameter(make: type) -> None:
    start = _weights(["float32"] * 5 + ["float64", "float32", "float64"])
    runs = []
    for aggregates in (True, False):
        opt, live = make(lr=0.1), _Live(start)
        opt.aggregates = aggregates
        opt.bind(live)
        rng = np.random.default_rng(1)
        for lr in (0.1, 0.1, 0.05, 0.0, 0.05):  # a new rate rescales; lr 0 keeps weights
            opt.lr = lr
            grads = {k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in start.items()}
            opt.native_step({k: mx.nd.array(g, dtype=g.dtype) for k, g in grads.items()})
        runs.append(({k: v.asnumpy() for k, v in live.params.items()}, opt.state_dict()))
    (weights, state), (weights2, state2) = runs
    for name in start:
        np.testing.assert_array_equal(weights[name], weights2[name])
    assert state["steps"] == state2["steps"]
    for name, slots in state["state"].items():
        for key, value in slots.items():
            np.testing.assert_array_equal(value, state2["state"][name][key])


@pytest.mark.parametrize("model", [mlp, cnn], ids=["mlp", "cnn"])
def test_a_new_shapes_first_inference_equals_its_compiled_runs(model: Callable[..., Any]) -> None:
    ex = MXNetExecutor(model())
    feeds = feeds_for(model())
    first, second = ex.inference(feeds), ex.inference(feeds)
    assert list(first) == list(second)
    for name, value in first.items():
        assert value.dtype == second[name].dtype and value.shape == second[name].shape
        np.testing.assert_array_equal(value, second[name])
