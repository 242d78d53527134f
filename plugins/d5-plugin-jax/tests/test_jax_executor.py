"""The JAX executor against the numpy reference executor: outputs, gradients and running
statistics on small and zoo networks and the onnx package's light models (d5's kits),
ONNX semantics and corners, errors, prepared (compiled ahead) steps and parameters."""

from __future__ import annotations

from typing import Any, cast

import numpy as np
import onnx
import pytest
from d5_plugin_jax.executor import JaxExecutor
from onnx import TensorProto, helper

from d5core.api import UsageError
from d5core.onnx.network import Network
from d5core.testing.networks import cnn, feeds_for, mlp
from d5core.testing.onnx_corners import OnnxCornerTests
from d5core.testing.onnx_semantics import OnnxSemanticsTests, reference_executor
from d5core.testing.reference_agreement import ReferenceAgreementTests
from d5core.testing.transformer_graphs import typed_outputs


class TestJaxExecutorAgreesWithTheReference(ReferenceAgreementTests):
    """Outputs, gradients and running statistics on small, zoo and light models (a few
    of each here, to keep the lane short: ``d5 validate net`` covers the whole zoo)."""

    executor = JaxExecutor

    @pytest.mark.parametrize("name", ["lenet5", "vgg"])
    def test_zoo_matches_numpy_executor(self, name: str) -> None:
        super().test_zoo_matches_numpy_executor(name)

    @pytest.mark.parametrize("name", ["squeezenet", "shufflenet"])
    def test_light_models_match_expected_output(self, name: str) -> None:
        super().test_light_models_match_expected_output(name)


class TestJaxExecutorFollowsOnnx(OnnxSemanticsTests):
    executor = JaxExecutor


class TestJaxExecutorOnOnnxCorners(OnnxCornerTests):
    executor = JaxExecutor


def test_unsupported_operator_is_one_line_usage_error_naming_the_node() -> None:
    model = mlp(loss=False)
    model.graph.node[1].op_type = "Unique"
    name = Network(model).nodes[1].name
    with pytest.raises(UsageError, match=rf"operator 'Unique' \(node '{name}'\)") as info:
        JaxExecutor(model)
    assert "\n" not in str(info.value)


