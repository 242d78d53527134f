"""The TensorFlow executor's native training API: to_native, native_parameters,
native_train_step, apply_running_stats and the protocol the trainer checks."""

from __future__ import annotations

import numpy as np
import pytest
from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.executor import TensorFlowExecutor

from d5core.api import UsageError
from d5core.testing.executors import build_network, make_feeds, with_loss

tf = tensorflow()


@pytest.fixture()
def setup() -> tuple[TensorFlowExecutor, str, dict[str, np.ndarray]]:
    net, loss = with_loss(build_network("mlp", input_shape=(8,), classes=3, hidden=[5], seed=0))
    return TensorFlowExecutor(net), loss, make_feeds(net, 4, seed=1)


def test_native_parameters_are_the_live_trainable_variables(setup) -> None:
    ex, _, _ = setup
    params = ex.native_parameters()
    assert list(params) == list(ex._graph.trainable)
    name = next(iter(params))
    assert isinstance(params[name], tf.Variable) and params[name].trainable
    assert params[name] is ex.native_parameters()[name]
    params[name].assign_add(tf.ones_like(params[name]))
    np.testing.assert_array_equal(ex.get_parameters()[name], params[name].numpy())


def test_native_train_step_matches_inference_and_backprop(setup) -> None:
    ex, loss, feeds = setup
    outs, grads = ex.inference_and_backprop(feeds, loss)
    n_outs, n_grads = ex.native_train_step(ex.to_native(feeds), loss)
    assert set(n_outs) == set(outs) and list(n_grads) == list(grads)
    for k, v in outs.items():
        assert isinstance(n_outs[k], tf.Tensor)
        np.testing.assert_array_equal(n_outs[k].numpy(), v)
    for k, g in grads.items():
        assert isinstance(n_grads[k], tf.Tensor)
        np.testing.assert_array_equal(n_grads[k].numpy(), g)
    again, _ = ex.native_train_step(feeds, loss)  # numpy feeds work too
    np.testing.assert_array_equal(again[loss].numpy(), n_outs[loss].numpy())


def test_native_step_with_batchnorm_matches_and_running_stats_apply() -> None:
    net, loss = with_loss(build_network("resnet20", input_shape=(3, 8, 8), classes=4, seed=0))
    feeds = make_feeds(net, 2, seed=2)
    ex = TensorFlowExecutor(net)
    _, grads = ex.inference_and_backprop(feeds, loss)
    stats = {k: v.numpy() for k, v in ex.running_stats.items()}
    assert stats, "resnet20 has BatchNormalization: its running statistics are kept"
    _, n_grads = ex.native_train_step(ex.to_native(feeds), loss)
    layouts = ex.native_layouts()
    assert layouts, "resnet20's convolution weights are kept in TensorFlow's layout"
    for k, g in grads.items():
        want = layouts[k].to_native(g) if k in layouts else g
        np.testing.assert_allclose(n_grads[k].numpy(), want, rtol=1e-6, atol=1e-7)
    before = ex.get_parameters()
    for k, v in stats.items():
        assert not np.allclose(before[k], v), k
    ex.apply_running_stats()
    after = ex.get_parameters()
    for k, v in stats.items():
        np.testing.assert_allclose(after[k], v, rtol=1e-6)


def test_to_native_converts_arrays_and_passes_tensors_through(setup) -> None:
    ex, _, feeds = setup
    tensors = ex.to_native(feeds)
    name = next(k for k in feeds if k != "labels")
    assert isinstance(tensors[name], tf.Tensor)
    np.testing.assert_array_equal(tensors[name].numpy(), feeds[name])
    assert ex.to_native(tensors)[name] is tensors[name]
    with pytest.raises(UsageError, match="needs input"):
        ex.to_native({})


def test_assigning_native_parameters_steps_the_network(setup) -> None:
    """What a bound ``tf-*`` optimizer does: assign to the variables from the gradients."""
    ex, loss, feeds = setup
    before = ex.get_parameters()
    _, grads = ex.native_train_step(ex.to_native(feeds), loss)
    params = ex.native_parameters()
    for name, g in grads.items():
        params[name].assign_sub(0.1 * g)
    after = ex.get_parameters()
    for name, g in grads.items():
        np.testing.assert_allclose(after[name], before[name] - 0.1 * g.numpy(), rtol=1e-6)
    loss_before = ex.inference_and_backprop(feeds, loss)[0][loss]
    for _ in range(5):
        _, grads = ex.native_train_step(ex.to_native(feeds), loss)
        for name, g in grads.items():
            params[name].assign_sub(0.1 * g)
    assert ex.inference_and_backprop(feeds, loss)[0][loss] < loss_before


def test_the_executor_declares_the_native_training_protocol(setup) -> None:
    from d5core.api import CorrectCounter, NativeTraining, Optimizer
    from d5core.testing.training import native_capable

    class NativeSGD(Optimizer):
        name = "sgd-for-test"
        native = "tensorflow"

        def bind(self, executor: object) -> None:
            self.params = executor.native_parameters()  # type: ignore[attr-defined]

        def native_step(self, native_grads: object) -> None:
            for k, g in native_grads.items():  # type: ignore[attr-defined]
                self.params[k].assign_sub(self.lr * g)

    ex, _, _ = setup
    assert ex.name == "tensorflow"
    assert isinstance(ex, NativeTraining)
    assert isinstance(ex.native_correct_counter(), CorrectCounter)
    assert native_capable(ex, NativeSGD(lr=0.1))
