"""The onnxruntime executor: results against onnx's reference, errors, and lightness."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from d5_plugin_onnxruntime import plugin
from d5_plugin_onnxruntime.executor import OnnxRuntimeExecutor, default_threads
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from d5core.api import UsageError
from d5core.onnx.network import Network

OPSET = [helper.make_opsetid("", 17)]


def _mlp() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.standard_normal((8, 16)).astype(np.float32), "W1"),
        numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b1"),
        numpy_helper.from_array(rng.standard_normal((16, 4)).astype(np.float32), "W2"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b2"),
    ]
    nodes = [
        helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="fc1"),
        helper.make_node("Relu", ["h"], ["a"], name="relu"),
        helper.make_node("Gemm", ["a", "W2", "b2"], ["logits"], name="fc2"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])],
        [
            helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 4]),
            helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["N", 4]),
        ],
        inits,
    )
    # IR 14 on purpose: newer than onnxruntime 1.31 reads.
    return helper.make_model(graph, opset_imports=OPSET, ir_version=14)


def _cnn() -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    inits = [
        numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "K"),
        numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "kb"),
        numpy_helper.from_array(rng.standard_normal((4 * 4 * 4, 5)).astype(np.float32), "W"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "K", "kb"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "W"], ["y"], name="fc"),
    ]
    graph = helper.make_graph(
        nodes,
        "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        inits,
    )
    return helper.make_model(graph, opset_imports=OPSET, ir_version=8)


def _reference(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(None, feeds), strict=True))


@pytest.mark.parametrize(
    ("build", "shape"), [(_mlp, (3, 8)), (_cnn, (2, 3, 8, 8))], ids=["mlp", "cnn"]
)
def test_inference_matches_onnx_reference(build, shape) -> None:
    model = build()
    x = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    got = OnnxRuntimeExecutor(model).inference({"x": x})
    want = _reference(model, {"x": x})
    assert set(got) == set(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5)


def test_model_with_newer_ir_runs_as_a_copy_and_is_left_alone() -> None:
    model = _mlp()
    executor = OnnxRuntimeExecutor(model)
    assert model.ir_version == 14
    assert executor.inference({"x": np.ones((1, 8), np.float32)})["probs"].shape == (1, 4)


def test_prepare_inference_binds_once_and_runs_the_session() -> None:
    model = _cnn()
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    executor = OnnxRuntimeExecutor(model)
    run = executor.prepare_inference({"x": x})
    x[:] = 0  # the binding holds its own copy
    binding = run()
    run()
    (out,) = binding.copy_outputs_to_cpu()  # type: ignore[attr-defined]
    want = _reference(
        model, {"x": np.random.default_rng(3).standard_normal(x.shape).astype(np.float32)}
    )
    np.testing.assert_allclose(out, want["y"], rtol=1e-5, atol=1e-5)


def test_threads_follow_omp_num_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert default_threads() == 1
    assert OnnxRuntimeExecutor(_cnn()).session_options.intra_op_num_threads == 1
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert default_threads() == len(os.sched_getaffinity(0))


def _light_inputs(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """The inputs onnx's backend test runner makes for ``data/light`` models
    (``Runner.generate_dummy_data(x, seed=0, random=False)``): for each graph input that
    is not an initializer, ``arange(n).reshape(shape) / n`` in float32, a missing
    dimension counting as 1."""
    inits = {i.name for i in model.graph.initializer}
    feeds = {}
    for x in model.graph.input:
        if x.name in inits:
            continue
        assert x.type.tensor_type.elem_type == TensorProto.FLOAT
        shape = tuple(
            d.dim_value if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim
        )
        n = np.prod(shape)
        feeds[x.name] = (np.arange(n).reshape(shape) / n).astype(np.float32)
    return feeds


def test_light_resnet50_matches_onnx_expected_output() -> None:
    light = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    model = onnx.load(str(light / "light_resnet50.onnx"))
    expected = numpy_helper.to_array(onnx.load_tensor(str(light / "light_resnet50_output_0.pb")))
    outputs = OnnxRuntimeExecutor(model).inference(_light_inputs(model))
    (got,) = outputs.values()
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-4)


def test_backprop_is_refused_in_one_line() -> None:
    executor = OnnxRuntimeExecutor(_mlp())
    assert executor.trains is False
    with pytest.raises(UsageError) as info:
        executor.inference_and_backprop({"x": np.ones((1, 8), np.float32)}, "probs")
    message = str(info.value)
    assert "\n" not in message
    assert "onnxruntime executor runs inference only" in message


def test_unknown_operator_is_named_with_its_node() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("Relu", ["x"], ["h"], name="ok"),
            helper.make_node("NoSuchOp", ["h"], ["y"], name="bad_node"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=OPSET, ir_version=8)
    with pytest.raises(UsageError) as info:
        # Unchecked, so that onnxruntime (not d5's checker) meets the operator.
        OnnxRuntimeExecutor(Network(model, check=False))
    message = str(info.value)
    assert "\n" not in message
    assert "cannot run operator NoSuchOp" in message
    assert "'bad_node'" in message


def test_missing_and_unknown_inputs_are_named() -> None:
    executor = OnnxRuntimeExecutor(_cnn())
    with pytest.raises(UsageError, match=r"missing input\(s\) x; the model takes x"):
        executor.inference({})
    with pytest.raises(UsageError, match=r"unknown input\(s\) z"):
        executor.inference({"x": np.zeros((2, 3, 8, 8), np.float32), "z": np.zeros(1)})


def test_wrong_dtype_is_one_line() -> None:
    with pytest.raises(UsageError) as info:
        OnnxRuntimeExecutor(_cnn()).inference({"x": np.zeros((2, 3, 8, 8), np.float64)})
    assert "\n" not in str(info.value)
    assert "tensor(double)" in str(info.value)


def test_unknown_device_is_refused() -> None:
    with pytest.raises(UsageError, match="runs on 'cpu' or 'cuda"):
        OnnxRuntimeExecutor(_cnn(), device="tpu")


def test_plugin_check_and_environment_info() -> None:
    assert plugin.d5_plugin_check() == []
    info = plugin.d5_environment_info()
    assert "CPUExecutionProvider" in info["providers"]
    assert info["graph_optimization_level"] == "ORT_ENABLE_ALL"
    assert info["intra_op_num_threads"] >= 1


def test_importing_the_plugin_module_does_not_import_onnxruntime() -> None:
    code = (
        "import sys, d5_plugin_onnxruntime.plugin as p; "
        "assert p.d5_plugin_api; "
        "print('onnxruntime' in sys.modules, 'onnx' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.split()
    assert out == ["False", "False"]
