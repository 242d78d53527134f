"""An operator an executor lacks: ``d5 validate net``, ``d5 bench net`` and ``d5 run``
exit 2 with one line naming the operator, the node and the installed executors that do
run it; ``--debug`` shows the traceback. A broken executor plugin is left out of the
list without breaking it."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

Run = Callable[..., subprocess.CompletedProcess[str]]

#: An executor that runs Relu only, through the base class's ``check_supported``.
NARROW = """
from d5core.api import GraphExecutor

d5_plugin_api = ">=1.0,<2"


class NarrowExecutor(GraphExecutor):
    name = "narrow"
    supported_ops = frozenset({"Relu"})

    def __init__(self, network, *, device="cpu"):
        super().__init__(network, device=device)
        self.check_supported()

    def inference(self, feeds):
        raise AssertionError("never reached: construction refuses the model")

    def inference_and_backprop(self, feeds, loss):
        raise AssertionError("never reached: construction refuses the model")
"""


def _site(root: Path) -> Path:
    """A sys.path entry holding the distribution ``d5-fixture-narrow``: the ``narrow``
    executor, and ``brokenexec``, an entry whose module fails to import."""
    site = root / "site"
    site.mkdir()
    (site / "d5_fixture_narrow.py").write_text(NARROW)
    (site / "d5_fixture_brokenexec.py").write_text("import d5_fixture_no_such_framework\n")
    info = site / "d5_fixture_narrow-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: d5-fixture-narrow\nVersion: 0.1.0\n"
    )
    (info / "entry_points.txt").write_text(
        "[d5.hooks]\nnarrow = d5_fixture_narrow\n"
        "[d5.frameworks]\n"
        "narrow = d5_fixture_narrow:NarrowExecutor\n"
        "brokenexec = d5_fixture_brokenexec:Executor\n"
    )
    return site


def _sin_model(path: Path) -> Path:
    """x (N, 4) -> Relu -> Sin (node 'n7') -> y."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="n1"),
        helper.make_node("Sin", ["r"], ["y"], name="n7"),
    ]
    graph = helper.make_graph(
        nodes,
        "sin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


#: Only these plugins, so that each command starts fast (importing TensorFlow takes
#: seconds): the executors are numpy (whose onnx.reference fallback runs Sin),
#: onnxruntime, and the fixture's two.
QUICK = {"D5_LOAD_PLUGINS": "d5-plugin-numpy,d5-plugin-onnxruntime,d5-fixture-narrow"}


@pytest.fixture
def site(tmp_path: Path) -> Path:
    return _site(tmp_path)


def _one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def _names_the_executors_that_do(line: str, op_type: str, node: str) -> None:
    assert f"the narrow executor does not support operator '{op_type}' (node '{node}')" in line
    assert line.endswith("; executors that do: numpy, onnxruntime"), line


def test_validate_net_names_the_executors_that_have_the_operator(
    site: Path, tmp_path: Path, run_d5: Run
) -> None:
    model = _sin_model(tmp_path / "sin.onnx")
    result = run_d5(
        "validate", "net", str(model), "--executor", "narrow", "--db", str(tmp_path / "r.db"),
        path=[site], env=QUICK,
    )  # fmt: skip
    _names_the_executors_that_do(_one_line_error(result), "Sin", "n7")


def test_bench_net_names_the_executors_that_have_the_operator(
    site: Path, tmp_path: Path, run_d5: Run
) -> None:
    model = _sin_model(tmp_path / "sin.onnx")
    result = run_d5(
        "bench", "net", str(model), "--executors", "narrow", "--processes", "1",
        "--batch", "2", "--db", str(tmp_path / "r.db"),
        path=[site], env=QUICK,
    )  # fmt: skip
    _names_the_executors_that_do(_one_line_error(result), "Sin", "n7")


def test_run_names_the_executors_that_have_the_operator(
    site: Path, tmp_path: Path, run_d5: Run
) -> None:
    recipe = Path(__file__).resolve().parents[2] / "recipes" / "digits-mlp.toml"
    result = run_d5(
        "run", str(recipe), "--set", "executor=narrow", "--db", str(tmp_path / "r.db"),
        path=[site], env=QUICK,
    )  # fmt: skip
    line = _one_line_error(result)
    assert "the narrow executor does not support operator 'Gemm' (node '" in line
    assert line.endswith("; executors that do: numpy, onnxruntime"), line


def test_debug_shows_the_traceback(site: Path, tmp_path: Path, run_d5: Run) -> None:
    model = _sin_model(tmp_path / "sin.onnx")
    result = run_d5(
        "--debug", "validate", "net", str(model), "--executor", "narrow",
        "--db", str(tmp_path / "r.db"),
        path=[site], env=QUICK,
    )  # fmt: skip
    assert result.returncode != 0, result.stderr  # --debug lets the error propagate
    assert "Traceback" in result.stderr
    assert "d5core.errors.UsageError: the narrow executor" in result.stderr
    assert "does not support operator 'Sin' (node 'n7'); executors that do:" in result.stderr
