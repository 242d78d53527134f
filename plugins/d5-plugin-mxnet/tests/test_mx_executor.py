"""The MXNet executor against the numpy reference executor: outputs, gradients (float64)
and running statistics on small, zoo and light models (d5's shared kit), and the
executor's own contract: errors in one line, prepared callables that only enqueue work,
parameters in place, running statistics applied only when asked, the native path."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import pytest
from d5_plugin_mxnet._mx import mxnet
from d5_plugin_mxnet.executor import MXNetExecutor
from d5_plugin_numpy import executor as reference
from onnx import TensorProto, helper

from d5core.api import NativeTraining, UsageError
from d5core.onnx.network import Network
from d5core.testing.executors import build_network, make_feeds, with_loss
from d5core.testing.networks import cnn, feeds_for, mlp
from d5core.testing.reference_agreement import ReferenceAgreementTests

mx = mxnet()


class TestMXNetExecutorAgreesWithTheReference(ReferenceAgreementTests):
    """Outputs, gradients and running statistics on small, zoo and light models."""

    executor = MXNetExecutor


def test_the_executor_is_asynchronous_and_offers_the_native_path() -> None:
    ex = MXNetExecutor(mlp())
    assert MXNetExecutor.asynchronous is True and MXNetExecutor.name == "mxnet"
    assert isinstance(ex, NativeTraining)


def test_unsupported_operator_is_one_line_usage_error() -> None:
    model = mlp(loss=False)
    model.graph.node[1].op_type = "Unique"
    name = Network(model).nodes[1].name
    with pytest.raises(UsageError, match=rf"operator 'Unique' \(node '{name}'\)") as info:
        MXNetExecutor(model)
    assert "\n" not in str(info.value)


def test_a_fed_reshape_shape_is_read_as_a_value_and_compiles_a_graph_per_value() -> None:
    model = cnn(loss=False)
    model.graph.input.append(helper.make_tensor_value_info("shape2", TensorProto.INT64, [2]))
    model.graph.node[8].input[1] = "shape2"
    ex = MXNetExecutor(model)
    feeds = {**feeds_for(cnn(loss=False)), "shape2": np.array([2, -1], np.int64)}
    expected = reference.NumpyExecutor(model).inference(feeds)
    got = ex.inference(feeds)
    for name, value in expected.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-5)
    with pytest.raises(UsageError, match=r"\(Reshape\): cannot reshape"):
        ex.inference({**feeds, "shape2": np.array([3, -1], np.int64)})


def test_a_shape_mxnet_refuses_names_the_node_in_one_line() -> None:
    model = mlp(loss=False)
    feeds = {"x": np.ones((4, 5), np.float32)}  # the first Gemm wants 6 columns
    with pytest.raises(UsageError, match=r"node '.*' \(Gemm\): MXNet failed") as info:
        MXNetExecutor(model).inference(feeds)
    assert "\n" not in str(info.value)


def test_missing_feed_is_named() -> None:
    with pytest.raises(UsageError, match="the network needs input 'x'; feeds have: none"):
        MXNetExecutor(mlp(loss=False)).inference({})


def test_loss_that_is_no_tensor_is_refused() -> None:
    model = mlp()
    with pytest.raises(UsageError, match="'nope' is not a tensor of the network"):
        MXNetExecutor(model).inference_and_backprop(feeds_for(model), "nope")


def test_prepared_callables_return_ndarrays_and_see_parameters_set_in_place() -> None:
    model = mlp()
    feeds = feeds_for(model)
    ex = MXNetExecutor(model)
    run: Any = ex.prepare_inference(feeds)
    step = ex.prepare_train_step(feeds, "loss")
    out = run()
    assert isinstance(out["scores"], mx.nd.NDArray)
    first = out["scores"].asnumpy().copy()
    _, grads = cast(Any, step())
    assert len(grads) == 6 and all(isinstance(g, mx.nd.NDArray) for g in grads)
    params = ex.get_parameters()
    ex.set_parameters({"w3": params["w3"] * 2})
    np.testing.assert_allclose(ex.get_parameters()["w3"], params["w3"] * 2)
    np.testing.assert_allclose(run()["scores"].asnumpy(), ex.inference(feeds)["scores"], rtol=1e-6)
    assert not np.allclose(first, run()["scores"].asnumpy())


def test_parameters_round_trip_and_bad_names_or_shapes_are_refused() -> None:
    ex = MXNetExecutor(cnn())
    params = ex.get_parameters()
    assert set(params) == set(Network(cnn()).parameters)
    assert params["shape"].dtype == np.int64
    changed = {k: v + 1 for k, v in params.items() if k != "shape"}
    ex.set_parameters(changed)
    for k, v in ex.get_parameters().items():
        np.testing.assert_array_equal(v, changed.get(k, params[k]))
    with pytest.raises(UsageError, match="no parameter 'nope'"):
        ex.set_parameters({"nope": np.zeros(1)})
    with pytest.raises(UsageError, match=r"parameter 'cb' has shape \(4,\), not \(5,\)"):
        ex.set_parameters({"cb": np.zeros(5, np.float32)})


def test_a_static_parameter_set_later_changes_the_graph() -> None:
    model = cnn(loss=False)
    feeds = feeds_for(model)
    ex = MXNetExecutor(model)
    before = ex.inference(feeds)["prob"]
    ex.set_parameters({"shape": np.array([-1, 16], np.int64)})  # the same, written otherwise
    np.testing.assert_allclose(ex.inference(feeds)["prob"], before, rtol=1e-6)
    ex.set_parameters({"shape": np.array([1, -1], np.int64)})  # batch 2 cannot be one row
    with pytest.raises(UsageError, match=r"\(Gemm\)"):
        ex.inference(feeds)


def test_unused_parameter_gets_a_zero_gradient() -> None:
    model = mlp()
    model.graph.initializer.append(helper.make_tensor("spare", TensorProto.FLOAT, [3], [1, 2, 3]))
    _, grads = MXNetExecutor(model).inference_and_backprop(feeds_for(model), "loss")
    np.testing.assert_array_equal(grads["spare"], np.zeros(3, np.float32))


def test_running_statistics_reach_the_parameters_only_when_applied() -> None:
    model = cnn()
    feeds = feeds_for(model)
    ex, ref = MXNetExecutor(model), reference.NumpyExecutor(model)
    start = ex.get_parameters()
    for _ in range(2):  # the same step twice: the statistics start from the parameters
        ex.inference_and_backprop(feeds, "loss")
    ref.inference_and_backprop(feeds, "loss")
    assert set(ex.running_stats) == {"mu", "var"}
    for name in ("mu", "var"):
        np.testing.assert_array_equal(ex.get_parameters()[name], start[name])
        np.testing.assert_allclose(
            ex.running_stats[name].numpy(), ref.running_stats[name], rtol=1e-5, atol=1e-6
        )
    ex.apply_running_stats()
    np.testing.assert_allclose(
        ex.get_parameters()["mu"], ref.running_stats["mu"], rtol=1e-5, atol=1e-6
    )
    assert not np.allclose(ex.get_parameters()["mu"], start["mu"])


def test_native_train_step_gives_the_gradients_inference_and_backprop_gives() -> None:
    net, loss = with_loss(build_network("lenet5", seed=0))
    feeds = make_feeds(net, 4, seed=1)
    ex = MXNetExecutor(net)
    _, want = ex.inference_and_backprop(feeds, loss)
    outs, grads = ex.native_train_step(ex.to_native(feeds), loss)
    assert list(grads) == list(ex.native_parameters()) == net.trainable
    for name, grad in grads.items():
        assert isinstance(grad, mx.nd.NDArray)
        np.testing.assert_allclose(grad.asnumpy(), want[name], rtol=1e-6, atol=1e-7)
    counter = ex.native_correct_counter()
    logits = outs[net.outputs[0].name]
    counter.add(logits, ex.to_native(feeds)["labels"])
    hits = int((logits.asnumpy().argmax(-1) == feeds["labels"]).sum())
    assert counter.take() == hits and counter.take() == 0


def test_a_bool_mask_and_a_scalar_loss_come_back_in_onnx_types_and_shapes() -> None:
    model = mlp()
    out = MXNetExecutor(model).inference(feeds_for(model))
    assert out["loss"].shape == () and out["loss"].dtype == np.float32


def test_an_unknown_device_is_refused() -> None:
    with pytest.raises(UsageError, match="unknown device 'tpu'"):
        MXNetExecutor(mlp(), device="tpu")
