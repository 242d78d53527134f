"""Level 1: validate graph executors against the reference and benchmark them.

A model is named from the zoo, from the onnx package's light models, or given as a path
to an ``.onnx`` file. Feeds are generated from a seed; every executor converts them once,
outside the timed region.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from d5core.errors import UsageError
from d5core.plugins import PluginManager, get_plugin_manager

if TYPE_CHECKING:
    from d5core.levels.networks import GraphExecutor
    from d5core.onnx.network import Network

__all__ = [
    "BREAKDOWN_REPEATS",
    "BREAKDOWN_TOLERANCE",
    "DEFAULT_BATCH",
    "NONFINITE_KEY",
    "Breakdown",
    "NetworkTiming",
    "NetworkValidation",
    "NetworkWorkload",
    "NodeTime",
    "RunNodeTimes",
    "check_trains",
    "declares_nonfinite",
    "executor_by_name",
    "fallback_nodes",
    "fallback_note",
    "feeds_nbytes",
    "layer_breakdown",
    "load_model",
    "make_feeds",
    "network_workload",
    "node_runs",
    "prepare_step",
    "resolve_batch",
    "samples_in",
    "traced_node_times",
    "validate_network",
    "with_loss",
]


def load_model(name: str, **kwargs: Any) -> Network:
    """A zoo model, a light model shipped with onnx, or an ``.onnx`` file, by name."""
    from d5core.lv1 import zoo
    from d5core.onnx.network import Network

    if name.endswith(".onnx"):
        return Network.load(name)
    if name in zoo.LIGHT_MODELS and name not in zoo.model_names():
        return Network(zoo.light_model(name)[0])
    return zoo.build(name, **kwargs)


def executor_by_name(
    name: str, network: Network, manager: PluginManager | None = None
) -> GraphExecutor:
    """Instantiate the graph executor ``name`` on ``network``."""
    from d5core.levels.networks import GraphExecutor

    factory = (manager or get_plugin_manager()).load("d5.frameworks", name)
    executor = factory(network)
    if not isinstance(executor, GraphExecutor):
        raise UsageError(f"graph executor {name!r} is not a GraphExecutor; fix its plugin")
    return executor


def fallback_nodes(executor: Any) -> dict[str, str]:
    """The nodes ``executor`` ran on a fallback engine, by its ``details()``: node name
    -> operator type (empty when none, or when the executor does not say)."""
    details = getattr(executor, "details", None)
    try:
        found = details().get("fallback") if callable(details) else None
    except Exception:  # a report must not break the run
        return {}
    return {str(k): str(v) for k, v in found.items()} if isinstance(found, Mapping) else {}


def fallback_note(name: str, executor: Any) -> str:
    """One line saying which operators ``executor`` (called ``name``) ran on its
    fallback engine (forward only); empty when none."""
    nodes = fallback_nodes(executor)
    if not nodes:
        return ""
    details: Mapping[str, Any] = getattr(executor, "details", dict)()
    engine = str(details.get("fallback_engine") or "a fallback engine")
    ops = ", ".join(sorted(set(nodes.values())))
    return f"the {name} executor ran {len(nodes)} node(s) on {engine} (forward only): {ops}"


def with_loss(network: Network, kind: str = "cross_entropy") -> tuple[Network, str]:
    """A copy of ``network`` with a ``kind`` loss (``cross_entropy``, ``mse``) on its first
    output."""
    trained = network.copy()
    loss = trained.add_loss(trained.outputs[0].name, kind=kind, labels="labels")
    return trained, loss


#: Samples per step when neither ``--batch`` nor the model fixes the batch.
DEFAULT_BATCH = 32
#: Operators whose second input holds class indices along axis 1 of the first.
_CLASS_LOSSES = frozenset({"SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss"})


def resolve_batch(network: Network, batch: int | None, *, what: str = "the model") -> int:
    """The samples per step ``network`` runs when ``batch`` is asked for.

    An input with a symbolic first dimension takes ``batch`` (:data:`DEFAULT_BATCH`
    when ``None``). A model whose inputs all fix their first dimension runs that batch:
    asking for another one is refused, since the graph cannot be re-batched.

    :raises UsageError: for a non-positive ``batch``, or one a fixed-batch model cannot run.
    """
    if batch is not None and batch <= 0:
        raise UsageError(f"--batch must be positive, got {batch}")
    batched = [info for info in network.inputs if info.shape]
    if not batched or any(info.shape[0] is None for info in batched):
        return DEFAULT_BATCH if batch is None else batch
    first = batched[0]
    own = int(first.shape[0] or 0)
    if batch is not None and batch != own:
        raise UsageError(
            f"{what} has a fixed batch of {own} (input {first.name!r} has shape "
            f"{tuple(first.shape)}) and cannot be re-batched; leave out --batch or pass "
            f"--batch {own}"
        )
    return own


def _label_classes(network: Network, name: str) -> int | None:
    """Classes of the integer input ``name``: axis 1 of the scores of the loss that
    reads it, else axis 1 of the first output; ``None`` when unknown."""
    scores = network.outputs[0].name if network.outputs else ""
    for node in network.nodes:
        if node.op_type in _CLASS_LOSSES and len(node.input) > 1 and node.input[1] == name:
            scores = node.input[0]
            break
    shape = next((o.shape for o in network.outputs if o.name == scores), None)
    if shape is None:
        info = network.value_infos().get(scores)
        shape = info.shape if info is not None else None
    if shape and len(shape) >= 2 and isinstance(shape[1], int) and shape[1] > 0:
        return shape[1]
    return None


#: Model metadata key prefix: ``d5.input_high.<input>`` is that integer input's bound.
_INPUT_HIGH = "d5.input_high."


def _input_high(network: Network, name: str) -> int | None:
    """The exclusive upper bound the model's metadata gives the integer input ``name``.

    :raises UsageError: for an entry that is not a positive integer.
    """
    for entry in network.model.metadata_props:
        if entry.key == f"{_INPUT_HIGH}{name}":
            try:
                high = int(entry.value)
            except ValueError:
                high = 0
            if high <= 0:
                raise UsageError(
                    f"model metadata {entry.key}={entry.value!r} must be a positive integer "
                    f"(the exclusive bound of input {name!r}); fix the model"
                )
            return high
    return None


#: Model metadata by which a model declares that its outputs (and gradients) hold NaN or
#: infinity by design for the inputs d5 generates: ``d5.nonfinite_outputs = "expected"``.
NONFINITE_KEY = "d5.nonfinite_outputs"


def declares_nonfinite(network: Network) -> bool:
    """Whether ``network``'s metadata declares non-finite results expected
    (:data:`NONFINITE_KEY`); they then pass only where they equal the reference's.

    :raises UsageError: for a value other than ``expected``.
    """
    for entry in network.model.metadata_props:
        if entry.key == NONFINITE_KEY:
            if entry.value != "expected":
                raise UsageError(
                    f"model metadata {entry.key}={entry.value!r}: the only value is "
                    "'expected'; fix the model or drop the entry"
                )
            return True
    return False


#: The element kinds d5 can generate feeds of: bool, signed and unsigned integers, floats.
_FEED_KINDS = "biuf"


def _check_feed_type(name: str, dtype: str) -> None:
    """Refuse an input whose element type d5 cannot generate data for (a string tensor,
    complex numbers, bfloat16, ...), before any executor sees it."""
    try:
        kind: str = np.dtype(dtype or "float32").kind
    except TypeError:
        kind = ""
    if kind not in _FEED_KINDS:
        shown = "string" if kind in ("O", "U", "S") else (dtype or "undefined")
        raise UsageError(
            f"input {name!r} of the model is a {shown} tensor, which d5 cannot generate "
            f"inputs for; give the model float, integer or bool inputs"
        )


def _feed_shapes(network: Network, batch: int) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    for info in network.inputs:
        _check_feed_type(info.name, info.dtype)
        dims = list(info.shape)
        if dims and dims[0] is None:
            dims[0] = batch
        shape = tuple(d for d in dims if isinstance(d, int) and d > 0)
        if len(shape) != len(dims):
            raise UsageError(
                f"input {info.name!r} of the model has shape {tuple(info.shape)} with an "
                f"unknown dimension other than the batch; give the model fixed shapes"
            )
        shapes[info.name] = shape
    return shapes


def feeds_nbytes(network: Network, batch: int) -> int:
    """A lower bound on the memory :func:`make_feeds` takes, in bytes: the feeds, and
    the float64 draw the largest float input is generated from."""
    shapes = _feed_shapes(network, batch)
    total, draw = 0, 0
    for info in network.inputs:
        elements = int(np.prod(shapes[info.name], dtype=object))
        dtype = np.dtype(info.dtype or "float32")
        total += elements * dtype.itemsize
        if not np.issubdtype(dtype, np.integer):
            draw = max(draw, elements * 8)
    return total + draw


def make_feeds(network: Network, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input; the first (symbolic) dimension is ``batch``.

    Float inputs are standard normal. An integer input holds values in ``[0, high)``:
    ``high`` is the model's metadata entry ``d5.input_high.<input name>`` when it has one
    (token ids below the vocabulary: the zoo's sequence models write it), else the number
    of classes on axis 1 of the scores of the loss that reads it (as
    ``SoftmaxCrossEntropyLoss`` reads them), else of the first output.

    :raises UsageError: for an unknown dimension other than the batch, or feeds larger
        than the free memory (checked before anything is allocated).
    """
    from d5core.lv0.workloads.memory import check_fits

    shapes = _feed_shapes(network, batch)
    check_fits(
        feeds_nbytes(network, batch),
        f"the inputs of {network.name or 'the model'} at batch {batch} need at least {{need}}",
        "give the model smaller input shapes or a smaller --batch",
    )
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for info in network.inputs:
        shape = shapes[info.name]
        if np.issubdtype(np.dtype(info.dtype), np.integer):
            high = _input_high(network, info.name) or _label_classes(network, info.name) or 2
            feeds[info.name] = rng.integers(0, high, shape, dtype=np.dtype(info.dtype))
        else:
            feeds[info.name] = rng.standard_normal(shape).astype(info.dtype)
    return feeds


