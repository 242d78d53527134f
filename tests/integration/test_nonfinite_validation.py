"""NaN and infinity never pass a check (issue 28, section 4): a custom operator whose output
is NaN, a network whose output is NaN, at levels 0 and 1, through the runners and the CLI.
The matching checks of LoadGen's accuracy mode and of ``validate_operator`` itself are in
``tests/core/test_nonfinite_checks.py``."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from d5core.lv0.runner import problem_for, validate_op
from d5core.lv1.runner import validate_network

OPERATORS = """
import numpy as np
from d5core.hookspecs import hookimpl
from d5core.levels.operators import Operator
d5_plugin_api = ">=1.0"

class NanCube(Operator):
    # nothing else implements it: only its own consistency could be checked before
    op_type = "NanCube"
    def forward(self, inputs):
        return [inputs[0] ** 3 * np.nan]
    def backward(self, grad_outputs, inputs, outputs):
        return [3 * inputs[0] ** 2 * grad_outputs[0] * np.nan]

class NanTanh(Operator):
    # compared with numpy's Tanh, which is finite
    op_type = "Tanh"
    def forward(self, inputs):
        y = np.tanh(inputs[0])
        y.reshape(-1)[-1] = np.inf
        return [y]
    def backward(self, grad_outputs, inputs, outputs):
        return [grad_outputs[0] * (1 - np.tanh(inputs[0]) ** 2)]

@hookimpl
def d5_custom_operators():
    return {"NanCube": NanCube, "NanTanh": NanTanh}
