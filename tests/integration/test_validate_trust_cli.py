"""``d5 validate op`` end to end on what used to pass falsely: an operator without
backward, and torch's Dropout in training mode (which must drop what the reference drops).
Also the legacy ``broadcast``/``axis`` attributes of opset < 7 arithmetic, in every
executor: implemented by numpy and torch alike, refused by onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from d5_plugin_numpy.executor import NumpyExecutor
from d5_plugin_onnxruntime.executor import OnnxRuntimeExecutor
from d5_plugin_torch.executor import TorchExecutor
from onnx import TensorProto, helper

from d5core.cli.output import read_json
from d5core.errors import UsageError
from d5core.lv0.runner import backend_by_name, build_operator, problem_for
from d5core.lv0.workloads.problems import DEFAULT_PROBLEMS


@pytest.fixture(autouse=True)
def _private_db(tmp_path, monkeypatch):
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))


PLUGIN = """
import numpy as np
from d5core.hookspecs import hookimpl
from d5core.levels.operators import Operator
d5_plugin_api = ">=1.0"

class Double(Operator):
    op_type = "Double"
    def forward(self, inputs):
        return [2 * inputs[0]]

class RowArgmax(Operator):
    op_type = "RowArgmax"
    no_gradient = True
    def forward(self, inputs):
        return [np.argmax(inputs[0], axis=-1)]

@hookimpl
def d5_custom_operators():
    return {"Double": Double, "RowArgmax": RowArgmax}
"""


@pytest.fixture
def custom(d5_site):
    d5_site.add(
        "d5-plugin-nograd",
        entry_points={"d5.hooks": {"nograd": "nograd_mod"}},
        modules={"nograd_mod.py": PLUGIN},
    )


def test_an_operator_without_backward_fails_validation(custom, d5_cli):
    result = d5_cli("validate", "op", "Double", "--backend", "custom", "--shape", "3x4")
    assert result.exit_code == 1, result.stderr
    assert result.stderr.count("\n") == 1
    assert "gradient of input 0 [backward]: missing: the candidate has no backward" in (
        result.stderr
    )
    report = read_json(
        d5_cli("validate", "op", "Double", "--backend", "custom", "--shape", "3x4", "--json").stdout
    )
    assert report["passed"] is False and report["no_gradient"] is False


def test_an_operator_declaring_no_gradient_passes_and_says_so(custom, d5_cli):
    args = ["validate", "op", "RowArgmax", "--backend", "custom", "--shape", "3x4"]
    result = d5_cli(*args)
    assert result.exit_code == 0, result.stderr
    assert "RowArgmax declares that it has no gradient" in result.stdout
    report = read_json(d5_cli(*args, "--json").stdout)
    assert report["passed"] is True and report["no_gradient"] is True
    assert [g["skipped"] for g in report["gradients"]] == [
        "the operator declares no gradient for this input"
    ]


# -- Dropout ---------------------------------------------------------------------------


def test_the_default_dropout_problem_trains_with_a_real_mask():
    attributes = DEFAULT_PROBLEMS["Dropout"].attributes
    assert attributes["training_mode"] == 1 and attributes["ratio"] > 0
    problem = problem_for("Dropout")
    inputs = problem.make_inputs("float32", 0)
    masks = [
        build_operator(backend_by_name(name), problem, "float32", inputs).forward(inputs)[1]
        for name in ("numpy", "torch")
    ]
    assert 0 < masks[0].sum() < masks[0].size, "the mask drops nothing or everything"
    np.testing.assert_array_equal(masks[1], masks[0])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_dropout_validates_against_the_reference_in_training_mode(dtype, d5_cli):
    result = d5_cli("validate", "op", "Dropout", "--backend", "torch", "--dtype", dtype, "--json")
    report = read_json(result.stdout)
    assert result.exit_code == 0, report["failures"]
    assert [o["dtype"] for o in report["outputs"]] == [dtype, "bool"]
    assert all(o["passed"] for o in report["outputs"])
    other = d5_cli(
        "validate", "op", "Dropout", "--backend", "torch", "--attr", "ratio=0.7",
        "--attr", "training_mode=1", "--attr", "seed=3", "--shape", "16x16", "--dtype", dtype,
    )  # fmt: skip
    assert other.exit_code == 0, other.stderr


# -- opset < 7 broadcast/axis ------------------------------------------------------------


def legacy_add() -> onnx.ModelProto:
    node = helper.make_node("Add", ["A", "B"], ["Y"], name="add", broadcast=1, axis=1)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("A", TensorProto.FLOAT, (2, 3, 3)),
            helper.make_tensor_value_info("B", TensorProto.FLOAT, (3,)),
        ],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, (2, 3, 3))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 6)])
    model.ir_version = 3
    return model


def test_legacy_broadcast_is_implemented_alike_or_refused_by_every_executor():
    a = np.zeros((2, 3, 3), np.float32)
    b = np.array([1.0, 2.0, 3.0], np.float32)
    want = np.broadcast_to(b[None, :, None], a.shape)
    for executor in (NumpyExecutor, TorchExecutor):
        got = executor(legacy_add()).inference({"A": a, "B": b})["Y"]
        np.testing.assert_array_equal(got, want, err_msg=executor.name)
    with pytest.raises(UsageError, match=r"cannot run operator Add .*opset 6") as caught:
        OnnxRuntimeExecutor(legacy_add())
    assert "\n" not in str(caught.value)


def test_validate_op_refuses_an_empty_shape_instead_of_using_the_default(d5_cli):
    result = d5_cli("validate", "op", "Gemm", "--backend", "torch", "--shape", "")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "d5: error: --shape is empty; give the input shapes (for example --shape 4x3,3x5) "
        "or leave out --shape"
    ]


@pytest.mark.parametrize(
    "command",
    [
        ["validate", "op", "Relu", "--backend", "numpy"],
        ["validate", "net", "mlp", "--executor", "numpy"],
        ["bench", "op", "Relu", "--backends", "numpy"],
        ["bench", "net", "mlp", "--executors", "numpy"],
    ],
)
def test_a_negative_seed_is_refused_in_one_line(d5_cli, command):
    result = d5_cli(*command, "--seed", "-1")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert "--seed" in result.stderr and "-1" in result.stderr