def samples_in(network: Network, feeds: Mapping[str, np.ndarray]) -> int:
    """The samples one step on ``feeds`` processes: the first dimension of the first
    graph input that has one (1 for a model of scalar inputs)."""
    for info in network.inputs:
        value = feeds.get(info.name)
        if value is not None and np.ndim(value) > 0:
            return int(np.shape(value)[0])
    return 1


# -- validation ------------------------------------------------------------------------


@dataclass
class NetworkValidation:
    """Outputs and gradients of one executor compared with the reference executor's."""

    model: str
    executor: str
    batch: int
    #: The reference executor the outputs and gradients were compared with.
    against: str = ""
    outputs: list[Any] = field(default_factory=list)
    gradients: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Nodes an executor ran on a fallback engine (its ``details()``): executor name ->
    #: {node name: operator type}; only executors that had some.
    fallback: dict[str, dict[str, str]] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in [*self.outputs, *self.gradients])

    def failures(self) -> list[str]:
        lines = [f"{c.label}: {c.failed_metric}: {c.detail}" for c in self.outputs if not c.passed]
        lines += [
            f"gradient of {c.name}: {c.failed_metric}: {c.detail}"
            for c in self.gradients
            if not c.passed
        ]
        return lines

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "executor": self.executor,
            "against": self.against,
            "batch": self.batch,
            "passed": self.passed,
            "outputs": [c.to_json() for c in self.outputs],
            "gradients": [c.to_json() for c in self.gradients],
            "notes": self.notes,
            "fallback": self.fallback,
            "failures": self.failures(),
        }