"""


@pytest.fixture(autouse=True)
def _custom_operators(d5_site, tmp_path, monkeypatch):
    d5_site.add(
        "d5-plugin-nonfinite",
        entry_points={"d5.hooks": {"nonfinite_ops": "nonfinite_ops_mod"}},
        modules={"nonfinite_ops_mod.py": OPERATORS},
    )
    monkeypatch.setenv("D5_DB", str(tmp_path / "results.sqlite"))


def test_a_nan_operator_with_nothing_to_compare_with_fails_on_its_outputs():
    result = validate_op(problem_for("NanCube", shapes=[(3, 4)]), "custom", dtype="float64")
    assert result.against == "central differences only"
    assert not result.passed
    (output,) = result.report.outputs
    assert output.failed_metric == "nonfinite"
    assert output.detail == "12 non-finite values (12 NaN), the first at index (0, 0)"
    gradient = next(g for g in result.report.gradients if not g.skipped)
    assert gradient.failed_metric == "nonfinite" and "proves nothing" in gradient.detail


def test_an_infinite_output_against_a_finite_reference_names_where_it_is():
    result = validate_op(problem_for("NanTanh", shapes=[(3, 4)]), "custom", dtype="float64")
    (output,) = result.report.outputs
    assert not result.passed and output.failed_metric == "nonfinite"
    assert output.detail == "1 non-finite value (1 +inf), the first at index (2, 3)"


def test_validate_op_of_a_nan_operator_exits_1_and_shows_no_zero_error(d5_cli):
    shown = d5_cli("validate", "op", "NanCube", "--backend", "custom", "--shape", "3x4")
    assert shown.exit_code == 1, shown.stderr
    assert "non-finite" in shown.stderr and "the first at index (0, 0)" in shown.stderr
    assert "0.00e+00" not in shown.stdout and "pass" not in shown.stdout.split()
    data = json.loads(
        d5_cli(
            "validate", "op", "NanCube", "--backend", "custom", "--shape", "3x4", "--json"
        ).stdout
    )["data"]
    row = data[0] if isinstance(data, list) else data
    assert row["passed"] is False
    assert all(c["metrics"].get("max_abs") is None for c in row["gradients"] if c["metrics"])


def nan_model() -> onnx.ModelProto:
    """Y = X * W with a W of NaN: every output is NaN, on every executor alike."""
    weight = helper.make_tensor("W", TensorProto.FLOAT, (4,), [float("nan")] * 4)
    node = helper.make_node("Mul", ["X", "W"], ["Y"], name="mul")
    graph = helper.make_graph(
        [node],
        "nan",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ("N", 4))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ("N", 4))],
        initializer=[weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("executor", ["numpy", "torch"])
def test_a_network_whose_output_is_nan_fails_validation(executor, tmp_path):
    if executor == "torch":
        pytest.importorskip("torch")
    path = tmp_path / "nan.onnx"
    onnx.save(nan_model(), str(path))
    result = validate_network(str(path), executor)
    assert not result.passed
    (output,) = result.outputs
    assert output.failed_metric == "nonfinite"
    assert output.detail.startswith("8 non-finite values (8 NaN), the first at index (0, 0)")
    assert "proves nothing" in output.detail
    assert np.isnan(output.metrics["max_abs"])
    allowed = validate_network(str(path), executor, allow_nonfinite=True)
    assert allowed.outputs[0].passed and "allowed as expected" in allowed.outputs[0].detail
    assert any("declared expected" in note for note in allowed.notes)


def test_validate_net_of_a_nan_model_exits_1(d5_cli, tmp_path):
    path = tmp_path / "nan.onnx"
    onnx.save(nan_model(), str(path))
    shown = d5_cli("validate", "net", str(path), "--executor", "numpy")
    assert shown.exit_code == 1, shown.stderr
    assert "nonfinite" in shown.stderr and "0.00e+00" not in shown.stdout


def test_loadgen_accuracy_fails_a_model_whose_outputs_are_nan(tmp_path):
    """The accuracy log holds the numpy executor's own outputs, NaN as the reference's:
    ``accuracy_passed`` was 1 for it; now the check fails, naming where."""
    from d5core.loadgen.accuracy import ACCURACY_LOG, check_accuracy, reference_outputs
    from d5core.loadgen.loadgen import ScenarioResult
    from d5core.loadgen.settings import ScenarioSettings
    from d5core.loadgen.sut import sample_library
    from d5core.lv1.runner import executor_by_name, load_model

    path = tmp_path / "nan.onnx"
    onnx.save(nan_model(), str(path))
    settings = ScenarioSettings("offline", mode="accuracy", performance_sample_count=4, seed=3)
    network = load_model(str(path))
    library = sample_library(network, settings)
    outputs = reference_outputs(executor_by_name("numpy", network), network, library)
    entries = [
        {"seq_id": i, "qsl_idx": i, "data": b"".join(o.tobytes() for o in out).hex().upper()}
        for i, out in enumerate(outputs)
    ]
    log = tmp_path / ACCURACY_LOG
    log.write_text(json.dumps(entries))
    result = ScenarioResult(
        executor="candidate", scenario="offline", mode="accuracy", valid=None,
        failed_checks=[], metric_name="samples_per_second", metric_value=None,
        percentiles_s={}, qps_with_overhead=None, qps_without_overhead=None,
        early_stopping={}, latencies_s=[], log_dir=str(tmp_path), settings=settings,
        threads={}, samples_issued=len(library), accuracy={"log": str(log)},
    )  # fmt: skip
    verdict = check_accuracy(str(path), result, reference="numpy")
    assert not verdict["passed"] and verdict["failed"] == len(library)
    assert verdict["worst"]["metric"] == "nonfinite" and verdict["worst"]["max_abs"] is None
    assert "4 non-finite values (4 NaN), the first at index (0,)" in verdict["message"]
    allowed = check_accuracy(str(path), result, reference="numpy", allow_nonfinite=True)
    assert allowed["passed"] and "declared expected" in allowed["message"]


class _NanDroppingRelu:
    """A backend whose Relu gives 0 for NaN (as the native kernel did): the reference's
    operators otherwise."""

    name = "nan-dropping"

    def create(self, op_type, attributes, descriptors):
        from d5core.testing.operator_agreement import reference_backend

        op = reference_backend().create(op_type, attributes, descriptors)
        if op_type == "Relu":
            op.forward = lambda inputs: [
                np.where(inputs[0] > 0, inputs[0], 0).astype(inputs[0].dtype)
            ]
        return op


def test_the_agreement_kit_catches_a_relu_that_drops_nan_and_checks_declarations():
    from types import MappingProxyType

    from d5core.testing.operator_agreement import OperatorAgreementTests

    class Kit(OperatorAgreementTests):
        backend = _NanDroppingRelu()  # type: ignore[assignment]
        operators = ("Relu",)

    with pytest.raises(
        AssertionError, match=r"nan-dropping Relu \(float64\) differs .*nan at the first of a row"
    ):
        Kit().test_nonfinite_values_land_where_the_reference_puts_them("Relu", "float64")
    declared = {("Relu", "nan at .* of a row"): "drops NaN, by design of this test"}
    Kit.nonfinite_differences = MappingProxyType(declared)
    Kit().test_nonfinite_values_land_where_the_reference_puts_them("Relu", "float64")
    stale = {("Sigmoid", "nan at .* of a row"): "Sigmoid never differed"}
    Kit.nonfinite_differences = MappingProxyType(stale)
    with pytest.raises(
        AssertionError, match=r"now agrees .*remove them from nonfinite_differences"
    ):
        Kit().test_nonfinite_values_land_where_the_reference_puts_them("Sigmoid", "float64")


def test_a_model_that_declares_nonfinite_outputs_passes_validate_net_and_says_so(
    d5_cli, tmp_path
):
    model = nan_model()
    entry = model.metadata_props.add()
    entry.key, entry.value = "d5.nonfinite_outputs", "expected"
    path = tmp_path / "declared.onnx"
    onnx.save(model, str(path))
    shown = d5_cli("validate", "net", str(path), "--executor", "numpy", "--json")
    assert shown.exit_code == 0, shown.stderr
    data = json.loads(shown.stdout)["data"]
    assert data["passed"] is True
    assert any("declared expected" in note for note in data["notes"])


def test_a_nonfinite_declaration_with_another_value_is_one_line_and_exit_2(d5_cli, tmp_path):
    model = nan_model()
    entry = model.metadata_props.add()
    entry.key, entry.value = "d5.nonfinite_outputs", "sometimes"
    path = tmp_path / "declared.onnx"
    onnx.save(model, str(path))
    shown = d5_cli("validate", "net", str(path), "--executor", "numpy")
    assert shown.exit_code == 2, shown.stderr
    assert "d5.nonfinite_outputs='sometimes'" in shown.stderr
    assert len(shown.stderr.strip().splitlines()) == 1
