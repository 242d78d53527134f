"""A new batch size of a graph already compiled is compiled as a ``CachedOp`` handles a
new shape: its symbol is built from MXNet's shape and type inference, without running
the graph imperatively, and computes exactly what a fresh executor computes at that
shape. What MXNet or a node refuses at the new shape is still named as before."""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
import pytest
from compile_checks import assert_derived_as_imperative, assert_same
from d5_plugin_mxnet.executor import MXNetExecutor
from onnx import TensorProto, helper

from d5core.api import UsageError
from d5core.testing.executors import build_network, make_feeds, with_loss


def _trained(name: str) -> tuple[Any, str]:
    return with_loss(build_network(name, seed=0))


@pytest.mark.parametrize("model", ["mlp", "lenet5", "resnet20"])
def test_a_second_batch_size_compiles_without_an_imperative_pass(
    model: str, imperative_passes: list[int]
) -> None:
    net, loss = _trained(model)
    ex = MXNetExecutor(net)
    ex.inference_and_backprop(make_feeds(net, 4, seed=0), loss)
    assert not imperative_passes  # the first signature too is derived
    for batch in (6, 3):
        feeds = make_feeds(net, batch, seed=batch)
        before = len(imperative_passes)
        outs, grads = ex.inference_and_backprop(feeds, loss)
        tested = ex.inference(feeds)
        assert len(imperative_passes) == before  # neither mode ran the graph imperatively
        fresh = MXNetExecutor(net)
        want_outs, want_grads = fresh.inference_and_backprop(feeds, loss)
        assert_same(outs, want_outs)
        assert_same(grads, want_grads)
        assert_same(tested, MXNetExecutor(net).inference(feeds))


def test_the_test_batch_after_training_batches_is_derived_with_identical_outputs(
    imperative_passes: list[int],
) -> None:
    net, loss = _trained("lenet5")
    ex = MXNetExecutor(net)
    ex.native_correct_counter()
    ex.native_train_step(ex.to_native(make_feeds(net, 32, seed=1)), loss)
    feeds = make_feeds(net, 256, seed=2)
    first, second = ex.inference(feeds), ex.inference(feeds)
    assert not imperative_passes  # the first signature too is derived
    assert_same(first, second)
    assert_same(first, MXNetExecutor(net).inference(feeds))


def test_a_smaller_last_batch_keeps_the_steps_own_count(imperative_passes: list[int]) -> None:
    net, loss = _trained("mlp")
    ex = MXNetExecutor(net)
    counter = ex.native_correct_counter()
    logits = net.outputs[0].name
    want = 0
    for batch in (8, 5):
        feeds = ex.to_native(make_feeds(net, batch, seed=batch))
        outs, _ = ex.native_train_step(feeds, loss)
        assert ex.counted(outs[logits], feeds["labels"]) is not None
        counter.add(outs[logits], feeds["labels"])
        want += int((outs[logits].asnumpy().argmax(-1) == feeds["labels"].asnumpy()).sum())
    assert not imperative_passes  # the first signature too is derived
    assert counter.take() == want


@pytest.mark.parametrize("model", ["vgg", "lstm", "bert"])
def test_a_derived_symbol_is_the_one_an_imperative_pass_builds(model: str) -> None:
    """vgg at batch 4, then 6: its 4x4 feature maps make the first guess wrong (every 4
    becomes a 6), which MXNet refuses; the symbol is then built node by node."""
    net, loss = _trained(model)
    ex = MXNetExecutor(net)
    ex.inference_and_backprop(make_feeds(net, 4, seed=0), loss)
    arrays = ex.to_native(make_feeds(net, 6, seed=1))
    heads = ex._heads(True, loss)
    known = {**ex._known}
    derived = ex._derived(arrays, True, heads, known)
    assert derived is not None
    assert_derived_as_imperative(ex, arrays, loss, heads, derived, known)


def test_an_lstm_runs_a_new_batch_size_with_its_own_zero_state() -> None:
    net, loss = _trained("lstm")
    ex = MXNetExecutor(net)
    ex.inference_and_backprop(make_feeds(net, 4, seed=0), loss)
    feeds = make_feeds(net, 6, seed=1)
    outs, grads = ex.inference_and_backprop(feeds, loss)
    want_outs, want_grads = MXNetExecutor(net).inference_and_backprop(feeds, loss)
    assert_same(outs, want_outs)
    assert_same(grads, want_grads)


def _shape_read_reshape() -> onnx.ModelProto:
    """``x`` (N, 4, 2) reshaped to (N, 8) through Shape, Gather and Concat, as exporters
    write a flatten: the target is folded from the batch size."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"], name="shape"),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], name="gather", axis=0),
        helper.make_node("Concat", ["batch", "rest"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"], name="reshape"),
        helper.make_node("Relu", ["flat"], ["y"], name="relu"),
    ]
    inits = [
        helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
        helper.make_tensor("rest", TensorProto.INT64, [1], [8]),
    ]
    graph = helper.make_graph(
        nodes,
        "shape_read",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_target_folded_from_the_batch_size_is_folded_anew(
    imperative_passes: list[int],
) -> None:
    ex = MXNetExecutor(_shape_read_reshape())
    rng = np.random.default_rng(0)
    ex.inference({"x": rng.standard_normal((2, 4, 2)).astype(np.float32)})
    x = rng.standard_normal((5, 4, 2)).astype(np.float32)
    got = ex.inference({"x": x})
    assert not imperative_passes  # the first signature too is derived
    np.testing.assert_array_equal(got["y"], np.maximum(x.reshape(5, 8), 0))


def _fixed_reshape() -> onnx.ModelProto:
    """``x`` (N, 4) reshaped to a fixed (2, 4): only a batch of 2 fits."""
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "target"], ["y"], name="fixed")],
        "fixed",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])],
        [helper.make_tensor("target", TensorProto.INT64, [2], [2, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def test_a_batch_size_a_node_refuses_is_refused_as_a_fresh_executor_refuses_it() -> None:
    ex = MXNetExecutor(_fixed_reshape())
    ex.inference({"x": np.ones((2, 4), np.float32)})
    x = np.ones((3, 4), np.float32)
    with pytest.raises(UsageError) as fresh:
        MXNetExecutor(_fixed_reshape()).inference({"x": x})
    with pytest.raises(UsageError) as compiled:
        ex.inference({"x": x})
    assert str(compiled.value) == str(fresh.value)
    assert "fixed" in str(compiled.value)
