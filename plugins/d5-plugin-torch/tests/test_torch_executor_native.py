"""The torch executor's native training API: to_native, native_parameters, native_train_step."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from d5_plugin_torch.executor import TorchExecutor

from d5core.api import UsageError
from d5core.testing.executors import build_network, make_feeds, with_loss


@pytest.fixture()
def setup() -> tuple[TorchExecutor, str, dict[str, np.ndarray]]:
    net, loss = with_loss(build_network("mlp", input_shape=(8,), classes=3, hidden=[5], seed=0))
    return TorchExecutor(net), loss, make_feeds(net, 4, seed=1)


def test_native_parameters_are_the_live_trainable_tensors(setup) -> None:
    ex, _, _ = setup
    params = ex.native_parameters()
    assert list(params) == [n for n in ex._graph.trainable if n in params]
    name = next(iter(params))
    assert params[name] is ex._params[name] and params[name].requires_grad
    with torch.no_grad():
        params[name].add_(1.0)
    assert np.allclose(ex.get_parameters()[name], params[name].detach().numpy())


def test_native_train_step_matches_inference_and_backprop(setup) -> None:
    ex, loss, feeds = setup
    outs, grads = ex.inference_and_backprop(feeds, loss)
    n_outs, n_grads = ex.native_train_step(ex.to_native(feeds), loss)
    assert set(n_outs) == set(outs) and list(n_grads) == list(grads)
    for k, v in outs.items():
        assert isinstance(n_outs[k], torch.Tensor) and not n_outs[k].requires_grad
        np.testing.assert_array_equal(n_outs[k].numpy(), v)
    for k, g in grads.items():
        assert isinstance(n_grads[k], torch.Tensor)
        np.testing.assert_array_equal(n_grads[k].numpy(), g)
    # numpy feeds work too
    again, _ = ex.native_train_step(feeds, loss)
    assert torch.equal(again[loss], n_outs[loss])


def test_to_native_shares_memory_and_passes_tensors_through(setup) -> None:
    ex, _, feeds = setup
    tensors = ex.to_native(feeds)
    name = next(k for k in feeds if k != "labels")
    assert np.shares_memory(tensors[name].numpy(), feeds[name])
    assert ex.to_native(tensors)[name] is tensors[name]
    with pytest.raises(UsageError, match="needs input"):
        ex.to_native({})


def test_bound_torch_optimizer_steps_native_grads(setup) -> None:
    from d5_plugin_torch.optimizers import TorchSGD

    ex, loss, feeds = setup
    before = ex.get_parameters()
    opt = TorchSGD(lr=0.1)
    opt.bind(ex)
    _, grads = ex.native_train_step(ex.to_native(feeds), loss)
    expected = {k: before[k] - 0.1 * g.numpy() for k, g in grads.items()}
    opt.native_step(grads)
    after = ex.get_parameters()
    for k, v in expected.items():
        np.testing.assert_allclose(after[k], v, rtol=1e-6, atol=1e-7)


def test_the_executor_declares_the_native_training_protocol(setup) -> None:
    from d5_plugin_torch.optimizers import TorchSGD

    from d5core.api import CorrectCounter, NativeTraining, get_plugin_manager
    from d5core.testing.training import native_capable

    ex, _, _ = setup
    assert isinstance(ex, NativeTraining)
    assert isinstance(ex.native_correct_counter(), CorrectCounter)
    assert native_capable(ex, TorchSGD(lr=0.1))
    # the reference executor trains on numpy arrays only: no native path for it
    reference = get_plugin_manager().load("d5.frameworks", "numpy")(ex.network)
    assert not isinstance(reference, NativeTraining)