def validate_network(
    model: str,
    executor: str,
    *,
    batch: int = 2,
    seed: int = 0,
    tolerances: Any = None,
    manager: PluginManager | None = None,
    reference: str | None = None,
    allow_nonfinite: bool = False,
) -> NetworkValidation:
    """Compare ``executor``'s outputs (and gradients, when it trains) with the reference's.

    A NaN or infinity in the executor's outputs or gradients fails its check, even where
    the reference gives the same (:func:`~d5core.validate.operators.check_arrays`).

    :param reference: the reference executor; ``None`` takes the setting
        (:func:`~d5core.plugins.reference.reference_name`: ``D5_REFERENCE``, else numpy).
    :param allow_nonfinite: non-finite results are expected for the model's inputs (as
        its metadata may declare, :func:`declares_nonfinite`): they pass where they equal
        the reference's exactly, and a note says so.
    :raises UsageError: one line, for a reference that is not an installed executor.
    """
    from d5core.plugins.reference import reference_name
    from d5core.validate.announce import network_validated
    from d5core.validate.operators import (
        GradientCheck,
        check_arrays,
        compare_outputs,
        tolerance_for,
    )

    against = reference_name("d5.frameworks", reference, manager=manager)
    network = load_model(model)
    allow_nonfinite = allow_nonfinite or declares_nonfinite(network)
    feeds = make_feeds(network, batch, seed)
    result = NetworkValidation(model, executor, samples_in(network, feeds), against)
    names = [o.name for o in network.outputs]
    ref_executor = executor_by_name(against, network, manager)
    ref_outputs = ref_executor.inference(feeds)
    candidate = executor_by_name(executor, network, manager)
    actual = candidate.inference(feeds)
    for name, ran in ((against, ref_executor), (executor, candidate)):
        nodes = fallback_nodes(ran)
        if nodes and name not in result.fallback:
            result.fallback[name] = nodes
            result.notes.append(fallback_note(name, ran))
    result.outputs = compare_outputs(
        [actual[n] for n in names], [ref_outputs[n] for n in names], tolerances=tolerances,
        names=names, allow_nonfinite=allow_nonfinite,
    )  # fmt: skip
    if allow_nonfinite:
        result.notes.append(
            "non-finite outputs and gradients were declared expected: they pass where they "
            "equal the reference's"
        )
    if not getattr(candidate, "trains", True):
        result.notes.append(f"the {executor} executor runs inference only: gradients not checked")
        network_validated(result.to_json(), manager)
        return result
    trained, loss = with_loss(network.as_float64())
    result.notes.append("gradients compared in float64 (outputs in the model's own dtype)")
    train_feeds = make_feeds(trained, batch, seed)
    _, ref_grads = executor_by_name(against, trained, manager).inference_and_backprop(
        train_feeds, loss
    )
    _, grads = executor_by_name(executor, trained, manager).inference_and_backprop(
        train_feeds, loss
    )
    for index, name in enumerate(sorted(ref_grads)):
        check = GradientCheck(index=index, name=name, method="reference")
        if name not in grads:
            check.passed, check.failed_metric = False, "missing"
            check.detail = "the executor gives no gradient for this parameter"
        else:
            expected = np.asarray(ref_grads[name])
            tol = tolerance_for(expected.dtype, tolerances)
            metrics, failed, why = check_arrays(
                np.asarray(grads[name]), expected, tol, allow_nonfinite=allow_nonfinite
            )
            check.metrics, check.failed_metric, check.detail = metrics, failed, why
            check.passed = failed is None
        result.gradients.append(check)
    network_validated(result.to_json(), manager)
    return result


