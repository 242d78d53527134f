"""d5's regression loss (``MeanSquaredError``, domain ``ai.d5``) on the torch executor: a
regression recipe's network trains there with the reference's loss and gradients."""

from __future__ import annotations

import numpy as np
from d5_plugin_torch.executor import TorchExecutor

from d5core.testing.executors import build_network
from d5core.testing.onnx_semantics import reference_executor


def _regression_network() -> tuple[object, str, dict[str, np.ndarray]]:
    net = build_network("mlp", input_shape=(6,), classes=2, hidden=[5], seed=3)
    loss = net.add_loss(net.outputs[0].name, kind="mse", labels="labels")
    rng = np.random.default_rng(0)
    feeds = {
        net.inputs[0].name: rng.standard_normal((4, 6)).astype(np.float32),
        "labels": rng.standard_normal((4, 2)).astype(np.float32),
    }
    return net, loss, feeds


def test_the_torch_executor_takes_d5s_mean_squared_error_and_no_other_d5_operator() -> None:
    assert TorchExecutor.supports("MeanSquaredError", "ai.d5")
    assert not TorchExecutor.supports("Relu", "ai.d5")
    assert not TorchExecutor.supports("MeanSquaredError", "com.example")


def test_mean_squared_error_loss_and_gradients_agree_with_the_reference() -> None:
    net, loss, feeds = _regression_network()
    outs, grads = TorchExecutor(net).inference_and_backprop(feeds, loss)
    want_outs, want_grads = reference_executor(net).inference_and_backprop(feeds, loss)
    np.testing.assert_allclose(outs[loss], want_outs[loss], rtol=1e-5)
    assert float(outs[loss]) > 0
    assert set(grads) == set(want_grads)
    for name, grad in grads.items():
        np.testing.assert_allclose(grad, want_grads[name], rtol=1e-4, atol=1e-6)
