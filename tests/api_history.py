"""When each name a plugin can import from d5core was added to the plugin API.

A plugin declares the plugin-API range it supports (``d5_plugin_api = ">=1.5,<2"``). The
lower bound is only honest if every name the plugin imports and every hook it implements
exists at that version: against an older core it would pass the range check and then fail
on import. :data:`NAMES_ADDED_IN` records, for every name :mod:`d5core.api` offers or has
offered, the plugin-API version that first exported it; :func:`hooks_added_in` reads the
same for the hook specifications from their ``.. versionadded::`` notes. The test
``tests/core/test_api_ranges.py`` holds every plugin's range against both.

The table was read from the history of ``d5core/api.py`` and ``d5core/_version.py``:

- 1.0 had no ``d5core.api``: plugins imported the hook markers from their home modules.
- 1.1 created ``d5core.api``; 1.2 added the shared ONNX operator helpers; 1.3 (the
  ``d5_custom_op_glue`` hook) and 1.4 (asynchronous operators: an optional method)
  added no name; 1.5 added the recurrent and graph-node helpers; 1.6 the report types.
- 1.7 moved the 50 ONNX helpers to :mod:`d5core.onnx`, versioned on its own
  (``ONNX_HELPERS_VERSION``). They still resolve from ``d5core.api``, with a
  ``DeprecationWarning``, so their rows keep the version that first offered them there.
  A name imported from :mod:`d5core.onnx` needs :data:`ONNX_LIBRARY_ADDED_IN`, the
  plugin API of the release that ships the library.
- 1.8 added ``preloads``, for dataset factories.
- 1.9 added ``CommCost``, what the optional class method
  ``DistributedOptimizer.communication_cost`` returns (``d5 model comm``); the
  ``d5_rank_launcher`` hook gets the argument ``communicator`` (the communicator the
  ranks will use, or None).
- 1.10 added ``TrainingAlgorithm`` and ``ALGORITHMS_GROUP``, the training-algorithm
  plugin kind (``d5.algorithms``).
- 1.11 added ``StoreBackend`` and the ``d5_results_backend`` hook: a plugin keeps the
  results in a database named by URL (d5's own team store opens PostgreSQL).
- 1.12 added the trace names and the ``d5_trace_profiler`` hook; 1.13 (the optional
  executor method ``inference_and_backprop_streamed``) added no name.

Add a row here whenever a name joins ``d5core.api`` (with the minor bump of
``PLUGIN_API_VERSION`` it needs).
"""

from __future__ import annotations

import inspect
import re
from types import ModuleType

__all__ = ["NAMES_ADDED_IN", "ONNX_LIBRARY_ADDED_IN", "hooks_added_in", "version_key"]

#: The plugin API of the first release that ships :mod:`d5core.onnx`: every name imported
#: from it (or from one of its modules) needs this version.
ONNX_LIBRARY_ADDED_IN = "1.7"