# -- benchmarking ----------------------------------------------------------------------


@dataclass
class NetworkWorkload:
    """What ``d5 bench net`` runs: the network (with its loss for a training step) and
    the feeds, made once and shared by every executor."""

    model: str
    mode: str
    network: Network
    loss: str
    feeds: dict[str, np.ndarray]
    #: Samples one step processes: what throughput counts.
    batch: int


def network_workload(
    model: str, *, batch: int | None = None, mode: str = "inference", seed: int = 0
) -> NetworkWorkload:
    """Load ``model`` and make its feeds for ``mode`` at ``batch`` (see
    :func:`resolve_batch`); every check that can refuse the request runs here.

    :raises UsageError: for an unknown mode, a batch the model cannot run, or feeds
        larger than the free memory.
    """
    if mode not in ("inference", "train-step"):
        raise UsageError(f"unknown mode {mode!r}; choose inference or train-step")
    network = load_model(model)
    size = resolve_batch(network, batch, what=model)
    loss = ""
    if mode == "train-step":
        network, loss = with_loss(network)
    feeds = make_feeds(network, size, seed)
    return NetworkWorkload(model, mode, network, loss, feeds, samples_in(network, feeds))


@dataclass
class NodeTime:
    """The time of one node (in one direction) over the breakdown's runs."""

    node: str
    op_type: str
    direction: str
    #: Seconds in each run (the node's occurrences within a run added up).
    samples: list[float]
    share: float = 0.0

    @property
    def median(self) -> float:
        return float(np.median(self.samples))

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "op_type": self.op_type,
            "direction": self.direction,
            "median": self.median,
            "share": self.share,
        }