def _exporter_flatten(model: onnx.ModelProto) -> None:
    """Replace cnn's Reshape shape by Shape, Gather, Unsqueeze, Concat, as exporters do."""
    extra = [
        helper.make_node("Shape", ["p2"], ["p2_shape"]),
        helper.make_node("Gather", ["p2_shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "zero1"], ["batch1"]),
        helper.make_node("Concat", ["batch1", "minus1"], ["shape3"], axis=0),
    ]
    graph = model.graph
    for i, node in enumerate(extra):
        graph.node.insert(8 + i, node)
    graph.node[12].input[1] = "shape3"
    graph.initializer.extend(
        [
            helper.make_tensor("zero", TensorProto.INT64, [], [0]),
            helper.make_tensor("zero1", TensorProto.INT64, [1], [0]),
            helper.make_tensor("minus1", TensorProto.INT64, [1], [-1]),
        ]
    )


def test_a_shape_computed_from_shapes_and_constants_stays_static_under_jit() -> None:
    model = cnn()
    _exporter_flatten(model)
    feeds = feeds_for(model)
    want, want_grads = reference_executor(cnn()).inference_and_backprop(feeds, "loss")
    got, grads = JaxExecutor(model).inference_and_backprop(feeds, "loss")
    np.testing.assert_allclose(got["prob"], want["prob"], rtol=1e-5, atol=1e-6)
    for name, value in want_grads.items():
        np.testing.assert_allclose(grads[name], value, rtol=1e-4, atol=1e-6)


def test_a_fed_shape_is_part_of_what_is_compiled() -> None:
    model = cnn(loss=False)
    model.graph.input.append(helper.make_tensor_value_info("shape2", TensorProto.INT64, [2]))
    model.graph.node[8].input[1] = "shape2"
    feeds = feeds_for(cnn(loss=False))
    ex = JaxExecutor(model)
    want = JaxExecutor(cnn(loss=False)).inference(feeds)["prob"]
    got = ex.inference({**feeds, "shape2": np.array([2, -1], np.int64)})["prob"]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(UsageError, match=r"node '.*' \(Reshape\)") as info:
        ex.inference({**feeds, "shape2": np.array([3, -1], np.int64)})
    assert "\n" not in str(info.value)


def test_a_fed_shape_computed_on_is_part_of_what_is_compiled() -> None:
    """An integer feed that reaches a shape through other nodes is read while tracing."""
    model = cnn(loss=False)
    model.graph.input.append(helper.make_tensor_value_info("shape2", TensorProto.INT64, [2]))
    model.graph.node.insert(8, helper.make_node("Neg", ["shape2"], ["shape3"]))
    model.graph.node[9].input[1] = "shape3"
    feeds = feeds_for(cnn(loss=False))
    want = JaxExecutor(cnn(loss=False)).inference(feeds)["prob"]
    got = JaxExecutor(model).inference({**feeds, "shape2": np.array([-2, 1], np.int64)})["prob"]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_a_shape_computed_from_a_float_feed_is_refused_naming_the_node() -> None:
    model = cnn(loss=False)
    model.graph.input.append(helper.make_tensor_value_info("sizes", TensorProto.FLOAT, [2]))
    model.graph.node.insert(8, helper.make_node("Cast", ["sizes"], ["shape3"], to=7))
    model.graph.node[9].input[1] = "shape3"
    feeds = {**feeds_for(cnn(loss=False)), "sizes": np.array([2, -1], np.float32)}
    with pytest.raises(UsageError, match="must be known when the graph is traced") as info:
        JaxExecutor(model).inference(feeds)
    assert "(Reshape)" in str(info.value) and "\n" not in str(info.value)


def test_a_feed_of_another_dtype_than_declared_is_refused_naming_the_input() -> None:
    feeds = {"x": np.ones((4, 6), np.int32)}
    with pytest.raises(UsageError, match="input 'x' is int32; the network declares float32"):
        JaxExecutor(mlp(loss=False)).inference(feeds)


def test_operands_of_two_types_are_refused_naming_the_node() -> None:
    model = mlp(loss=False)
    w = next(i for i in model.graph.initializer if i.name == model.graph.node[0].input[1])
    w.data_type = TensorProto.DOUBLE
    w.double_data.extend(np.frombuffer(w.raw_data, np.float32).astype(np.float64).tolist())
    w.ClearField("raw_data")
    with pytest.raises(UsageError, match=r"node '.*' \(Gemm\): A is float32 and B is float64"):
        JaxExecutor(Network(model, check=False)).inference(feeds_for(mlp(loss=False)))


def test_missing_feed_is_named() -> None:
    with pytest.raises(UsageError, match="the network needs input 'x'; feeds have: none"):
        JaxExecutor(mlp(loss=False)).inference({})


def test_prepared_callables_compile_ahead_and_see_new_parameters() -> None:
    model = mlp()
    feeds = feeds_for(model)
    ex = JaxExecutor(model)
    run = ex.prepare_inference(feeds)
    step = ex.prepare_train_step(feeds, "loss")
    assert set(ex.details()["compile_s"]) == {"inference", "train_step"}
    assert all(seconds > 0 for seconds in ex.compile_seconds.values())
    out = cast(dict[str, Any], run())
    _, grads = cast(tuple[Any, tuple[Any, ...]], step())
    assert len(grads) == len(ex.grad_names) == 6
    params = ex.get_parameters()
    ex.set_parameters({"w3": params["w3"] * 2})
    np.testing.assert_allclose(ex.get_parameters()["w3"], params["w3"] * 2)
    again = cast(dict[str, Any], run())
    np.testing.assert_allclose(np.asarray(again["scores"]), ex.inference(feeds)["scores"])
    assert not np.allclose(np.asarray(out["scores"]), np.asarray(again["scores"]))


def test_parameters_round_trip_and_bad_names_or_shapes_are_refused() -> None:
    ex = JaxExecutor(cnn())
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


def test_a_new_static_parameter_value_compiles_the_graph_again() -> None:
    model = cnn(loss=False)
    feeds = feeds_for(model)
    ex = JaxExecutor(model)
    before = ex.inference(feeds)["prob"]
    ex.set_parameters({"shape": np.array([-1, 8], np.int64)})
    with pytest.raises(UsageError, match=r"\(Gemm\): A \(4, 8\)") as info:
        ex.inference(feeds)
    assert "\n" not in str(info.value) and before.shape[0] == 2


def test_unused_parameter_gets_a_zero_gradient() -> None:
    model = mlp()
    model.graph.initializer.append(helper.make_tensor("spare", TensorProto.FLOAT, [3], [1, 2, 3]))
    _, grads = JaxExecutor(model).inference_and_backprop(feeds_for(model), "loss")
    np.testing.assert_array_equal(grads["spare"], np.zeros(3, np.float32))


def test_loss_that_is_no_tensor_is_refused() -> None:
    with pytest.raises(UsageError, match="'nope' is not a tensor of the network"):
        JaxExecutor(mlp()).inference_and_backprop(feeds_for(mlp()), "nope")


def test_an_intermediate_tensor_can_be_the_loss() -> None:
    model = mlp()
    feeds = feeds_for(model)
    name = model.graph.node[-2].output[0]
    model.graph.node.append(helper.make_node("ReduceSum", [name], ["total"], keepdims=0))
    got = JaxExecutor(model).inference_and_backprop(feeds, "total")[1]
    model.graph.output.append(helper.make_tensor_value_info("total", TensorProto.FLOAT, []))
    want = reference_executor(model).inference_and_backprop(feeds, "total")[1]
    for key, value in want.items():
        np.testing.assert_allclose(got[key], value, rtol=1e-4, atol=1e-6)


def test_running_statistics_reach_the_parameters_only_when_applied() -> None:
    net = Network(cnn())
    feeds = feeds_for(net.model)
    ex = JaxExecutor(net)
    bn = next(n for n in net.nodes if n.op_type == "BatchNormalization")
    mean = bn.input[3]
    before = ex.get_parameters()[mean]
    ex.inference_and_backprop(feeds, "loss")
    np.testing.assert_array_equal(ex.get_parameters()[mean], before)
    ref = reference_executor(net)
    ref.inference_and_backprop(feeds, "loss")
    np.testing.assert_allclose(
        np.asarray(ex.running_stats[mean]),
        ref.running_stats[mean],  # type: ignore[attr-defined]
        rtol=1e-5,
        atol=1e-6,
    )


def test_float64_networks_stay_float64_and_float32_ones_float32() -> None:
    from d5core.testing.networks import float64_model

    model = mlp()
    feeds = feeds_for(model)
    assert JaxExecutor(model).inference(feeds)["scores"].dtype == np.float32
    feeds64 = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feeds.items()}
    out, grads = JaxExecutor(float64_model(model)).inference_and_backprop(feeds64, "loss")
    assert out["scores"].dtype == np.float64
    assert all(g.dtype == np.float64 for g in grads.values())


def test_without_x64_a_float64_network_is_refused_and_a_float32_one_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A JAX build or process without x64 mode (simulated): float64 is a one-line error."""
    from collections.abc import Iterator
    from contextlib import contextmanager

    import d5_plugin_jax.executor as executor_module

    from d5core.testing.networks import float64_model

    @contextmanager
    def refusing(enabled: bool = True, *, what: str = "float64") -> Iterator[None]:
        raise UsageError(f"{what} needs JAX's x64 mode, which this build/process does not allow")
        yield  # pragma: no cover

    monkeypatch.setattr(executor_module, "x64", refusing)
    model = mlp(loss=False)
    feeds = feeds_for(model)
    assert JaxExecutor(model).inference(feeds)["scores"].dtype == np.float32
    with pytest.raises(UsageError, match="needs JAX's x64 mode") as info:
        JaxExecutor(float64_model(model))
    assert "\n" not in str(info.value)


def test_large_values_folded_from_constants_are_arguments_and_computed_right() -> None:
    """squeezenet's weights come from ConstantOfShape nodes: folded once, passed to the
    compiled function (not embedded in it, where XLA computed its logits as 0 or inf),
    and its logits (about 9.5e9) agree with the reference."""
    from d5core.testing.networks import light

    model, feeds, expected = light("squeezenet")
    last = model.graph.node[-1]
    del model.graph.node[-1]
    del model.graph.output[:]
    model.graph.output.append(
        helper.make_tensor_value_info(last.input[0], TensorProto.FLOAT, list(expected.shape))
    )
    ex = JaxExecutor(model)
    assert ex.program.hoisted and set(ex.program.hoisted) <= set(ex.params)
    assert not set(ex.program.hoisted) & set(ex.get_parameters())
    want = reference_executor(model).inference(feeds)[last.input[0]]
    np.testing.assert_allclose(ex.inference(feeds)[last.input[0]], want, rtol=1e-5)


def _one_node(op_type: str, x: np.ndarray, outputs: list[str], **attrs: Any) -> onnx.ModelProto:
    node = helper.make_node(op_type, ["x"], outputs, name="n", **attrs)
    x_info = helper.make_tensor_value_info("x", helper.np_dtype_to_tensor_dtype(x.dtype), x.shape)
    graph = helper.make_graph(
        [node], "g", [x_info], [helper.make_empty_tensor_value_info(o) for o in outputs]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    return typed_outputs(model)


@pytest.mark.parametrize("storage_order", [0, 1])
@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_max_pool_indices_are_the_references(storage_order: int, ceil_mode: int) -> None:
    x = np.random.default_rng(2).standard_normal((2, 3, 7, 6)).astype(np.float32)
    x[0, 0, :2, :2] = 1.0  # a tie: the first maximum's index
    model = _one_node(
        "MaxPool", x, ["y", "i"], kernel_shape=[3, 2], strides=[2, 2], pads=[1, 0, 1, 1],
        storage_order=storage_order, ceil_mode=ceil_mode,
    )  # fmt: skip
    got = JaxExecutor(model).inference({"x": x})
    want = reference_executor(model).inference({"x": x})
    np.testing.assert_array_equal(got["i"], want["i"])
    np.testing.assert_array_equal(got["y"], want["y"])


@pytest.mark.parametrize(
    ("x", "attrs"),
    [
        (np.array([-20, -8.5, 7.5, 8.5, np.inf, np.nan], np.float32), {"to": 22}),
        (np.array([-1e4, 0.3, 500.0, np.inf], np.float32), {"to": 17}),
    ],
    ids=["int4_wraps", "float8_saturates"],
)
def test_casts_to_narrow_types_agree_with_the_reference(
    x: np.ndarray, attrs: dict[str, Any]
) -> None:
    model = _one_node("Cast", x, ["y"], **attrs)
    got = JaxExecutor(model).inference({"x": x})["y"]
    want = reference_executor(model).inference({"x": x})["y"]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize(
    ("op_type", "dtype", "identity"),
    [("ReduceMax", np.float32, -np.inf), ("ReduceMin", np.int32, np.iinfo(np.int32).max)],
)
def test_max_and_min_of_an_empty_set_are_their_identity(
    op_type: str, dtype: Any, identity: float
) -> None:
    """As ONNX (opset 18) says: the lowest value for ReduceMax, the highest for ReduceMin."""
    x = np.zeros((2, 0, 3), dtype)
    model = _one_node(op_type, x, ["y"], keepdims=1)
    got = JaxExecutor(model).inference({"x": x})["y"]
    assert got.dtype == dtype and got.shape == (1, 1, 1)
    assert got.item() == identity