#: Every name that :mod:`d5core.api` exports or has exported -> the plugin-API version
#: that first exported it.
NAMES_ADDED_IN: dict[str, str] = {
    # 1.1: d5core.api is the one plugin surface (commit 5b6bf2f, issue 13)
    "ANY_SOURCE": "1.1",
    "ANY_TAG": "1.1",
    "AUTO_PADS": "1.1",
    "BEGIN": "1.1",
    "CheckFailed": "1.1",
    "chunk_counts": "1.1",
    "collective_bytes": "1.1",
    "COMM_CALL": "1.1",
    "CommRequest": "1.1",
    "Communicator": "1.1",
    "compare_outputs": "1.1",
    "Compressor": "1.1",
    "constant_value": "1.1",
    "CorrectCounter": "1.1",
    "D5Error": "1.1",
    "Dataset": "1.1",
    "default_grad_outputs": "1.1",
    "DistributedOptimizer": "1.1",
    "END": "1.1",
    "Event": "1.1",
    "get_bus": "1.1",
    "get_plugin_manager": "1.1",
    "gradcheck": "1.1",
    "GRAPH_NODE": "1.1",
    "GraphExecutor": "1.1",
    "hookimpl": "1.1",
    "hookspec": "1.1",
    "legacy_broadcast": "1.1",
    "legacy_broadcast_shape": "1.1",
    "load_dataset": "1.1",
    "MEASURE_SAMPLE": "1.1",
    "Metric": "1.1",
    "MetricBus": "1.1",
    "MetricResult": "1.1",
    "NativeTraining": "1.1",
    "Network": "1.1",
    "node_attributes": "1.1",
    "OP_BACKWARD": "1.1",
    "OP_FORWARD": "1.1",
    "Operator": "1.1",
    "OperatorBackend": "1.1",
    "Optimizer": "1.1",
    "PLUGIN_API_VERSION": "1.1",
    "PluginError": "1.1",
    "PluginManager": "1.1",
    "RankLauncher": "1.1",
    "REDUCE_OPS": "1.1",
    "reference_name": "1.1",
    "resolve_pads": "1.1",
    "RUN_END": "1.1",
    "RUN_START": "1.1",
    "Sampler": "1.1",
    "TensorDescriptor": "1.1",
    "TEST_PASS": "1.1",
    "TRAIN_EPOCH": "1.1",
    "TRAIN_STEP": "1.1",
    "UsageError": "1.1",
    "use_bus": "1.1",
    "validate_operator": "1.1",
    "VALIDATION": "1.1",
    # 1.2: the shared operator checks, windows, signatures and SlottedOperator (d1d747c, issue 14)
    "average_pool_divisors": "1.2",
    "check_attribute_names": "1.2",
    "check_auto_pad": "1.2",
    "check_class_labels": "1.2",
    "check_concat_shapes": "1.2",
    "check_float_dtypes": "1.2",
    "check_per_channel": "1.2",
    "check_rank": "1.2",
    "check_scalar_input": "1.2",
    "conv_transpose_window": "1.2",
    "conv_window": "1.2",
    "DescribedInput": "1.2",
    "dropout_ratio": "1.2",
    "flatten_target": "1.2",
    "gemm_output_shape": "1.2",
    "InputSlot": "1.2",
    "int_list_attribute": "1.2",
    "integer_values": "1.2",
    "is_integer_dtype": "1.2",
    "match_input_slots": "1.2",
    "normalize_axes": "1.2",
    "onnx_signature": "1.2",
    "OperatorSignature": "1.2",
    "reshape_target": "1.2",
    "slot_has_no_gradient": "1.2",
    "SlottedOperator": "1.2",
    "spatial_window": "1.2",
    "SpatialWindow": "1.2",
    "squeeze_axes": "1.2",
    "transpose_perm": "1.2",
    "TransposedWindow": "1.2",
    "unsqueeze_axes": "1.2",
    # 1.5: recurrent attributes and the graph-node operators (e30723e, 5b6388e, issue 17)
    "ActivationDefaults": "1.5",
    "graph_operator_classes": "1.5",
    "GRAPH_OPERATORS": "1.5",
    "GraphNodeOperator": "1.5",
    "one_node": "1.5",
    "one_node_opset": "1.5",
    "RECURRENT_ACTIVATIONS": "1.5",
    "recurrent_attributes": "1.5",
    "RECURRENT_DEFAULT_ACTIVATIONS": "1.5",
    "RECURRENT_GATES": "1.5",
    "RecurrentActivationSpec": "1.5",
    "RecurrentAttributes": "1.5",
    # 1.6: the report contract types for d5_report_figures (4fa8fd4, issue 18)
    "REPORT_SECTIONS": "1.6",
    "ReportFigure": "1.6",
    "ReportMeasurement": "1.6",
    "ReportRun": "1.6",
    # 1.8: what a dataset factory imports, done before a run's clock (issue 30)
    "preloads": "1.8",
    # 1.9: the per-step communication cost a distribution scheme predicts (issue 32)
    "CommCost": "1.9",
    # 1.10: training algorithms compared the AlgoPerf way (issue 33)
    "ALGORITHMS_GROUP": "1.10",
    "TrainingAlgorithm": "1.10",
    # 1.11: results stores named by URL, PostgreSQL for teams (issue 34)
    "StoreBackend": "1.11",
    # 1.12: across-stack traces (issue 35)
    "TRACE_LEVELS": "1.12",
    "TraceProfiler": "1.12",
    "trace_clock_us": "1.12",
    "wall_ns_to_trace_us": "1.12",
    "wall_offset_ns": "1.12",
}

_VERSION_ADDED = re.compile(r"\.\. versionadded:: (\d+\.\d+)")


def version_key(version: str) -> tuple[int, ...]:
    """``"1.10"`` -> ``(1, 10)``, so that versions compare as numbers."""
    return tuple(int(part) for part in version.split("."))


def hooks_added_in(modules: tuple[ModuleType, ...] | None = None) -> dict[str, str]:
    """Each hook specification's name -> the version its docstring's ``.. versionadded::``
    gives (d5's own specification modules by default)."""
    if modules is None:
        from d5core.hookspecs import SPEC_MODULES

        modules = SPEC_MODULES
    found: dict[str, str] = {}
    for module in modules:
        for name, function in inspect.getmembers(module, inspect.isfunction):
            if not name.startswith("d5_") or function.__module__ != module.__name__:
                continue
            match = _VERSION_ADDED.search(function.__doc__ or "")
            if match is None:
                raise ValueError(f"hook {name} has no '.. versionadded::' in its docstring")
            found[name] = match.group(1)
    return found
