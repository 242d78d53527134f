"""``d5 validate net`` and ``d5 bench net`` end to end on the three executors."""

from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from d5core.cli.output import read_json

ZOO = ["mlp", "lenet5", "resnet20", "vgg"]


@pytest.fixture(autouse=True)
def _private_db(tmp_path, monkeypatch):
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))


@pytest.mark.parametrize("executor", ["torch", "onnxruntime"])
@pytest.mark.parametrize("model", ZOO)
def test_every_zoo_model_matches_the_reference(model, executor, d5_cli):
    result = d5_cli("validate", "net", model, "--executor", executor, "--json")
    report = read_json(result.stdout)
    assert result.exit_code == 0, report["failures"]
    assert report["outputs"]
    if executor == "torch":
        assert report["gradients"], "torch trains: its gradients must be compared"
        assert all(g["passed"] for g in report["gradients"])
    else:
        assert report["gradients"] == []
        assert "inference only" in report["notes"][0]


def test_train_step_is_refused_for_an_inference_only_executor(d5_cli):
    result = d5_cli("bench", "net", "mlp", "--executors", "onnxruntime", "--mode", "train-step")
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "onnxruntime" in result.stderr and "inference only" in result.stderr


def test_bench_net_reports_throughput_and_a_breakdown(d5_cli):
    result = d5_cli(
        "bench", "net", "lenet5", "--executors", "numpy,torch,onnxruntime", "--batch", "8",
        "--time-budget", "0.3", "--breakdown", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    rows = read_json(result.stdout)
    assert [r["executor"] for r in rows] == ["numpy", "torch", "onnxruntime"]
    for row in rows:
        assert row["ci_low"] <= row["median"] <= row["ci_high"] and row["n"] >= 6
        assert row["throughput"] == pytest.approx(8 / row["median"])
    torch_layers = rows[1]["breakdown"]
    assert {"Conv", "Gemm"} <= {layer["op_type"] for layer in torch_layers}
    assert sum(layer["share"] for layer in torch_layers) == pytest.approx(1.0)


def test_bench_net_train_step_on_training_executors(d5_cli):
    result = d5_cli(
        "bench", "net", "mlp", "--executors", "numpy,torch", "--mode", "train-step",
        "--batch", "16", "--time-budget", "0.3", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert {r["mode"] for r in read_json(result.stdout)} == {"train-step"}


def _write(tmp_path, name, model_or_bytes):
    path = tmp_path / name
    data = model_or_bytes if isinstance(model_or_bytes, bytes) else model_or_bytes.SerializeToString()
    path.write_bytes(data)
    return str(path)


def _relu_model(opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _cyclic_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    nodes = [
        helper.make_node("Add", ["x", "b"], ["a"], name="first"),
        helper.make_node("Relu", ["a"], ["b"], name="second"),
        helper.make_node("Identity", ["b"], ["y"], name="out"),
    ]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]))
    model.ir_version = 10
    return model


def _missing_input_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    node = helper.make_node("Add", ["x", "nowhere"], ["y"], name="adder")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y]))
    model.ir_version = 10
    return model


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("truncated", "relu.onnx"),
        ("opset", "99"),
        ("cycle", "cycle"),
        ("missing", "nowhere"),
    ],
)
def test_malformed_onnx_is_a_one_line_error(kind, message, tmp_path, d5_cli):
    if kind == "truncated":
        data = _relu_model().SerializeToString()
        path = _write(tmp_path, "relu.onnx", data[: len(data) // 2])
    elif kind == "opset":
        path = _write(tmp_path, "relu.onnx", _relu_model(opset=99))
    elif kind == "cycle":
        path = _write(tmp_path, "cycle.onnx", _cyclic_model())
    else:
        path = _write(tmp_path, "missing.onnx", _missing_input_model())
    result = d5_cli("bench", "net", path, "--executors", "numpy")
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("d5: error: ")
    assert result.stderr.count("\n") == 1
    assert message in result.stderr


def test_an_onnx_file_path_runs_like_a_zoo_model(tmp_path, d5_cli):
    path = _write(tmp_path, "relu.onnx", _relu_model())
    result = d5_cli("validate", "net", path, "--executor", "torch", "--json")
    assert result.exit_code == 0, result.stderr
    assert onnx.load(path).graph.node[0].op_type == "Relu"
