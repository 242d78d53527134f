"""The TensorFlow executor against the numpy reference executor: outputs and gradients
on small and zoo networks, the onnx package's light models, errors, prepared steps."""

from __future__ import annotations

import numpy as np
import pytest
from d5_plugin_numpy import executor as reference
from d5_plugin_tensorflow._tf import tensorflow
from d5_plugin_tensorflow.executor import TensorFlowExecutor
from onnx import TensorProto, helper

from d5core.api import UsageError
from d5core.onnx.network import Network
from d5core.testing.networks import cnn, feeds_for, mlp
from d5core.testing.reference_agreement import ReferenceAgreementTests

tf = tensorflow()


class TestTensorFlowExecutorAgreesWithTheReference(ReferenceAgreementTests):
    """Outputs, gradients and running statistics on small, zoo and light models."""

    executor = TensorFlowExecutor


def test_unsupported_operator_is_one_line_usage_error() -> None:
    model = mlp(loss=False)
    model.graph.node[1].op_type = "Unique"
    name = Network(model).nodes[1].name
    with pytest.raises(UsageError, match=rf"operator 'Unique' \(node '{name}'\)") as info:
        TensorFlowExecutor(model)
    assert "\n" not in str(info.value)


def test_a_shape_computed_from_fed_values_is_refused_naming_the_node() -> None:
    model = cnn(loss=False)
    model.graph.input.append(helper.make_tensor_value_info("shape2", TensorProto.INT64, [2]))
    model.graph.node.insert(8, helper.make_node("Identity", ["shape2"], ["shape3"]))
    model.graph.node[9].input[1] = "shape3"
    feeds = {**feeds_for(cnn(loss=False)), "shape2": np.array([2, -1], np.int64)}
    with pytest.raises(UsageError, match="must be known when the graph is built") as info:
        TensorFlowExecutor(model).inference(feeds)
    assert "(Reshape)" in str(info.value) and "\n" not in str(info.value)


def test_a_shape_computed_from_shapes_and_constants_is_folded() -> None:
    """As exporters write a flatten: Shape, Gather, Unsqueeze, Concat, then Reshape."""
    model = cnn(loss=False)
    extra = [
        helper.make_node("Shape", ["p2"], ["p2_shape"]),
        helper.make_node("Gather", ["p2_shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "zero1"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus1"], ["shape3"], axis=0),
    ]
    for i, node in enumerate(extra):
        model.graph.node.insert(8 + i, node)
    model.graph.node[12].input[1] = "shape3"
    model.graph.initializer.extend(
        [
            helper.make_tensor("zero", TensorProto.INT64, [], [0]),
            helper.make_tensor("zero1", TensorProto.INT64, [1], [0]),
            helper.make_tensor("minus1", TensorProto.INT64, [1], [-1]),
        ]
    )
    feeds = feeds_for(model)
    want = reference.NumpyExecutor(cnn(loss=False)).inference(feeds)["prob"]
    ex = TensorFlowExecutor(model)
    np.testing.assert_allclose(ex.inference(feeds)["prob"], want, rtol=1e-5, atol=1e-6)
    graph = ex._concrete(False, None, ex._ordered(ex._to_tensors(feeds)), ()).graph
    assert not [op for op in graph.get_operations() if op.type in ("Shape", "GatherV2")]


def test_a_fed_shape_is_read_when_the_function_is_traced() -> None:
    model = cnn(loss=False)
    model.graph.input.append(helper.make_tensor_value_info("shape2", TensorProto.INT64, [2]))
    model.graph.node[8].input[1] = "shape2"
    feeds = feeds_for(model)
    ex = TensorFlowExecutor(model)
    want = TensorFlowExecutor(cnn(loss=False)).inference(feeds)["prob"]
    got = ex.inference({**feeds, "shape2": np.array([2, -1], np.int64)})["prob"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(UsageError, match=r"node '.*' \(Reshape\): TensorFlow cannot build it"):
        ex.inference({**feeds, "shape2": np.array([3, -1], np.int64)})


def test_a_wrong_feed_dtype_names_the_node_that_reads_it() -> None:
    model = mlp(loss=False)
    feeds = {"x": np.ones((4, 6), np.float64)}
    with pytest.raises(UsageError, match=r"node '.*' \(Gemm\): TensorFlow cannot build it") as info:
        TensorFlowExecutor(model).inference(feeds)
    assert "\n" not in str(info.value)


def test_missing_feed_is_named() -> None:
    with pytest.raises(UsageError, match="the network needs input 'x'; feeds have: none"):
        TensorFlowExecutor(mlp(loss=False)).inference({})


def test_prepared_callables_run_the_function_and_parameters_update_in_place() -> None:
    model = mlp()
    feeds = feeds_for(model)
    ex = TensorFlowExecutor(model)
    run = ex.prepare_inference(feeds)
    step = ex.prepare_train_step(feeds, "loss")
    out = run()
    assert isinstance(out["scores"], tf.Tensor)
    _, grads = step()
    assert len(grads) == 6 and all(isinstance(g, tf.Tensor) for g in grads)
    params = ex.get_parameters()
    ex.set_parameters({"w3": params["w3"] * 2})
    np.testing.assert_allclose(ex.get_parameters()["w3"], params["w3"] * 2)
    np.testing.assert_allclose(run()["scores"].numpy(), ex.inference(feeds)["scores"], rtol=1e-6)
    assert not np.allclose(out["scores"].numpy(), run()["scores"].numpy())


def test_parameters_round_trip_and_bad_names_or_shapes_are_refused() -> None:
    ex = TensorFlowExecutor(cnn())
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


def test_unused_parameter_gets_a_zero_gradient() -> None:
    model = mlp()
    model.graph.initializer.append(helper.make_tensor("spare", TensorProto.FLOAT, [3], [1, 2, 3]))
    _, grads = TensorFlowExecutor(model).inference_and_backprop(feeds_for(model), "loss")
    np.testing.assert_array_equal(grads["spare"], np.zeros(3, np.float32))


def test_loss_that_is_no_tensor_is_refused() -> None:
    model = mlp()
    with pytest.raises(UsageError, match="'nope' is not a tensor of the network"):
        TensorFlowExecutor(model).inference_and_backprop(feeds_for(model), "nope")