@dataclass
class Breakdown:
    """Per-node times of one executor, and how far to trust them."""

    nodes: list[NodeTime]
    #: The sum of the node medians, in seconds (0 without nodes).
    node_sum: float
    #: The measured step (its median), in seconds.
    step: float
    #: Why there are no nodes, or why they do not add up to the step; empty when fine.
    note: str = ""

    @property
    def agrees(self) -> bool:
        """Whether the node times add up to within :data:`BREAKDOWN_TOLERANCE` (10%) of
        the measured step."""
        off = abs(self.node_sum - self.step)
        return bool(self.nodes) and off <= BREAKDOWN_TOLERANCE * self.step


#: Per-run node times: for each run, (node, op_type, direction, seconds) of every node run.
RunNodeTimes = list[list[tuple[str, str, str, float]]]

#: Runs timed per node by :func:`layer_breakdown`, after one untimed warm-up run.
BREAKDOWN_REPEATS = 5
#: How far the node sum may stray from the measured step before a warning.
BREAKDOWN_TOLERANCE = 0.10


def traced_node_times(run: Callable[[], object], repeats: int = BREAKDOWN_REPEATS) -> RunNodeTimes:
    """Per-node times of ``repeats`` runs of ``run`` from the executor's graph-node events
    (after one warm-up run whose times are dropped).

    Runs apart from the timed measurement: subscribing to node events costs time.
    """
    from d5core.bus import END, GRAPH_NODE, Event, MetricBus, use_bus

    current: list[tuple[str, str, str, float]] = []

    def collect(event: Event) -> None:
        payload = event.payload
        current.append(
            (
                str(payload.get("node", "?")),
                str(payload.get("op_type", "?")),
                str(payload.get("direction", "forward")),
                int(payload["duration_ns"]) / 1e9,
            )
        )

    bus = MetricBus()
    bus.subscribe(GRAPH_NODE + END, collect)
    runs: RunNodeTimes = []
    with use_bus(bus):
        for _ in range(repeats + 1):
            current = []
            run()
            runs.append(current)
    return runs[1:]


def _node_times(runs: RunNodeTimes) -> list[NodeTime]:
    per_run: dict[tuple[str, str, str], list[float]] = {}
    for index, events in enumerate(runs):
        for node, op_type, direction, seconds in events:
            times = per_run.setdefault((node, op_type, direction), [0.0] * len(runs))
            times[index] += seconds
    nodes = [NodeTime(n, op, d, times) for (n, op, d), times in per_run.items()]
    total = sum(n.median for n in nodes) or 1.0
    for n in nodes:
        n.share = n.median / total
    return sorted(nodes, key=lambda n: -n.median)


