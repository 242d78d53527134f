"""Network: loading, one-line errors for malformed models, editing, losses, saving."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from d5core.errors import UsageError
from d5core.lv1 import zoo
from d5core.onnx.network import D5_IR_VERSION, Network, ValueInfo


def _chain(nodes: list[onnx.NodeProto], opset: int = 17) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = D5_IR_VERSION
    return model


def _one_line_error(excinfo: pytest.ExceptionInfo[UsageError]) -> str:
    text = str(excinfo.value)
    assert "\n" not in text
    return text


# -- malformed models -------------------------------------------------------------------


def test_missing_file_is_a_one_line_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"nope\.onnx: no such model file") as e:
        Network.load(tmp_path / "nope.onnx")
    _one_line_error(e)


def test_truncated_file_is_a_one_line_usage_error(tmp_path: Path) -> None:
    data = zoo.build("lenet5").to_bytes()
    path = tmp_path / "half.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(UsageError, match=r"half\.onnx: not an ONNX model \(truncated") as e:
        Network.load(path)
    _one_line_error(e)


def test_random_bytes_are_a_one_line_usage_error(tmp_path: Path) -> None:
    path = tmp_path / "noise.onnx"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(UsageError, match=r"noise\.onnx: not an ONNX model") as e:
        Network.load(path)
    _one_line_error(e)


def test_unknown_opset_names_it_and_the_supported_one(tmp_path: Path) -> None:
    path = tmp_path / "future.onnx"
    path.write_bytes(_chain([helper.make_node("Relu", ["x"], ["y"])], opset=99).SerializeToString())
    newest = onnx.defs.onnx_opset_version()
    with pytest.raises(
        UsageError,
        match=rf"future\.onnx: uses opset 99 of the default domain; this onnx supports up to {newest}",
    ) as e:
        Network.load(path)
    _one_line_error(e)


def test_cycle_names_a_node_on_it() -> None:
    model = _chain(
        [
            helper.make_node("Relu", ["x"], ["a"], name="head"),
            helper.make_node("Add", ["a", "c"], ["b"], name="loop_add"),
            helper.make_node("Relu", ["b"], ["c"], name="loop_relu"),
            helper.make_node("Identity", ["b"], ["y"], name="tail"),
        ]
    )
    Network(model, check=False)  # taken as it is
    with pytest.raises(UsageError, match=r"cycle through node '(loop_add|loop_relu)'") as e:
        Network(model)
    _one_line_error(e)


def test_node_input_nobody_produces_names_node_and_input() -> None:
    model = _chain([helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")])
    with pytest.raises(
        UsageError, match=r"node 'adder' \(Add\) reads 'ghost', which no node, initializer"
    ) as e:
        Network(model)
    _one_line_error(e)


def test_checker_failure_gives_its_first_line() -> None:
    model = _chain([helper.make_node("Relu", ["x"], ["y"], bogus=3)])
    with pytest.raises(UsageError, match=r"fails onnx.checker: .*bogus") as e:
        Network(model)
    _one_line_error(e)


# -- reading ----------------------------------------------------------------------------


def test_properties_describe_the_model() -> None:
    net = zoo.build("lenet5")
    assert net.name == "lenet5" and net.opset == 17
    assert net.inputs == [ValueInfo("input", (None, 1, 28, 28), "float32")]
    assert net.trainable == list(net.parameters)
    params = net.parameters
    params["conv0.weight"][...] = 0  # copies: the model is untouched
    assert np.any(net.parameters["conv0.weight"] != 0)


def test_unnamed_nodes_get_deterministic_names_and_topological_order() -> None:
    model = _chain(
        [
            helper.make_node("Relu", ["a"], ["y"]),
            helper.make_node("Sigmoid", ["x"], ["a"]),
        ]
    )
    net = Network(model)
    assert [(n.op_type, n.name) for n in net.nodes] == [
        ("Sigmoid", "Sigmoid_0"),
        ("Relu", "Relu_1"),
    ]
    assert net.node("Relu_1").output[0] == "y"
    with pytest.raises(UsageError, match="no node named 'Tanh_0'"):
        net.node("Tanh_0")


def test_light_model_initializers_listed_as_inputs_are_not_feeds() -> None:
    net = Network(zoo.light_model("resnet50")[0])
    assert [i.name for i in net.inputs] == ["gpu_0/data_0"]
    assert net.outputs[0].shape == (1, 1000)


# -- editing ----------------------------------------------------------------------------


def test_node_edits_round_trip_through_save_and_load(tmp_path: Path) -> None:
    net = zoo.build("mlp", hidden=(8,))
    relu = next(n.name for n in net.nodes if n.op_type == "Relu")
    gemm_out = net.node(relu).input[0]
    net.replace_node(relu, helper.make_node("Tanh", [gemm_out], [net.node(relu).output[0]]))
    sig = net.add_node(helper.make_node("Sigmoid", ["output"], ["probs"]))
    net.add_output("probs")
    net.add_output(gemm_out)
    net.add_node(helper.make_node("Identity", ["input"], ["dead"], name="dead_end"), before=sig)
    net.remove_node("dead_end")
    net.add_input("scale", ["N", 10], "float32")
    net.add_node(helper.make_node("Mul", ["probs", "scale"], ["scaled"], name="scaler"))
    net.add_output("scaled")
    net.set_parameter("gemm0.bias", np.full(8, 0.5))
    net.validate()

    loaded = Network.load(net.save(tmp_path / "edited.onnx"))
    assert loaded.model.ir_version == D5_IR_VERSION
    assert [n.op_type for n in loaded.nodes] == ["Gemm", "Tanh", "Gemm", "Sigmoid", "Mul"]
    assert [o.name for o in loaded.outputs] == ["output", "probs", gemm_out, "scaled"]
    assert loaded.outputs[2] == ValueInfo(gemm_out, (None, 8), "float32")
    assert [i.name for i in loaded.inputs] == ["input", "scale"]
    np.testing.assert_array_equal(loaded.parameters["gemm0.bias"], np.full(8, 0.5, np.float32))
    assert loaded.parameters["gemm0.bias"].dtype == np.float32


def test_edit_errors_are_usage_errors() -> None:
    net = zoo.build("mlp")
    with pytest.raises(UsageError, match="no tensor 'nothing' to output"):
        net.add_output("nothing")
    with pytest.raises(UsageError, match="shape \\(10,\\), not \\(3,\\)"):
        net.set_parameter("gemm2.bias", np.zeros(3))
    with pytest.raises(UsageError, match="is computed by a node"):
        net.add_input("output", [1], "float32")
    with pytest.raises(UsageError, match="already has a node named 'gemm0'"):
        net.add_node(helper.make_node("Relu", ["input"], ["r"], name="gemm0"))


def test_save_lowers_ir_version_but_keeps_what_the_opset_needs(tmp_path: Path) -> None:
    model = _chain([helper.make_node("Relu", ["x"], ["y"])])
    model.ir_version = 14
    assert Network.load(Network(model).save(tmp_path / "a.onnx")).model.ir_version == 10
    model.ir_version = 8
    assert Network.load(Network(model).save(tmp_path / "b.onnx")).model.ir_version == 8


def test_copy_is_independent() -> None:
    net = zoo.build("mlp")
    twin = net.copy()
    twin.set_parameter("gemm0.bias", np.ones(128))
    assert np.all(net.parameters["gemm0.bias"] == 0)


def test_infer_shapes_returns_a_new_network() -> None:
    net = zoo.build("lenet5")
    shaped = net.infer_shapes(strict=True)
    assert len(shaped.model.graph.value_info) > 0
    assert len(net.model.graph.value_info) == 0


# -- losses -----------------------------------------------------------------------------


def test_mse_loss_uses_d5_domain_and_labels_of_output_shape(tmp_path: Path) -> None:
    net = zoo.build("mlp")
    loss = net.add_loss("output", kind="mse", labels="targets")
    assert net.inputs[-1] == ValueInfo("targets", (None, 10), "float32")
    assert net.outputs[-1] == ValueInfo(loss, (), "float32")
    node = net.nodes[-1]
    assert (node.op_type, node.domain) == ("MeanSquaredError", "ai.d5")
    assert ("ai.d5", 1) in [(o.domain, o.version) for o in net.model.opset_import]
    loaded = Network.load(net.save(tmp_path / "mse.onnx"))
    assert loaded.nodes[-1].op_type == "MeanSquaredError"


def test_add_loss_errors() -> None:
    net = zoo.build("mlp")
    with pytest.raises(UsageError, match="unknown loss kind 'hinge'"):
        net.add_loss("output", kind="hinge")
    with pytest.raises(UsageError, match="'input' is already a tensor"):
        net.add_loss("output", labels="input")
