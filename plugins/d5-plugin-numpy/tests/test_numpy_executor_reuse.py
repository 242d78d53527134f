"""What the executor tells its operators in a training pass (keep the forward's windows,
skip the data's gradient, leave out unread outputs) never changes a result."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from d5_plugin_numpy.executor import NumpyExecutor
from d5_plugin_numpy.ops.conv import Conv
from d5_plugin_numpy.ops.pool import MaxPool

from d5core.onnx.network import Network
from d5core.testing.executors import ZOO_MODELS
from d5core.testing.networks import cnn, feeds_for


def _plain(ex: NumpyExecutor) -> NumpyExecutor:
    """``ex`` with its operators told nothing: each recomputes what it needs."""
    for steps in ex._steps.values():
        for step in steps:
            step.unneeded, step.read = None, None
            step.ops.clear()
    return ex


def _lenet() -> tuple[Network, dict[str, np.ndarray]]:
    net = Network(ZOO_MODELS["lenet5"](batch=4))
    rng = np.random.default_rng(0)
    feeds = {v.name: rng.standard_normal((4, 1, 28, 28)).astype(np.float32) for v in net.inputs}
    return net, feeds


@pytest.mark.parametrize("build", ["cnn", "lenet5"])
def test_training_pass_equals_operators_that_recompute_everything(build: str) -> None:
    model: Network | onnx.ModelProto
    if build == "cnn":
        model, feeds, loss = cnn(), feeds_for(cnn()), "loss"
    else:
        model, feeds = _lenet()
        loss = model.outputs[0].name
    fast, plain = NumpyExecutor(model), _plain(NumpyExecutor(model))
    for _ in range(2):  # the second pass reuses the cached operators
        out_a, grads_a = fast.inference_and_backprop(feeds, loss)
        out_b, grads_b = plain.inference_and_backprop(feeds, loss)
        assert grads_a.keys() == grads_b.keys()
        for name in grads_a:
            np.testing.assert_array_equal(grads_a[name], grads_b[name], err_msg=name)
        for name in out_a:
            np.testing.assert_array_equal(out_a[name], out_b[name], err_msg=name)


def test_only_training_operators_keep_forward_results_and_skip_the_data_gradient() -> None:
    model = cnn()
    ex = NumpyExecutor(model)
    ex.inference_and_backprop(feeds_for(model), "loss")
    ex.inference(feeds_for(model))
    first = {True: ex._steps[True][0], False: ex._steps[False][0]}  # Conv on the data x
    (train_op,) = first[True].ops.values()
    (test_op,) = first[False].ops.values()
    assert isinstance(train_op, Conv) and isinstance(test_op, Conv)
    assert train_op.retain and train_op.unneeded == frozenset({0})
    assert not test_op.retain and test_op.unneeded == frozenset()


def _conv_case() -> tuple[Conv, list[np.ndarray], np.ndarray]:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32)
    dy = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    return Conv({"pads": [1, 1, 1, 1]}), [x, w, b], dy


def test_conv_skips_only_the_gradient_of_an_unneeded_input() -> None:
    plain, inputs, dy = _conv_case()
    y = plain.forward(inputs)
    want = plain.backward([dy], inputs, y)
    told = Conv({"pads": [1, 1, 1, 1]})
    told.retain, told.unneeded = True, frozenset({0})
    got = told.backward([dy], inputs, told.forward(inputs))
    assert got[0] is None
    for g, w in zip(got[1:], want[1:], strict=True):
        np.testing.assert_array_equal(g, w)


def test_kept_windows_serve_only_the_same_input_object() -> None:
    plain, inputs, dy = _conv_case()
    changed = [inputs[0].copy() * 2, *inputs[1:]]
    want = plain.backward([dy], changed, plain.forward(changed))
    told = Conv({"pads": [1, 1, 1, 1]})
    told.retain = True
    told.forward(inputs)  # keeps the windows of inputs[0], not of the changed copy
    got = told.backward([dy], changed, plain.forward(changed))
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


def test_maxpool_leaves_out_indices_only_when_unread() -> None:
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 4)).astype(np.float32)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    both = MaxPool(attrs).forward([x])
    told = MaxPool(attrs)
    told.read = frozenset({0})
    (y,) = told.forward([x])
    np.testing.assert_array_equal(y, both[0])
    told.read = frozenset({0, 1})
    np.testing.assert_array_equal(told.forward([x])[1], both[1])
    told.retain = True
    told.forward([x])
    dy = np.ones_like(y)
    np.testing.assert_array_equal(
        told.backward([dy], [x], [y])[0], MaxPool(attrs).backward([dy], [x], [y])[0]
    )
