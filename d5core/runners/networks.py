"""Level 1: validate graph executors against the reference and benchmark them.

A model is named from the zoo, from the onnx package's light models, or given as a path
to an ``.onnx`` file. Feeds are generated from a seed; every executor converts them once,
outside the timed region.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from d5core.errors import UsageError
from d5core.plugins import PluginManager, get_plugin_manager

if TYPE_CHECKING:
    from d5core.levels.networks import GraphExecutor
    from d5core.networks.network import Network

__all__ = [
    "REFERENCE_EXECUTOR",
    "NetworkTiming",
    "NetworkValidation",
    "bench_networks",
    "executor_by_name",
    "layer_breakdown",
    "load_model",
    "make_feeds",
    "validate_network",
    "with_loss",
]

#: The executor every other one is validated against.
REFERENCE_EXECUTOR = "numpy"


def load_model(name: str, **kwargs: Any) -> Network:
    """A zoo model, a light model shipped with onnx, or an ``.onnx`` file, by name."""
    from d5core.networks import zoo
    from d5core.networks.network import Network

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


def with_loss(network: Network) -> tuple[Network, str]:
    """A copy of ``network`` with a cross-entropy loss on its first output."""
    trained = network.copy()
    loss = trained.add_loss(trained.outputs[0].name, kind="cross_entropy", labels="labels")
    return trained, loss


def make_feeds(network: Network, batch: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded inputs for every graph input; the first (symbolic) dimension is ``batch``.

    Float inputs are standard normal; an int64 ``labels`` input holds class indices
    below the size of the first output's last dimension.
    """
    rng = np.random.default_rng(seed)
    classes = network.outputs[0].shape[-1] if network.outputs[0].shape else None
    feeds: dict[str, np.ndarray] = {}
    for info in network.inputs:
        dims = list(info.shape)
        if dims and dims[0] is None:
            dims[0] = batch
        shape = [d for d in dims if isinstance(d, int) and d > 0]
        if len(shape) != len(dims):
            raise UsageError(
                f"input {info.name!r} of the model has shape {tuple(info.shape)} with an "
                f"unknown dimension other than the batch; give the model fixed shapes"
            )
        if np.issubdtype(np.dtype(info.dtype), np.integer):
            high = int(classes) if isinstance(classes, int) and classes > 0 else 2
            feeds[info.name] = rng.integers(0, high, shape, dtype=np.dtype(info.dtype))
        else:
            feeds[info.name] = rng.standard_normal(shape).astype(info.dtype)
    return feeds


# -- validation ------------------------------------------------------------------------


@dataclass
class NetworkValidation:
    """Outputs and gradients of one executor compared with the reference executor's."""

    model: str
    executor: str
    batch: int
    outputs: list[Any] = field(default_factory=list)
    gradients: list[Any] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

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
            "against": REFERENCE_EXECUTOR,
            "batch": self.batch,
            "passed": self.passed,
            "outputs": [c.to_json() for c in self.outputs],
            "gradients": [c.to_json() for c in self.gradients],
            "notes": self.notes,
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
) -> NetworkValidation:
    """Compare ``executor``'s outputs (and gradients, when it trains) with the reference's."""
    from d5core.validate.operators import (
        GradientCheck,
        check_arrays,
        compare_outputs,
        tolerance_for,
    )

    network = load_model(model)
    result = NetworkValidation(model, executor, batch)
    feeds = make_feeds(network, batch, seed)
    names = [o.name for o in network.outputs]
    reference = executor_by_name(REFERENCE_EXECUTOR, network, manager).inference(feeds)
    candidate = executor_by_name(executor, network, manager)
    actual = candidate.inference(feeds)
    result.outputs = compare_outputs(
        [actual[n] for n in names], [reference[n] for n in names], tolerances=tolerances,
        names=names,
    )  # fmt: skip
    if not getattr(candidate, "trains", True):
        result.notes.append(f"the {executor} executor runs inference only: gradients not checked")
        return result
    trained, loss = with_loss(network.as_float64())
    result.notes.append("gradients compared in float64 (outputs in the model's own dtype)")
    train_feeds = make_feeds(trained, batch, seed)
    _, ref_grads = executor_by_name(REFERENCE_EXECUTOR, trained, manager).inference_and_backprop(
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
            metrics, failed, why = check_arrays(np.asarray(grads[name]), expected, tol)
            check.metrics, check.failed_metric, check.detail = metrics, failed, why
            check.passed = failed is None
        result.gradients.append(check)
    return result


# -- benchmarking ----------------------------------------------------------------------


@dataclass
class NetworkTiming:
    """One measured (model, executor, mode) with its throughput."""

    model: str
    executor: str
    mode: str
    batch: int
    measurement: Any
    breakdown: list[dict[str, Any]] = field(default_factory=list)

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
        }


def layer_breakdown(run: Callable[[], object], repeats: int = 5) -> list[dict[str, Any]]:
    """Per-node times from the executor's graph-node events, over ``repeats`` runs.

    Runs apart from the timed measurement: subscribing to node events costs time.
    """
    from d5core.bus import END, GRAPH_NODE, Event, MetricBus, use_bus

    durations: dict[tuple[str, str], list[int]] = {}

    def collect(event: Event) -> None:
        key = (str(event.payload.get("node", "?")), str(event.payload.get("op_type", "?")))
        durations.setdefault(key, []).append(int(event.payload["duration_ns"]))

    bus = MetricBus()
    bus.subscribe(GRAPH_NODE + END, collect)
    with use_bus(bus):
        for _ in range(repeats):
            run()
    medians = {key: float(np.median(v)) / 1e9 for key, v in durations.items()}
    total = sum(medians.values()) or 1.0
    rows = [
        {"node": node, "op_type": op, "median": t, "share": t / total}
        for (node, op), t in medians.items()
    ]
    return sorted(rows, key=lambda r: -r["median"])


def bench_networks(
    model: str,
    executors: Sequence[str],
    *,
    batch: int = 32,
    mode: str = "inference",
    options: Any = None,
    seed: int = 0,
    breakdown: bool = False,
    manager: PluginManager | None = None,
    on_result: Callable[[NetworkTiming], None] | None = None,
) -> list[NetworkTiming]:
    """Time ``model`` on each executor, in turn, in ``mode`` (inference or train-step)."""
    from d5core.measure.engine import measure, synchronizer_for

    network = load_model(model)
    loss = ""
    if mode == "train-step":
        network, loss = with_loss(network)
    elif mode != "inference":
        raise UsageError(f"unknown mode {mode!r}; choose inference or train-step")
    feeds = make_feeds(network, batch, seed)
    timings: list[NetworkTiming] = []
    for name in executors:
        executor = executor_by_name(name, network, manager)
        if mode == "train-step":
            if not getattr(executor, "trains", True):
                raise UsageError(
                    f"the {name} executor runs inference only; use --mode inference or "
                    f"leave {name} out of --executors"
                )
            run = executor.prepare_train_step(feeds, loss)
        else:
            run = executor.prepare_inference(feeds)
        m = measure(
            run,
            options,
            name=f"{name} {model} {mode}",
            synchronize=synchronizer_for(executor.device),
        )
        timing = NetworkTiming(model, name, mode, batch, m)
        if breakdown:
            timing.breakdown = layer_breakdown(run)
        timings.append(timing)
        if on_result is not None:
            on_result(timing)
    return timings
