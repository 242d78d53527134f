"""The tinygemm executor on a two-node graph, compared with d5's reference executor."""

import subprocess
import sys
from pathlib import Path

import d5_tinygemm.plugin as plugin
import numpy as np
import pytest
from d5_tinygemm.executor import TinyGemmExecutor
from onnx import TensorProto, helper, numpy_helper

from d5core.api import UsageError, compare_outputs, get_plugin_manager


def two_layers(relu_last=False):
    """``x -> Gemm(W1, b1) -> h -> Gemm(W2, b2, transB=1) -> y``: two dense layers."""
    rng = np.random.default_rng(3)
    weights = {
        "W1": rng.standard_normal((6, 4)),
        "b1": rng.standard_normal(4),
        "W2": rng.standard_normal((2, 4)),  # stored transposed, as PyTorch exports it
        "b2": rng.standard_normal(2),
    }
    nodes = [
        helper.make_node("Gemm", ["x", "W1", "b1"], ["h"], name="dense1", alpha=0.5),
        helper.make_node("Gemm", ["h", "W2", "b2"], ["y"], name="dense2", transB=1),
    ]
    if relu_last:  # an operator the executor does not run
        nodes[1] = helper.make_node("Relu", ["h"], ["y"], name="relu")
    graph = helper.make_graph(
        nodes,
        "two_layers",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4 if relu_last else 2])],
        [numpy_helper.from_array(w.astype(np.float32), name) for name, w in weights.items()],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def test_the_two_node_graph_matches_the_reference_executor():
    model = two_layers()
    feeds = {"x": np.random.default_rng(0).standard_normal((5, 6)).astype(np.float32)}
    actual = TinyGemmExecutor(model).inference(feeds)
    expected = get_plugin_manager().load("d5.frameworks", "numpy")(model).inference(feeds)
    assert set(actual) == {"y"} and actual["y"].shape == (5, 2)
    (check,) = compare_outputs([actual["y"]], [expected["y"]], names=["y"])
    assert check.passed, check.detail


def test_the_prepared_callable_runs_the_plan_again_on_the_same_feeds():
    executor = TinyGemmExecutor(two_layers())
    feeds = {"x": np.ones((3, 6), np.float32)}
    run = executor.prepare_inference(feeds)
    first, second = run(), run()
    np.testing.assert_array_equal(first["y"], second["y"])
    np.testing.assert_array_equal(first["y"], executor.inference(feeds)["y"])


def test_new_parameters_change_the_output():
    executor = TinyGemmExecutor(two_layers())
    feeds = {"x": np.ones((1, 6), np.float32)}
    before = executor.inference(feeds)["y"]
    executor.set_parameters({"b2": np.array([10.0, -10.0], np.float32)})
    after = executor.inference(feeds)["y"]
    assert not np.allclose(before, after)


def test_a_graph_with_another_operator_is_refused_naming_the_node():
    with pytest.raises(UsageError, match=r"operator 'Relu' \(node 'relu'\)"):
        TinyGemmExecutor(two_layers(relu_last=True))


def test_d5_validate_net_passes_on_the_installed_executor(tmp_path: Path):
    """What a user runs: the executor found through its entry point, compared with the
    reference executor on the graph saved as a file."""
    import onnx

    path = tmp_path / "two_layers.onnx"
    onnx.save(two_layers(), path)
    d5 = Path(sys.executable).with_name("d5")
    result = subprocess.run(
        [
            str(d5),
            "validate",
            "net",
            str(path),
            "--executor",
            "tinygemm",
            "--db",
            str(tmp_path / "r.db"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_self_check_passes_and_the_environment_names_the_plugin(d5_plugin_manager):
    d5_plugin_manager.register(plugin)
    assert d5_plugin_manager.hook.d5_plugin_check() == [[]]
    (info,) = d5_plugin_manager.hook.d5_environment_info()
    assert info["d5-plugin-tinygemm"] == "0.1.0"
