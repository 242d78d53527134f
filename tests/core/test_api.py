"""d5core.api is the plugin API: its names are pinned, each is its home module's object,
and importing it costs a plugin module nothing."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import d5core.api as api
import d5core.onnx as onnx_helpers
from d5core import PLUGIN_API_VERSION

#: The plugin API version this surface was pinned at.
PINNED_VERSION = "1.13"
#: Every public name of d5core.api. Changing the surface is a deliberate edit of this
#: list and of d5core/_version.py: a name added bumps PLUGIN_API_VERSION's minor number,
#: one removed or renamed its major number (docs/plugins/README.md, "The plugin API").
SURFACE = {
    # the kernel
    "PLUGIN_API_VERSION", "hookimpl", "hookspec", "get_plugin_manager", "PluginManager",
    "reference_name", "D5Error", "UsageError", "CheckFailed", "PluginError",
    # the metric bus
    "MetricBus", "Event", "get_bus", "use_bus", "BEGIN", "END", "OP_FORWARD",
    "OP_BACKWARD", "GRAPH_NODE", "TRAIN_STEP", "TRAIN_EPOCH", "TEST_PASS", "COMM_CALL",
    "MEASURE_SAMPLE", "VALIDATION", "RUN_START", "RUN_END",
    # metrics
    "Metric", "MetricResult",
    # level 0
    "OperatorBackend", "Operator", "TensorDescriptor", "validate_operator",
    "compare_outputs", "gradcheck", "default_grad_outputs",
    # level 1
    "GraphExecutor", "Network",
    # level 2
    "Dataset", "load_dataset", "preloads", "Sampler", "Optimizer", "NativeTraining", "CorrectCounter",
    "TrainingAlgorithm", "ALGORITHMS_GROUP",
    # level 3
    "Communicator", "CommRequest", "CommCost", "DistributedOptimizer", "Compressor", "RankLauncher",
    "ANY_SOURCE", "ANY_TAG", "REDUCE_OPS", "chunk_counts", "collective_bytes",
    # reports
    "ReportRun", "ReportMeasurement", "ReportFigure", "REPORT_SECTIONS",
    # results stores
    "StoreBackend",
    # traces
    "TraceProfiler", "TRACE_LEVELS", "trace_clock_us", "wall_ns_to_trace_us", "wall_offset_ns",
}  # fmt: skip


def test_the_public_names_are_the_pinned_surface_at_the_pinned_version():
    added, removed = set(api.__all__) - SURFACE, SURFACE - set(api.__all__)
    assert not added and not removed, (
        f"d5core.api changed (added {sorted(added)}, removed {sorted(removed)}): update "
        "SURFACE and bump PLUGIN_API_VERSION (minor to add, major to remove)"
    )
    assert len(api.__all__) == len(SURFACE), "a name is listed twice in d5core.api.__all__"
    assert PLUGIN_API_VERSION == PINNED_VERSION, (
        f"PLUGIN_API_VERSION is {PLUGIN_API_VERSION}: check SURFACE and pin the new version"
    )


def test_every_public_name_is_documented_in_the_module_docstring():
    doc = api.__doc__ or ""
    assert [name for name in api.__all__ if f"``{name}``" not in doc] == []


@pytest.mark.parametrize("name", sorted(SURFACE))
def test_each_public_name_is_the_object_of_its_home_module(name):
    home = importlib.import_module(api._HOME_OF[name])
    assert getattr(api, name) is getattr(home, name)


def test_the_names_mypy_sees_are_the_names_imported_at_run_time():
    """The ``TYPE_CHECKING`` imports (what mypy checks plugins against) and the table the
    names are imported from at run time agree, name by name and module by module."""
    tree = ast.parse(Path(api.__file__).read_text())
    (guarded,) = (
        n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING"
    )
    typed = {
        alias.name: node.module
        for node in guarded.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert typed == api._HOME_OF
    assert set(typed) == set(api.__all__)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match=r"module 'd5core\.api' has no attribute 'Operatr'"):
        api.Operatr  # noqa: B018
    with pytest.raises(ImportError, match="Operatr"):
        exec("from d5core.api import Operatr", {})


def test_dir_lists_every_public_name():
    assert set(api.__all__) <= set(dir(api))


def test_importing_the_api_and_taking_hookimpl_imports_no_numpy_or_onnx():
    code = (
        "import sys; from d5core.api import UsageError, hookimpl, PLUGIN_API_VERSION;"
        "print(sorted(m for m in ('numpy', 'onnx', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


#: The names of the ONNX helper library at its pinned version: a name added bumps
#: ONNX_HELPERS_VERSION's minor number (d5core/onnx/CHANGELOG.md says which).
ONNX_PINNED_VERSION = "1.1"
ONNX_SURFACE = {
    # 1.1 (issue 31): the rules the torch and jax backends shared by copy
    "CastRules",
    "ConstantOfShapeRules",
    "ExpandRules",
    "GatherElementsRules",
    "GatherRules",
    "GeluRules",
    "LayerNormalizationRules",
    "ONNX_ELEMENT_TYPES",
    "RecurrentRules",
    "ReduceMaxRules",
    "ReduceMeanRules",
    "ReduceRules",
    "ReduceSumRules",
    "ShapeRules",
    "SliceRules",
    "SplitRules",
    "TriluRules",
    "WhereRules",
    "cast_target",
    "slice_bounds",
    "AUTO_PADS",
    "ActivationDefaults",
    "AlongAxisRules",
    "AveragePoolRules",
    "BackendOperator",
    "BatchNormalizationRules",
    "BroadcastingRules",
    "ConcatRules",
    "ConvRules",
    "ConvTransposeRules",
    "ConvolutionRules",
    "DescribedInput",
    "DropoutRules",
    "FlattenRules",
    "GRAPH_OPERATORS",
    "GemmRules",
    "GlobalAveragePoolRules",
    "GraphNodeOperator",
    "GraphView",
    "InputSlot",
    "LOSS_REDUCTIONS",
    "LogSoftmaxRules",
    "LossRules",
    "MatMulRules",
    "MaxPoolRules",
    "MeanSquaredErrorRules",
    "NativeOptimizer",
    "OPERATOR_ORDER",
    "OperatorSignature",
    "PoolRules",
    "RECURRENT_ACTIVATIONS",
    "RECURRENT_DEFAULT_ACTIVATIONS",
    "RECURRENT_GATES",
    "RecurrentActivationSpec",
    "RecurrentAttributes",
    "ReshapeRules",
    "Signature",
    "SlottedBackend",
    "SlottedOperator",
    "SoftmaxCrossEntropyLossRules",
    "SoftmaxRules",
    "SpatialWindow",
    "SqueezeRules",
    "TransposeRules",
    "TransposedWindow",
    "UnsqueezeRules",
    "average_pool_divisors",
    "check_attribute_names",
    "check_auto_pad",
    "check_class_labels",
    "check_concat_shapes",
    "check_float_dtypes",
    "check_per_channel",
    "check_rank",
    "check_scalar_input",
    "constant_value",
    "conv_transpose_window",
    "conv_window",
    "dropout_ratio",
    "flatten_target",
    "gemm_output_shape",
    "graph_operator_classes",
    "graph_view",
    "int_list_attribute",
    "integer_values",
    "is_integer_dtype",
    "legacy_broadcast",
    "legacy_broadcast_shape",
    "match_input_slots",
    "node_attributes",
    "node_errors",
    "node_pads",
    "normalize_axes",
    "one_node",
    "one_node_opset",
    "onnx_signature",
    "ordered_operator_classes",
    "recurrent_attributes",
    "reference_mask",
    "reshape_target",
    "resolve_pads",
    "slot_has_no_gradient",
    "spatial_window",
    "squeeze_axes",
    "transpose_perm",
    "unsqueeze_axes",
}


def test_the_onnx_helpers_are_their_own_library_with_their_own_version():
    assert set(onnx_helpers.__all__) - {"ONNX_HELPERS_VERSION"} == ONNX_SURFACE
    assert onnx_helpers.ONNX_HELPERS_VERSION == ONNX_PINNED_VERSION
    assert not ONNX_SURFACE & set(api.__all__)
    changelog = (Path(onnx_helpers.__file__).parent / "CHANGELOG.md").read_text()
    assert f"## {ONNX_PINNED_VERSION}" in changelog


@pytest.mark.parametrize("name", sorted(ONNX_SURFACE))
def test_a_helper_of_plugin_api_1_6_still_resolves_from_the_api_with_a_deprecation(name):
    with pytest.warns(DeprecationWarning, match=rf"d5core\.api\.{name} has moved to d5core\.onnx"):
        value = getattr(api, name)
    assert value is getattr(onnx_helpers, name)
    home = importlib.import_module(onnx_helpers._HOME_OF[name])
    assert value is getattr(home, name)


def test_importing_the_onnx_helpers_imports_no_numpy_or_onnx():
    code = (
        "import sys; import d5core.onnx;"
        "print(sorted(m for m in ('numpy', 'onnx', 'torch') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
