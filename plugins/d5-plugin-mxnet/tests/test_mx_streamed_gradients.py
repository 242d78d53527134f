"""``inference_and_backprop_streamed``: the gradients of a training step handed over as
MXNet's backward pass finishes them, each read back when first asked for, so that the
numpy path's optimizer overlaps the rest of the pass (issue 30)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from d5_plugin_mxnet.executor import GradientsAsRead, MXNetExecutor

from d5core.api import get_plugin_manager
from d5core.testing.executors import build_network, make_feeds, with_loss
from d5core.testing.training import digits_trainer

pytest.importorskip("mxnet")


def _lenet() -> tuple[Any, str]:
    return with_loss(build_network("lenet5", seed=0))


def test_streamed_gradients_equal_the_eager_ones_and_come_last_layer_first() -> None:
    net, loss = _lenet()
    feeds = make_feeds(net, 8, seed=0)
    eager_outputs, eager = MXNetExecutor(net).inference_and_backprop(feeds, loss)
    outputs, streamed = MXNetExecutor(net).inference_and_backprop_streamed(feeds, loss)
    assert isinstance(streamed, GradientsAsRead)
    assert list(eager) == list(net.trainable)
    # the layer the forward pass reads last first (a node's weight before its bias)
    assert list(streamed) == [
        *("gemm2.weight", "gemm2.bias", "gemm1.weight", "gemm1.bias"),
        *("gemm0.weight", "gemm0.bias", "conv1.weight", "conv1.bias"),
        *("conv0.weight", "conv0.bias"),
    ]
    assert len(streamed) == len(eager)
    for name in eager:
        np.testing.assert_array_equal(streamed[name], eager[name])
        assert streamed[name].dtype == eager[name].dtype
    for name in eager_outputs:
        np.testing.assert_array_equal(outputs[name], eager_outputs[name])


def test_a_gradient_read_after_the_next_step_is_still_its_own_steps() -> None:
    net, loss = _lenet()
    first, second = make_feeds(net, 8, seed=0), make_feeds(net, 8, seed=1)
    want = MXNetExecutor(net).inference_and_backprop(first, loss)[1]
    executor = MXNetExecutor(net)
    _, streamed = executor.inference_and_backprop_streamed(first, loss)
    _, later = executor.inference_and_backprop(second, loss)  # overwrites the buffers
    for name in want:
        np.testing.assert_array_equal(streamed[name], want[name])
    assert not all(np.array_equal(later[name], want[name]) for name in want)


def test_a_name_without_a_trainable_parameter_is_a_key_error() -> None:
    net, loss = _lenet()
    _, streamed = MXNetExecutor(net).inference_and_backprop_streamed(
        make_feeds(net, 4, seed=0), loss
    )
    with pytest.raises(KeyError):
        streamed["no such parameter"]
    assert "no such parameter" not in streamed


def test_the_numpy_path_trains_the_same_from_streamed_and_from_eager_gradients() -> None:
    def trainer() -> Any:
        optimizer = get_plugin_manager().load("d5.optimizers", "momentum")(lr=0.1)
        return digits_trainer("mxnet", optimizer, steps=6, native=False)

    streaming, eager = trainer(), trainer()
    calls: list[str] = []
    real = streaming.executor.inference_and_backprop_streamed

    def spy(feeds: Any, loss: str) -> Any:
        calls.append(loss)
        return real(feeds, loss)

    streaming.executor.inference_and_backprop_streamed = spy
    eager.executor.inference_and_backprop_streamed = None  # the trainer's plain call
    streamed_result, eager_result = streaming.run(), eager.run()
    assert len(calls) == 6
    assert streamed_result.optimizer_path == eager_result.optimizer_path == "numpy"
    assert streamed_result.losses == eager_result.losses
    after, before = streaming.executor.get_parameters(), eager.executor.get_parameters()
    for name in before:
        np.testing.assert_array_equal(after[name], before[name])