def layer_breakdown(runs: RunNodeTimes, step: float, *, executor: str, mode: str) -> Breakdown:
    """Per-node medians from ``runs``, checked against the measured ``step`` (seconds).

    The note says when the executor reports no nodes, when a training step's backward is
    not broken down, and when the node sum is off the step by more than 10%.
    """
    nodes = _node_times(runs)
    if not nodes:
        return Breakdown(
            [], 0.0, step,
            f"the {executor} executor cannot break a step down per node: it reports no "
            f"per-node times (graph.node events)",
        )  # fmt: skip
    node_sum = sum(n.median for n in nodes)
    result = Breakdown(nodes, node_sum, step)
    if mode == "train-step" and not any(n.direction == "backward" for n in nodes):
        result.note = (
            f"the {executor} executor breaks down the forward nodes only ({_seconds(node_sum)}"
            f" of the {_seconds(step)} step): its backward is not broken down"
        )
    elif not result.agrees:
        more = "more" if node_sum > step else "less"
        off = abs(node_sum - step) / step if step > 0 else float("inf")
        result.note = (
            f"on {executor} the node times add up to {_seconds(node_sum)}, {100 * off:.0f}% "
            f"{more} than the measured step of {_seconds(step)}: do not trust the per-node "
            f"times (tracing overhead, machine load, or work outside the nodes)"
        )
    return result


def _seconds(value: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def node_runs(
    executor: GraphExecutor, run: Callable[[], object], workload: NetworkWorkload
) -> RunNodeTimes:
    """Per-node times of ``executor``: from its own profiler where it has one (a
    ``profile_nodes(feeds, repeats)`` method, as onnxruntime's), else from the graph-node
    events it publishes while ``run`` runs."""
    profile = getattr(executor, "profile_nodes", None)
    if callable(profile) and workload.mode == "inference":
        runs: RunNodeTimes = profile(workload.feeds, BREAKDOWN_REPEATS)
        return runs
    return traced_node_times(run)


@dataclass
class NetworkTiming:
    """One measured (model, executor, mode) with its throughput."""

    model: str
    executor: str
    mode: str
    #: Samples per step, as run: what the throughput counts.
    batch: int
    measurement: Any
    per_node: Breakdown | None = None
    #: Nodes the executor ran on a fallback engine (node name -> operator type), when
    #: known (``--breakdown`` builds the executor in this process and asks it).
    fallback: dict[str, str] = field(default_factory=dict)

    @property
    def breakdown(self) -> list[dict[str, Any]]:
        """The per-node rows, slowest first; empty without a breakdown."""
        return [n.to_json() for n in self.per_node.nodes] if self.per_node else []

    def throughput_samples(self) -> list[float]:
        """Samples per second of every timed step."""
        return [self.batch / t for t in self.measurement.samples if t > 0]

    def to_json(self) -> dict[str, Any]:
        s = self.measurement.summary
        return {
            "model": self.model,
            "executor": self.executor,
            "mode": self.mode,
            "batch": self.batch,
            "median": s.median,
            "ci_low": s.ci_low,
            "ci_high": s.ci_high,
            "n": s.n,
            "stability": s.stability,
            "throughput": self.batch / s.median,
            "throughput_ci_low": self.batch / s.ci_high,
            "throughput_ci_high": self.batch / s.ci_low,
            "breakdown": self.breakdown,
            "breakdown_sum": self.per_node.node_sum if self.per_node else None,
            "breakdown_note": self.per_node.note if self.per_node else "",
            "fallback": self.fallback,
            # start-up costs, never in the samples (docs/measurement.md)
            "prepare_s": self.measurement.prepare_s,
            "first_call_s": self.measurement.first_call_s,
            "compile_s": self.measurement.compile_s,
        }


def check_trains(executor: GraphExecutor, name: str, mode: str) -> None:
    """Refuse a training step on an executor that runs inference only.

    :raises UsageError: saying how to fix the request.
    """
    if mode == "train-step" and not getattr(executor, "trains", True):
        raise UsageError(
            f"the {name} executor runs inference only; use --mode inference or "
            f"leave {name} out of --executors"
        )


def prepare_step(executor: GraphExecutor, name: str, work: NetworkWorkload) -> Callable[[], object]:
    """The callable ``d5 bench net`` times: one inference or training step on the feeds.

    :raises UsageError: for a training step on an executor that runs inference only.
    """
    check_trains(executor, name, work.mode)
    if work.mode == "train-step":
        return executor.prepare_train_step(work.feeds, work.loss)
    return executor.prepare_inference(work.feeds)
