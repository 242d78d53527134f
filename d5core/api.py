"""The public API of d5: the one module a plugin imports from d5core.

A plugin (an operator backend, a graph executor, a dataset, an optimizer, a communicator,
a metric, or a module of hooks) writes ``from d5core.api import ...`` and nothing else
from d5core; its tests may also use :mod:`d5core.testing` (the pytest fixtures, and
``d5core.testing.networks``). Everything else in d5core is internal: its modules may be
renamed, moved or changed in any release without notice (they keep their names, without
a leading underscore, only to spare churn). d5's own plugins, the example plugin and the
plugins of docs/plugins are held to this by a test that reads their imports
(``tests/core/test_plugin_imports.py``).

Importing this module is light: it imports no framework, numpy or onnx. Each name is
imported from its home module the first time it is used, so a plugin module that only
takes ``hookimpl`` costs ``d5 list-plugins`` nothing.

Versioning
----------
:data:`PLUGIN_API_VERSION` versions the plugin contract: the names below and the hook
specifications (docs/plugins/hooks.md), nothing else. Its minor number goes up when a
name or a hook is added, or an optional argument, attribute or method is; its major
number when a name or a hook is removed or renamed, or a signature or documented
behaviour changes so that a plugin written against the old one breaks. A plugin
declares the range it supports (``d5_plugin_api = ">=1.0,<2"``) and d5 refuses to call
one outside it. The set of names is pinned by ``tests/core/test_api.py``: changing it is
a deliberate edit of that list, with the version bump it needs.

The names, by level
-------------------

The kernel: plugins, hooks, errors

- ``PLUGIN_API_VERSION``: the version of this API, ``"MAJOR.MINOR"``.
- ``hookimpl``: marks a function of a plugin module as a hook implementation.
- ``hookspec``: marks a hook specification, for a plugin that declares hooks of its own
  (``get_plugin_manager().pluggy_manager.add_hookspecs(module)``).
- ``get_plugin_manager``: the process-wide plugin manager (``.hook.NAME(...)`` calls a
  hook, ``.load(group, name)`` loads an installed component).
- ``PluginManager``: its class, for type annotations.
- ``reference_name``: the name of the reference implementation (``D5_REFERENCE``, else
  ``numpy``) that operators and executors are validated against.
- ``D5Error``: the base of every error d5 raises on purpose.
- ``UsageError``: bad input (an argument, attribute, shape or file); d5 prints its
  one-line message and exits 2.
- ``CheckFailed``: a validation, a threshold or a plugin check that did not hold (exit 1).
- ``PluginError``: a plugin that was asked for is unknown, disabled, broken or
  incompatible (a ``UsageError``).

The metric bus (docs/metrics.md lists what each event carries)

- ``MetricBus``, ``Event``: the bus and the events published on it.
- ``get_bus``: the process-wide bus that measured code publishes on; ``use_bus``: a
  context manager that installs another one for a block (a run, a test).
- ``BEGIN``, ``END``: the suffixes of the events that open and close a span.
- ``OP_FORWARD``, ``OP_BACKWARD``, ``GRAPH_NODE``, ``TRAIN_STEP``, ``TRAIN_EPOCH``,
  ``TEST_PASS``, ``COMM_CALL``, ``MEASURE_SAMPLE``, ``VALIDATION``, ``RUN_START``,
  ``RUN_END``: the event names.

Metrics

- ``Metric``: the interface of a ``d5.metrics`` entry.
- ``MetricResult``: what :meth:`Metric.result` returns.

Level 0: operators

- ``OperatorBackend``: the interface of a ``d5.operators`` entry, a factory of operators.
- ``Operator``: one operator instance (forward, backward, timing).
- ``TensorDescriptor``: the shape, element type and layout of one tensor.
- ``validate_operator``: compares an operator's outputs and gradients with a reference
  operator's; ``compare_outputs``: compares arrays with d5's tolerances;
  ``gradcheck``: checks backward against finite differences;
  ``default_grad_outputs``: the output gradients validation uses.
ONNX helpers (attribute checks, windows, signatures, recurrent attributes,
``SlottedOperator``, the graph-node operators) are not part of this API: they are the
library :mod:`d5core.onnx`, versioned on its own. Until plugin API 2.0 their old names
here still resolve, with a ``DeprecationWarning`` naming their new home.

Level 1: networks

- ``GraphExecutor``: the interface of a ``d5.frameworks`` entry, which runs one network.
- ``Network``: an ONNX model as d5 passes it to executors (its home is
  :mod:`d5core.onnx.network`).

Level 2: training

- ``Dataset``: the interface of a ``d5.datasets`` entry; ``load_dataset`` loads an
  installed one by name; ``preloads`` marks a factory with the imports ``d5 run`` does
  before its clock starts.
- ``Sampler``: decides which examples form each minibatch.
- ``Optimizer``: the interface of a ``d5.optimizers`` entry that trains one process.
- ``NativeTraining``: what an executor offers so that its framework's own optimizer
  trains on its tensors (the native path); ``CorrectCounter``: what its optional
  ``native_correct_counter()`` returns.
- ``TrainingAlgorithm``: the interface of a ``d5.algorithms`` entry (``ALGORITHMS_GROUP``),
  a training algorithm compared on fixed workloads the AlgoPerf way: its settings
  (optimizer, learning rate, schedule, ...), batch size, search space, and the optional
  ``prepare_for_eval`` and ``data_selection`` (docs/plugins/algorithms.md).

Level 3: distributed training

- ``Communicator``: the interface of a ``d5.communication`` entry; ``CommRequest``: a
  non-blocking call in flight.
- ``DistributedOptimizer``: a distribution scheme (a ``d5.optimizers`` entry wrapping a
  local optimizer); ``Compressor``: compresses what a scheme sends; ``CommCost``: the
  predicted communication of one step, which ``DistributedOptimizer.communication_cost``
  returns (``d5 model comm``).
- ``RankLauncher``: what a communication plugin's ``d5_rank_launcher`` hook returns.
- ``ANY_SOURCE``, ``ANY_TAG``: wildcards of :meth:`Communicator.recv`;
  ``REDUCE_OPS``: the reductions every communicator supports.
- ``chunk_counts``: how a vector splits into near-equal chunks over the ranks;
  ``collective_bytes``: the bytes a rank sends and receives in a collective.

Reports (``d5 report``; the hook ``d5_report_figures``)

- ``ReportRun``: one stored run as a figure hook gets it (environment, measurements
  with raw samples, scalar metrics); ``ReportMeasurement``: one of its measurements.
- ``ReportFigure``: what the hook returns: a matplotlib figure, the numbers it draws,
  its key and section.
- ``REPORT_SECTIONS``: the report's own sections, in the order shown.

Results stores (the hook ``d5_results_backend``)

- ``StoreBackend``: what a plugin returns to keep d5's results in a database named by
  URL (connecting, identifying and migrating the database, write transactions);
  d5 itself opens SQLite files and ``postgresql://`` URLs.

Traces (``--trace``; the hook ``d5_trace_profiler``)

- ``TraceProfiler``: what the hook returns: a framework profiler whose events join a
  traced run's timeline; ``TRACE_LEVELS``: ``step``, ``framework``, ``full``.
- ``trace_clock_us``: now on the trace's time base (µs); ``wall_ns_to_trace_us``: a
  wall-clock time converted to it; ``wall_offset_ns``: the wall clock less the trace
  clock, to convert many.
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from d5core._version import PLUGIN_API_VERSION
    from d5core.bus import (
        BEGIN,
        COMM_CALL,
        END,
        GRAPH_NODE,
        MEASURE_SAMPLE,
        OP_BACKWARD,
        OP_FORWARD,
        RUN_END,
        RUN_START,
        TEST_PASS,
        TRAIN_EPOCH,
        TRAIN_STEP,
        VALIDATION,
        Event,
        MetricBus,
        get_bus,
        use_bus,
    )
    from d5core.errors import CheckFailed, D5Error, PluginError, UsageError
    from d5core.hookspecs import hookimpl, hookspec
    from d5core.levels.distributed import (
        ANY_SOURCE,
        ANY_TAG,
        REDUCE_OPS,
        CommCost,
        CommRequest,
        Communicator,
        Compressor,
        DistributedOptimizer,
        RankLauncher,
        chunk_counts,
        collective_bytes,
    )
    from d5core.levels.metrics import Metric, MetricResult
    from d5core.levels.networks import GraphExecutor
    from d5core.levels.operators import Operator, OperatorBackend, TensorDescriptor
    from d5core.levels.report import (
        REPORT_SECTIONS,
        ReportFigure,
        ReportMeasurement,
        ReportRun,
    )
    from d5core.levels.training import (
        ALGORITHMS_GROUP,
        CorrectCounter,
        Dataset,
        NativeTraining,
        Optimizer,
        Sampler,
        TrainingAlgorithm,
        load_dataset,
        preloads,
    )
    from d5core.onnx.network import Network
    from d5core.plugins.manager import PluginManager, get_plugin_manager
    from d5core.plugins.reference import reference_name
    from d5core.results.backend import StoreBackend
    from d5core.tracing import (
        TRACE_LEVELS,
        TraceProfiler,
        trace_clock_us,
        wall_ns_to_trace_us,
        wall_offset_ns,
    )
    from d5core.validate import (
        compare_outputs,
        default_grad_outputs,
        gradcheck,
        validate_operator,
    )

#: The public names by home module: each is imported from there on first use.
_HOMES: dict[str, tuple[str, ...]] = {
    "d5core._version": ("PLUGIN_API_VERSION",),
    "d5core.errors": ("CheckFailed", "D5Error", "PluginError", "UsageError"),
    "d5core.hookspecs": ("hookimpl", "hookspec"),
    "d5core.plugins.manager": ("PluginManager", "get_plugin_manager"),
    "d5core.plugins.reference": ("reference_name",),
    "d5core.bus": (
        "BEGIN",
        "COMM_CALL",
        "END",
        "GRAPH_NODE",
        "MEASURE_SAMPLE",
        "OP_BACKWARD",
        "OP_FORWARD",
        "TEST_PASS",
        "TRAIN_EPOCH",
        "TRAIN_STEP",
        "VALIDATION",
        "RUN_END",
        "RUN_START",
        "Event",
        "MetricBus",
        "get_bus",
        "use_bus",
    ),
    "d5core.levels.metrics": ("Metric", "MetricResult"),
    "d5core.levels.operators": ("Operator", "OperatorBackend", "TensorDescriptor"),
    "d5core.validate": (
        "compare_outputs",
        "default_grad_outputs",
        "gradcheck",
        "validate_operator",
    ),
    "d5core.levels.networks": ("GraphExecutor",),
    "d5core.onnx.network": ("Network",),
    "d5core.levels.training": (
        "ALGORITHMS_GROUP",
        "CorrectCounter",
        "Dataset",
        "NativeTraining",
        "Optimizer",
        "Sampler",
        "TrainingAlgorithm",
        "load_dataset",
        "preloads",
    ),
    "d5core.results.backend": ("StoreBackend",),
    "d5core.tracing": (
        "TRACE_LEVELS", "TraceProfiler", "trace_clock_us", "wall_ns_to_trace_us", "wall_offset_ns",
    ),
    "d5core.levels.distributed": (
        "ANY_SOURCE",
        "ANY_TAG",
        "REDUCE_OPS",
        "CommCost",
        "CommRequest",
        "Communicator",
        "Compressor",
        "DistributedOptimizer",
        "RankLauncher",
        "chunk_counts",
        "collective_bytes",
    ),
    "d5core.levels.report": (
        "REPORT_SECTIONS",
        "ReportFigure",
        "ReportMeasurement",
        "ReportRun",
    ),
}
_HOME_OF: dict[str, str] = {name: home for home, names in _HOMES.items() for name in names}

__all__ = [
    "ALGORITHMS_GROUP",
    "ANY_SOURCE",
    "ANY_TAG",
    "BEGIN",
    "COMM_CALL",
    "END",
    "GRAPH_NODE",
    "MEASURE_SAMPLE",
    "OP_BACKWARD",
    "OP_FORWARD",
    "PLUGIN_API_VERSION",
    "REDUCE_OPS",
    "REPORT_SECTIONS",
    "RUN_END",
    "RUN_START",
    "TEST_PASS",
    "TRACE_LEVELS",
    "TRAIN_EPOCH",
    "TRAIN_STEP",
    "VALIDATION",
    "CheckFailed",
    "CommCost",
    "CommRequest",
    "Communicator",
    "Compressor",
    "CorrectCounter",
    "D5Error",
    "Dataset",
    "DistributedOptimizer",
    "Event",
    "GraphExecutor",
    "Metric",
    "MetricBus",
    "MetricResult",
    "NativeTraining",
    "Network",
    "Operator",
    "OperatorBackend",
    "Optimizer",
    "PluginError",
    "PluginManager",
    "RankLauncher",
    "ReportFigure",
    "ReportMeasurement",
    "ReportRun",
    "Sampler",
    "StoreBackend",
    "TensorDescriptor",
    "TraceProfiler",
    "TrainingAlgorithm",
    "UsageError",
    "chunk_counts",
    "collective_bytes",
    "compare_outputs",
    "default_grad_outputs",
    "get_bus",
    "get_plugin_manager",
    "gradcheck",
    "hookimpl",
    "hookspec",
    "load_dataset",
    "preloads",
    "reference_name",
    "trace_clock_us",
    "use_bus",
    "validate_operator",
    "wall_ns_to_trace_us",
    "wall_offset_ns",
]

if not TYPE_CHECKING:  # for mypy every name is imported above, and a typo stays an error

    def __getattr__(name: str) -> Any:
        """Import a public name from its home module on first use (PEP 562)."""
        home = _HOME_OF.get(name)
        if home is None:
            return _moved_to_onnx(name)
        value = getattr(importlib.import_module(home), name)
        globals()[name] = value
        return value


def _moved_to_onnx(name: str) -> Any:
    """A name that plugin API 1.6 offered here and :mod:`d5core.onnx` now holds: returned
    with a ``DeprecationWarning`` until plugin API 2.0 drops it."""
    onnx = importlib.import_module("d5core.onnx")
    if name not in onnx.__all__ or name == "ONNX_HELPERS_VERSION":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(
        f"d5core.api.{name} has moved to d5core.onnx: import it from there "
        f"(plugin API 2.0 removes it from d5core.api)",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(onnx, name)


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
