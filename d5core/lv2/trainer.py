"""The level-2 training loop: steps, test passes, stopping conditions, divergence.

The :class:`Trainer` owns the parameters as a dict of numpy arrays; each step runs the
executor's forward and backward pass, lets the optimizer update the arrays in place and
hands them back to the executor. Everything it does is published on the metric bus
(``run.start``, ``train.step``, ``train.epoch``, ``test.pass``) and measured by the
``d5.metrics`` metrics subscribed to it, so the trainer's own bookkeeping and a
plugin's metric read the same events. One exception keeps steps cheap: while the
built-in metrics' shared step feed alone listens to ``train.step``, the steps are handed
to it in blocks (:class:`~d5core.metrics._common.StepBlock`) before each test pass and
each epoch's end, instead of one event per step; anything else that listens to
``train.step`` gets every step as an event.

When the optimizer is native to the executor's framework (``optimizer.native ==
executor.name``, the executor is a :class:`~d5core.levels.training.NativeTraining`) and
no gradient modifiers are set, the trainer takes the *native path* instead: the
optimizer is bound to the executor's live tensors and each step stays in the framework
(no numpy round trip). The choice is reported as
:attr:`TrainingResult.optimizer_path`. On that path an executor that offers
``native_correct_counter`` (see :class:`CorrectCounter`) counts the correct predictions
of training on its device, read once per epoch: the end of ``train.epoch`` carries the
epoch's ``correct`` and ``count`` instead of each ``train.step``.

Labels may be class indices ``(N,)`` or, for sequence models (language models), one
class index per position ``(N, d1, ...)`` with scores ``(N, C, d1, ...)``, the layout
ONNX ``SoftmaxCrossEntropyLoss`` reads: predictions are the argmax over axis 1, and a
*sample* is then one predicted position (a token), so ``count``, ``samples`` and
throughput count positions. Test passes over sequence labels, and every run with a
target perplexity, also carry ``perplexity`` (the exponential of the mean per-position
cross-entropy), which the perplexity metrics (:mod:`d5core.lv2.metrics.perplexity`) read.

Labels of float dtype are regression targets (a dataset whose ``num_classes`` is
``None``, trained with an MSE loss): nothing counts correct predictions, test passes
carry the mean test ``loss`` and no accuracy, and the target is ``target_loss``.

The run's clock (``run.start``, time to accuracy, wall time, time budget) starts at the
first touch of data, as MLPerf's does. A caller that loads the data before it can build
the trainer starts a :class:`RunClock` before loading and hands it over (``clock=``).
With ``budget_clock="training"`` the time budget counts training time only: the test
passes are left out, as AlgoPerf leaves out evaluation. Every run with a target also
reports its time to target with the test passes left out
(:attr:`TrainingResult.time_to_target_training`) and the seconds of the test passes up
to then (:attr:`TrainingResult.eval_time`).

Two call points serve training algorithms (``d5.algorithms``): ``prepare_for_eval``
is called before each test pass with the current parameters (numpy arrays) and the
optimizer, and may hand back other parameters to evaluate (an average, say), after
which the live ones are restored for training; ``data_selection`` picks each step's
example indices from the sampler's.
"""

from __future__ import annotations

import gc
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from d5core.bus import (
    END,
    RUN_END,
    RUN_START,
    TEST_PASS,
    TRAIN_EPOCH,
    TRAIN_STEP,
    MetricBus,
    attach_plugins,
)
from d5core.errors import UsageError
from d5core.levels.training import CorrectCounter, NativeTraining
from d5core.metrics._common import StepBlock, StepFeed

__all__ = [
    "BUDGET_CLOCKS",
    "COMPLETE",
    "DIVERGED",
    "NATIVE",
    "NUMPY",
    "RUN_START",
    "TTA_PARTS",
    "CorrectCounter",
    "Curves",
    "DataSelection",
    "PrepareForEval",
    "RunClock",
    "StopConditions",
    "Trainer",
    "TrainingResult",
    "default_metrics",
    "native_capable",
]

COMPLETE = "complete"
DIVERGED = "diverged"
#: The parts of a time to accuracy (:attr:`TrainingResult.time_to_accuracy_parts`),
#: which add up to it.
TTA_PARTS: dict[str, str] = {
    "setup": "from the clock's start to the first step: loading the data, building the "
    "model, the executor and the optimizer",
    "steps": "the training steps' timed work (forward, backward, optimizer update)",
    "tests": "the test passes, the one that reached the target included",
    "recording": "streaming the samples into the results store while training",
    "loop": "the rest: reading batches from the dataset, the sampler, the metrics, the "
    "trainer's bookkeeping",
}
#: What :attr:`StopConditions.time_budget_s` counts: ``"wall"`` every second since the
#: clock started, ``"training"`` those outside the test passes.
BUDGET_CLOCKS = ("wall", "training")
#: A training algorithm's ``prepare_for_eval``: ``(params, optimizer)`` to the
#: parameters a test pass evaluates, or ``None`` for the live ones.
PrepareForEval = Callable[[Mapping[str, np.ndarray], Any], Mapping[str, np.ndarray] | None]
#: A training algorithm's ``data_selection``: ``(indices, step, rng)`` to the example
#: indices of the step's batch.
DataSelection = Callable[[np.ndarray, int, np.random.Generator], np.ndarray]
#: The second word of the seed of ``data_selection``'s generator (``[seed, this]``).
_SELECTION_STREAM = 0x5E1EC7
#: :attr:`TrainingResult.optimizer_path` values.
NATIVE = "native"
NUMPY = "numpy"
_LEVEL = 2


class _Dataset(Protocol):
    def __len__(self) -> int: ...

    def batch(self, indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


class _Sampler(Protocol):
    def set_epoch(self, epoch: int) -> None: ...

    def __iter__(self) -> Any: ...


class _Optimizer(Protocol):
    lr: float

    def step(self, params: dict[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> Any: ...


@dataclass(frozen=True)
class StopConditions:
    """When training stops; the first condition met wins.

    :param max_epochs: epochs to run at most (always bounded).
    :param max_steps: optimisation steps at most, or ``None``.
    :param time_budget_s: seconds at most (checked after each step; which seconds count:
        ``budget_clock``), or ``None``.
    :param target_accuracy: stop at the first test pass reaching it, or ``None``.
    :param target_perplexity: stop at the first test pass whose perplexity is at most
        this, or ``None``.
    :param patience: stop after this many test passes without a better accuracy (a lower
        test loss for regression targets), or ``None``.
    :param target_loss: stop at the first test pass whose mean test loss is at most this
        (a regression's target, any run's with a loss), or ``None``.
    :param budget_clock: what ``time_budget_s`` counts: ``"wall"`` (every second) or
        ``"training"`` (the test passes left out, as AlgoPerf does).
    """

    max_epochs: int = 1
    max_steps: int | None = None
    time_budget_s: float | None = None
    target_accuracy: float | None = None
    patience: int | None = None
    target_perplexity: float | None = None
    target_loss: float | None = None
    budget_clock: str = "wall"

    def __post_init__(self) -> None:
        if self.max_epochs < 1:
            raise UsageError(f"epochs must be at least 1, got {self.max_epochs}")
        if self.max_steps is not None and self.max_steps < 1:
            raise UsageError(f"max_steps must be at least 1, got {self.max_steps}")
        if self.time_budget_s is not None and not self.time_budget_s > 0:
            raise UsageError(f"time_budget must be positive, got {self.time_budget_s}")
        if self.patience is not None and self.patience < 1:
            raise UsageError(f"patience must be at least 1, got {self.patience}")
        if self.target_perplexity is not None and not self.target_perplexity > 1:
            raise UsageError(
                f"target_perplexity must be above 1 (a perfect model scores 1), "
                f"got {self.target_perplexity}"
            )
        if self.target_loss is not None and not (
            self.target_loss > 0 and math.isfinite(self.target_loss)
        ):
            raise UsageError(f"target_loss must be a positive number, got {self.target_loss}")
        if self.budget_clock not in BUDGET_CLOCKS:
            raise UsageError(
                f'budget_clock must be "wall" or "training", got {self.budget_clock!r}'
            )

    def targets(self) -> dict[str, float]:
        """The targets set, by kind (``accuracy``, ``perplexity``, ``loss``)."""
        found = {
            "accuracy": self.target_accuracy,
            "perplexity": self.target_perplexity,
            "loss": self.target_loss,
        }
        return {kind: float(v) for kind, v in found.items() if v is not None}


@dataclass
class TrainingResult:
    """What a training run gave.

    ``status`` is ``"complete"`` or ``"diverged"``; ``stop_reason`` says which condition
    ended it. ``losses`` has one training loss per step (NaN/inf kept as they were),
    ``step_times_s`` and ``throughput_samples_s`` one entry per step, ``test_curve`` one
    dict per test pass. ``metrics`` maps each attached metric's name to its result.
    """

    status: str
    stop_reason: str
    epochs: int
    steps: int
    samples: int
    wall_s: float
    final_test_accuracy: float | None
    best_test_accuracy: float | None
    time_to_accuracy: float | None
    losses: list[float] = field(default_factory=list)
    step_times_s: list[float] = field(default_factory=list)
    throughput_samples_s: list[float] = field(default_factory=list)
    test_curve: list[dict[str, Any]] = field(default_factory=list)
    throughput: dict[str, float] = field(default_factory=dict)
    diverged_at: dict[str, int] | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    #: ``"native"`` (framework tensors, bound optimizer) or ``"numpy"`` (numpy arrays).
    optimizer_path: str = NUMPY
    #: Perplexity of the last and of the best test pass, and seconds until the target
    #: perplexity was first reached (``None``: not measured, or not reached).
    final_perplexity: float | None = None
    best_perplexity: float | None = None
    time_to_perplexity: float | None = None
    #: Where the time to accuracy went, in seconds, by :data:`TTA_PARTS` name (empty when
    #: the target was not reached).
    time_to_accuracy_parts: dict[str, float] = field(default_factory=dict)
    #: Mean test loss of the last and of the best (lowest) test pass, and seconds until
    #: ``target_loss`` was first reached (``None``: not measured, or not reached).
    final_test_loss: float | None = None
    best_test_loss: float | None = None
    time_to_loss: float | None = None
    #: The stop conditions' targets, by kind (``accuracy``, ``perplexity``, ``loss``).
    targets: dict[str, float] = field(default_factory=dict)
    #: The kind of the target reached first (``None``: none reached), and its time with
    #: the test passes left out (AlgoPerf's training time to target).
    target_reached: str | None = None
    time_to_target_training: float | None = None
    #: Seconds spent in test passes until the target was reached, or in the whole run
    #: when it was not.
    eval_time: float = 0.0
    #: Whether the labels were regression targets (floats): no accuracy is measured.
    regression: bool = False


@dataclass
class Curves:
    """What a run has measured so far, one entry appended per step or test pass.

    The trainer fills it as it goes and hands it to its ``on_progress`` callback, so
    that a caller can store the samples while the run is still going.
    """

    losses: list[float] = field(default_factory=list)
    step_times_s: list[float] = field(default_factory=list)
    throughput_samples_s: list[float] = field(default_factory=list)
    test_curve: list[dict[str, Any]] = field(default_factory=list)


class RunClock:
    """The start of a run: metrics attached to the bus, ``run.start`` published.

    Start it just before the first touch of data (``RunClock.start`` before loading
    the datasets) and give it to the :class:`Trainer` built afterwards: time to
    accuracy, wall time and the time budget then count from that moment.

    :param bus: the bus of the run (the trainer publishes on it).
    :param metrics: the metrics measured on it, attached here.
    """

    def __init__(self, bus: MetricBus, metrics: Iterable[Any]) -> None:
        self.bus = bus
        self.metrics = list(metrics)
        self.t0 = 0.0
        self.started = False
        self._frozen = False

    @classmethod
    def start(
        cls,
        target_accuracy: float | None = None,
        *,
        bus: MetricBus | None = None,
        metrics: Iterable[Any] | None = None,
        target_perplexity: float | None = None,
        target_loss: float | None = None,
    ) -> RunClock:
        """Attach ``metrics`` (default :func:`default_metrics`) and publish ``run.start``."""
        chosen = (
            default_metrics(target_accuracy, target_perplexity, target_loss=target_loss)
            if metrics is None
            else metrics
        )
        clock = cls(bus if bus is not None else MetricBus(), chosen)
        clock.begin()
        return clock

    def begin(self, **payload: Any) -> None:
        """Attach the metrics and the plugins (``d5_bus_subscribe``, once per bus), freeze
        the objects alive now out of the garbage collector's scans, take the time, then
        publish ``run.start`` with ``payload``.

        The time is taken first: ``run.start`` (where time to accuracy starts) is then
        never earlier than the start of the run's wall time, so time to accuracy never
        exceeds the wall time, whatever the subscribers of ``run.start`` take.

        The freeze (``gc.freeze()``, undone by :meth:`stop`): d5's modules and plugins
        add some 140,000 objects to what the framework and a hand-written script hold,
        and a full collection during the run scanned them all, 0.35-0.64 s inside the
        time to accuracy of a digits run (issue 30). Frozen, the objects alive before the
        run are not scanned until it stops; the collections of the run's own objects
        happen as in any script. Nothing is freed later than it would be: garbage from
        before the run is collected after it.
        """
        for metric in self.metrics:
            metric.attach(self.bus)
        attach_plugins(self.bus)
        gc.freeze()
        self._frozen = True
        self.t0, self.started = time.perf_counter(), True
        self.bus.publish(RUN_START, level=_LEVEL, **payload)

    def stop(self) -> None:
        """Detach the metrics (a run that ended, or one that never trains) and hand the
        objects frozen by :meth:`begin` back to the garbage collector."""
        if self._frozen:
            gc.unfreeze()
            self._frozen = False
        if self.started:
            for metric in self.metrics:
                metric.detach()
            self.started = False


def default_metrics(
    target: float | None,
    target_perplexity: float | None = None,
    *,
    target_loss: float | None = None,
) -> list[Any]:
    """The training metrics every run measures, loaded from the ``d5.metrics`` group.

    With ``target_perplexity`` (a language model's run) the perplexity metrics
    ``validation_perplexity``, ``final_perplexity`` and ``time_to_perplexity`` too; with
    ``target_loss``, ``time_to_loss``.
    """
    from d5core.plugins import get_plugin_manager

    manager = get_plugin_manager()
    out: list[Any] = []
    for name in ("loss_curve", "training_accuracy", "test_accuracy", "final_test_accuracy"):
        out.append(manager.load("d5.metrics", name)())
    out.append(manager.load("d5.metrics", "time_to_accuracy")(target=target))
    out.append(manager.load("d5.metrics", "throughput")(event=TRAIN_STEP))
    if target_perplexity is not None:
        for name in ("validation_perplexity", "final_perplexity"):
            out.append(manager.load("d5.metrics", name)())
        out.append(manager.load("d5.metrics", "time_to_perplexity")(target=target_perplexity))
    if target_loss is not None:
        out.append(_time_to_loss(manager)(target=target_loss))
    return out


def _time_to_loss(manager: Any) -> Any:
    """The ``time_to_loss`` metric class: its ``d5.metrics`` entry, else d5's own."""
    if "time_to_loss" in manager.names("d5.metrics"):
        return manager.load("d5.metrics", "time_to_loss")
    from d5core.lv2.metrics.loss import TimeToLoss  # an installation without its entry

    return TimeToLoss


def _first_output(executor: Any) -> str:
    network = getattr(executor, "network", None)
    outputs = getattr(network, "outputs", None)
    if not outputs:
        raise UsageError("the executor's network has no outputs to read logits from")
    return str(outputs[0].name)


def native_capable(executor: Any, optimizer: Any) -> bool:
    """Whether ``optimizer`` can step ``executor``'s own tensors.

    True when the executor is a :class:`~d5core.levels.training.NativeTraining`
    (``to_native``, ``native_parameters``, ``native_train_step``), ``optimizer.native``
    names its framework (``executor.name``) and the optimizer has ``bind`` and
    ``native_step``. ``native_correct_counter`` (a :class:`CorrectCounter`) is optional:
    without it training accuracy is counted on the host every step.
    """
    native = getattr(optimizer, "native", None)
    return (
        native is not None
        and native == getattr(executor, "name", None)
        and isinstance(executor, NativeTraining)
        and callable(getattr(optimizer, "bind", None))
        and callable(getattr(optimizer, "native_step", None))
    )


def _count_correct(logits: Any, labels: Any) -> int:
    """Correct predictions of a step (argmax over the class axis 1 of scores
    ``(N, C, ...)``), in the framework's tensors when they have torch's
    ``argmax``/``sum``/``item``, else through numpy (one host sync either way)."""
    try:
        return int((logits.argmax(1) == labels).sum().item())
    except AttributeError:
        return int(np.sum(np.argmax(_on_host(logits), axis=1) == _on_host(labels)))


def _perplexity(loss: float) -> float:
    """``exp(loss)``, ``inf`` where it overflows."""
    from d5core.lv2.metrics.perplexity import perplexity_of_loss

    return perplexity_of_loss(loss)


def _on_host(value: Any) -> np.ndarray:
    """A framework tensor as a numpy array: through ``asnumpy()`` where the tensor has
    one (MXNet's NDArray, which numpy cannot read directly), else ``np.asarray``."""
    to_numpy = getattr(value, "asnumpy", None)
    return np.asarray(to_numpy() if callable(to_numpy) else value)


def _label_kinds(dataset: Any) -> tuple[bool, bool]:
    """``(regression, sequence)`` of ``dataset``'s labels, from its first example:
    regression when they are floats (targets, not class indices); sequence when each
    example has more than one class index (one per position: ``(N, d1, ...)``). Both
    ``False`` for an empty dataset."""
    try:
        size = len(dataset)
    except TypeError:
        return False, False
    if size == 0:
        return False, False
    _, y = dataset.batch(np.arange(1))
    regression = bool(np.issubdtype(np.asarray(y).dtype, np.floating))
    return regression, not regression and bool(np.ndim(y) > 1)


def _first_input(executor: Any) -> str:
    network = getattr(executor, "network", None)
    for info in getattr(network, "inputs", ()):
        if info.name != "labels":
            return str(info.name)
    raise UsageError("the executor's network has no data input")


@dataclass(slots=True)
class _Unpublished:
    """Finished steps of the current epoch not yet handed to the step feed.

    Their losses and times are the run's :class:`Curves` from ``first_index`` on; the
    columns the curves lack are kept here.
    """

    feed: StepFeed
    epoch: int
    first_step: int
    first_index: int
    host_counts: bool
    batch_sizes: list[int] = field(default_factory=list)
    lrs: list[float] = field(default_factory=list)
    correct: list[int] = field(default_factory=list)
    starts_ns: list[int] = field(default_factory=list)
    data_t0_ns: list[int] = field(default_factory=list)
    data_ns: list[int] = field(default_factory=list)

    def timed(self, t0: float, data_t0_ns: int, data_ns: int) -> None:
        """Keep when a step began (``t0``: :func:`time.perf_counter`) and its batch's
        reading (as a published step's payload carries them)."""
        self.starts_ns.append(int(t0 * 1e9))
        self.data_t0_ns.append(data_t0_ns)
        self.data_ns.append(data_ns)


class Trainer:
    """Trains ``executor`` (a network with a loss) on ``train_set`` with ``optimizer``.

    :param executor: a :class:`d5core.levels.networks.GraphExecutor` on a network made
        by :func:`d5core.lv1.runner.with_loss` (inputs: data and ``labels``).
    :param loss: the name of the loss output.
    :param optimizer: an object with a settable ``lr`` and ``step(params, grads)`` that
        updates numpy arrays in place.
    :param train_set: a dataset with ``len()`` and ``batch(indices) -> (x, y)``.
    :param sampler: iterable of index arrays per epoch, with ``set_epoch(e)``.
    :param test_set: the dataset of the test passes, or ``None`` for none.
    :param test_every: ``"epoch"``, or a number of steps between test passes.
    :param schedule: ``step -> learning rate``, or ``None`` to keep the optimizer's.
    :param modifiers: ``(params, grads) -> grads`` (clipping, weight decay), or ``None``.
    :param transforms: ``(x, rng) -> x`` on training batches, or ``None``.
    :param stop: the stopping conditions.
    :param seed: seeds the transforms' random generator.
    :param bus: the bus to publish on; a fresh one by default.
    :param metrics: metrics to attach (default :func:`default_metrics`).
    :param eval_batch_size: batch size of the test passes.
    :param progress: show a progress bar; by default only when stdout is a terminal.
    :param logits: the output holding the logits (default: the network's first output).
    :param native: ``None`` (default) takes the native path whenever
        :func:`native_capable` holds and no ``modifiers`` are set (they work on numpy
        gradients); ``False`` forces the numpy path; ``True`` requires the native path
        (a :class:`UsageError` otherwise).
    :param clock: a :class:`RunClock` started before the data was loaded; its bus and
        metrics are the run's (``bus`` and ``metrics`` must then be left out). Without
        it the clock starts when :meth:`run` begins.
    :param on_progress: called with the run's :class:`Curves` after every step and
        every test pass (to store samples as they come).
    :param prepare_for_eval: ``(params, optimizer) -> params or None``, called before
        each test pass with the current parameters as numpy arrays (the trainable ones)
        and the optimizer; parameters it returns are evaluated instead of the live
        ones, which are restored before training goes on. Its own time counts as
        training time; copying the parameters around it counts as test time.
    :param data_selection: ``(indices, step, rng) -> indices``: the example indices of
        each step's batch, chosen from the sampler's; ``rng`` is a generator derived
        from ``seed``, the same for every run with that seed.
    """

    #: The numpy path's forward and backward pass, chosen when the run starts: the
    #: executor's ``inference_and_backprop_streamed`` when it has one (the gradients
    #: as its backward pass finishes them, so that the optimizer's step overlaps the
    #: rest of that pass), else its ``inference_and_backprop``.
    _backprop: Callable[[dict[str, np.ndarray], str], tuple[Any, Mapping[str, np.ndarray]]]

    def __init__(
        self,
        executor: Any,
        loss: str,
        optimizer: _Optimizer,
        train_set: _Dataset,
        sampler: _Sampler,
        *,
        test_set: _Dataset | None = None,
        test_every: str | int = "epoch",
        schedule: Callable[[int], float] | None = None,
        modifiers: Callable[[Any, Any], Any] | None = None,
        transforms: Callable[..., Any] | None = None,
        stop: StopConditions | None = None,
        seed: int = 0,
        bus: MetricBus | None = None,
        metrics: Iterable[Any] | None = None,
        eval_batch_size: int = 256,
        progress: bool | None = None,
        logits: str | None = None,
        native: bool | None = None,
        agree: Callable[[str | None], str | None] | None = None,
        clock: RunClock | None = None,
        on_progress: Callable[[Curves], None] | None = None,
        prepare_for_eval: PrepareForEval | None = None,
        data_selection: DataSelection | None = None,
    ) -> None:
        if test_every != "epoch" and not (isinstance(test_every, int) and test_every > 0):
            raise UsageError(
                f"test_every must be 'epoch' or a positive step count, got {test_every!r}"
            )
        self.executor = executor
        self.loss = loss
        self.optimizer = optimizer
        #: Turns this process's reason to stop (or ``None``) into the one all processes
        #: of a distributed run act on, so that ranks whose parameters differ (the
        #: inconsistent schemes) still stop at the same step; ``None`` for one process.
        self.agree = agree
        self.train_set = train_set
        self.sampler = sampler
        self.test_set = test_set
        self.test_every = test_every
        self.schedule = schedule
        self.modifiers = modifiers
        self.transforms = transforms
        self.stop = stop or StopConditions()
        self.seed = seed
        if clock is not None and (bus is not None or metrics is not None):
            raise UsageError("a Trainer given a clock takes its bus and metrics from it")
        self.clock = clock
        self.on_progress = on_progress
        self.prepare_for_eval = prepare_for_eval
        self.data_selection = data_selection
        self.curves = Curves()
        if clock is not None:
            self.bus, self.metrics = clock.bus, clock.metrics
        else:
            self.bus = bus if bus is not None else MetricBus()
            self.metrics = list(
                default_metrics(
                    self.stop.target_accuracy,
                    self.stop.target_perplexity,
                    target_loss=self.stop.target_loss,
                )
                if metrics is None
                else metrics
            )
        #: Whether labels are regression targets (floats) and whether they hold one
        #: class per position, ``(N, d1, ...)`` (sequence models).
        self.regression, self.sequence_labels = _label_kinds(train_set)
        if self.regression and (
            self.stop.target_accuracy is not None or self.stop.target_perplexity is not None
        ):
            raise UsageError(
                "the training labels are regression targets (floats): a target accuracy or "
                "perplexity means nothing there; set target_loss instead"
            )
        #: Whether a metric reads training's correct predictions (``reads_correct``, as
        #: ``training_accuracy`` does); on the native path nothing is counted otherwise.
        #: Never for regression targets: there is nothing to count.
        self._reads_correct = not self.regression and any(
            getattr(m, "reads_correct", False) for m in self.metrics
        )
        self.eval_batch_size = eval_batch_size
        self.progress = sys.stdout.isatty() if progress is None else progress
        self.logits = logits or _first_output(executor)
        self.input = _first_input(executor)
        self.params: dict[str, np.ndarray] = {}
        self._rng = np.random.default_rng(seed)
        # data_selection's generator: a stream of its own, so that the transforms' draws
        # are the same with and without it
        self._selection_rng = np.random.default_rng([seed, _SELECTION_STREAM])
        #: The dtype labels are fed in: class indices, or regression targets.
        self.label_dtype: type[np.generic] = np.float32 if self.regression else np.int64
        #: Whether test passes report perplexity.
        self.reports_perplexity = self.sequence_labels or self.stop.target_perplexity is not None
        capable = native_capable(executor, optimizer) and modifiers is None
        if native and not capable:
            raise UsageError(
                f"optimizer {getattr(optimizer, 'name', type(optimizer).__name__)!r} cannot "
                f"step the {getattr(executor, 'name', '?')!r} executor natively"
                + (" with gradient modifiers" if modifiers is not None else "")
            )
        #: ``"native"`` or ``"numpy"``: how each step hands gradients to the optimizer.
        self.optimizer_path = NATIVE if capable and native is not False else NUMPY
        self._bound = False
        # Native path, set when the optimizer is bound: the executor's device counter of
        # correct predictions (None without one) and its apply_running_stats.
        self._counter: CorrectCounter | None = None
        self._apply_stats: Callable[[], Any] | None = None
        # The counter while an epoch counts on the device (somebody reads train.epoch).
        self._counting: CorrectCounter | None = None
        # The steps not yet delivered, while an epoch hands its steps to the step feed
        # in blocks instead of publishing each (see _deliver_steps); else None.
        self._unpublished: _Unpublished | None = None

    # -- one step and one test pass -------------------------------------------------

    def _transform(self, x: np.ndarray) -> np.ndarray:
        if self.transforms is None:
            return x
        return np.asarray(self.transforms(x, self._rng))

    def _step(self, indices: np.ndarray, step: int, epoch: int) -> tuple[float, int, float]:
        """One optimisation step; returns (loss, batch size, seconds)."""
        if self.optimizer_path == NATIVE:
            return self._native_step(indices, step, epoch)
        d0 = time.perf_counter_ns()
        x, y = self.train_set.batch(np.asarray(indices))
        x = self._transform(x)
        n = int(np.size(y))  # examples, or positions for sequence labels
        feeds = {self.input: x, "labels": np.asarray(y, dtype=self.label_dtype)}
        data_ns = time.perf_counter_ns() - d0
        unpublished = self._unpublished
        t0 = time.perf_counter()
        if unpublished is None:
            span = self.bus.span(TRAIN_STEP, level=_LEVEL, batch_size=n, step=step, epoch=epoch,
                                 data_t0_ns=d0, data_ns=data_ns)  # fmt: skip
            with span as sp:
                loss, correct, lr = self._numpy_work(feeds, y, step)
                if correct is None:  # regression: nothing to count
                    sp.set(loss=loss, count=n, lr=lr)
                else:
                    sp.set(loss=loss, correct=correct, count=n, lr=lr)
        else:
            loss, correct, lr = self._numpy_work(feeds, y, step)
            unpublished.timed(t0, d0, data_ns)
            unpublished.batch_sizes.append(n)
            unpublished.lrs.append(lr)
            if correct is not None:
                unpublished.correct.append(correct)
        return loss, n, time.perf_counter() - t0

    def _numpy_work(
        self, feeds: dict[str, np.ndarray], y: np.ndarray, step: int
    ) -> tuple[float, int | None, float]:
        """The timed work of a numpy-path step; returns (loss, correct, learning rate),
        ``correct`` ``None`` for regression targets."""
        # overflow is divergence, reported as a result: numpy need not warn about it
        with np.errstate(over="ignore", invalid="ignore"):
            if self.schedule is not None:
                self.optimizer.lr = float(self.schedule(step))
            lr = float(self.optimizer.lr)
            outputs, grads = self._backprop(feeds, self.loss)
            loss = float(np.asarray(outputs[self.loss]).reshape(-1)[0])
            correct = (
                None
                if self.regression
                else int(np.sum(np.argmax(outputs[self.logits], axis=1) == y))
            )
            if math.isfinite(loss):
                if not self.params:
                    current = self.executor.get_parameters()
                    self.params = {k: np.array(current[k], copy=True) for k in grads}
                if self.modifiers is not None:
                    grads = self.modifiers(self.params, grads)
                self.optimizer.step(self.params, grads)
                self.executor.set_parameters(self.params)
                apply = getattr(self.executor, "apply_running_stats", None)
                if callable(apply):
                    apply()
        return loss, correct, lr

    def _bind(self) -> None:
        """Bind the optimizer to the executor once; look up the optional native parts."""
        executor = self.executor
        self.optimizer.bind(executor)  # type: ignore[attr-defined]
        self._bound = True
        make = getattr(executor, "native_correct_counter", None)
        # device counters compare argmax(-1) with labels (N,): not sequence labels, and
        # nothing to count for regression targets
        plain = not (self.sequence_labels or self.regression)
        self._counter = make() if callable(make) and plain else None
        apply = getattr(executor, "apply_running_stats", None)
        self._apply_stats = apply if callable(apply) else None

    def _native_step(self, indices: np.ndarray, step: int, epoch: int) -> tuple[float, int, float]:
        """One step on the executor's own tensors: no numpy round trip.

        Feeds are converted once (``executor.to_native``) and the loss is read with one
        scalar conversion. Correct predictions go to the device counter while an epoch
        counts on the device (:meth:`_epoch_counter`), else they are counted here from
        an argmax on the framework's logits, when a metric reads them (a metric with
        ``reads_correct``, such as ``training_accuracy``) and somebody reads the step.
        """
        d0 = time.perf_counter_ns()
        x, y = self.train_set.batch(np.asarray(indices))
        if self.transforms is not None:
            x = self._transform(x)
        data_ns = time.perf_counter_ns() - d0
        n = int(np.size(y))  # examples, or positions for sequence labels
        if not self._bound:
            self._bind()
        unpublished = self._unpublished
        t0 = time.perf_counter()
        if unpublished is None:
            span = self.bus.span(TRAIN_STEP, level=_LEVEL, batch_size=n, step=step, epoch=epoch,
                                 data_t0_ns=d0, data_ns=data_ns)  # fmt: skip
            with span as sp:
                # a sync each step, when a metric reads the correct predictions per step
                per_step = self._counting is None and self._reads_correct
                per_step = per_step and self.bus.wants(TRAIN_STEP + END)
                loss, correct, lr = self._native_work(x, y, step, per_step)
                if correct is None:
                    sp.set(loss=loss, count=n, lr=lr)
                else:
                    sp.set(loss=loss, correct=correct, count=n, lr=lr)
        else:
            loss, correct, lr = self._native_work(x, y, step, unpublished.host_counts)
            unpublished.timed(t0, d0, data_ns)
            unpublished.batch_sizes.append(n)
            unpublished.lrs.append(lr)
            if correct is not None:
                unpublished.correct.append(correct)
        return loss, n, time.perf_counter() - t0

    def _native_work(
        self, x: Any, y: np.ndarray, step: int, per_step: bool
    ) -> tuple[float, int | None, float]:
        """The timed work of a native step; returns (loss, correct, learning rate).

        ``correct`` is counted here (one sync) when ``per_step``; else it is ``None``,
        and the epoch's device counter, if any, takes the step's predictions.
        """
        executor, optimizer = self.executor, self.optimizer
        if self.schedule is not None:
            optimizer.lr = float(self.schedule(step))
        lr = float(optimizer.lr)
        feeds = executor.to_native({self.input: x, "labels": np.asarray(y, dtype=self.label_dtype)})
        outputs, grads = executor.native_train_step(feeds, self.loss)
        value = outputs[self.loss]
        try:
            loss = float(value.item())
        except (RuntimeError, ValueError):  # a loss of several elements: the first
            loss = float(value.reshape(-1)[0].item())
        except AttributeError:  # a tensor without .item() (TensorFlow's, MXNet's)
            loss = float(_on_host(value).reshape(-1)[0])
        correct: int | None = None
        counter = self._counting
        if counter is not None:
            counter.add(outputs[self.logits], feeds["labels"])
        elif per_step:
            correct = _count_correct(outputs[self.logits], feeds["labels"])
        if math.isfinite(loss):
            optimizer.native_step(grads)  # type: ignore[attr-defined]
            if self._apply_stats is not None:
                self._apply_stats()
        return loss, correct, lr

    def _step_blocks(self, epoch: int, step: int) -> _Unpublished | None:
        """Where this epoch's steps go when the step feed may take them in blocks.

        Only when the built-in metrics' shared feed alone listens to ``train.step``
        (:meth:`StepFeed.takes_blocks`): each step then costs no event, and the feed
        gets the same steps, in the same order, before each test pass and before the
        end of the epoch (:meth:`_deliver_steps`). ``None``: every step is published.
        """
        feed = StepFeed.of(self.bus)
        if not feed.takes_blocks():
            return None
        if self.optimizer_path == NATIVE:
            host_counts = self._counting is None and self._reads_correct
        else:  # the numpy path counts on the host every step, unless there is nothing
            host_counts = not self.regression
        return _Unpublished(feed, epoch, step, len(self.curves.losses), host_counts)

    def _deliver_steps(self) -> None:
        """Hand the step feed the steps not yet delivered, as one :class:`StepBlock`."""
        unpublished = self._unpublished
        if unpublished is None or not unpublished.batch_sizes:
            return
        curves, start = self.curves, unpublished.first_index
        block = StepBlock(
            epoch=unpublished.epoch,
            first_step=unpublished.first_step,
            batch_sizes=unpublished.batch_sizes,
            losses=curves.losses[start:],
            seconds=curves.step_times_s[start:],
            lrs=unpublished.lrs,
            correct=unpublished.correct if unpublished.host_counts else None,
            starts_ns=unpublished.starts_ns,
            data_t0_ns=unpublished.data_t0_ns,
            data_ns=unpublished.data_ns,
        )
        self._unpublished = _Unpublished(
            unpublished.feed,
            unpublished.epoch,
            unpublished.first_step + len(block),
            len(curves.losses),
            unpublished.host_counts,
        )
        unpublished.feed.deliver(block)

    def _epoch_counter(self) -> CorrectCounter | None:
        """The device counter, on the native path, when a metric reads the correct
        predictions and somebody reads the end of the epoch; else ``None``."""
        if self.optimizer_path != NATIVE:
            return None
        if not self._bound:
            self._bind()
        if self._counter is None or not self._reads_correct:
            return None
        return self._counter if self.bus.wants(TRAIN_EPOCH + END) else None

    def evaluate(self, step: int, epoch: int) -> dict[str, Any]:
        """One test pass over the whole test set (inference only), published as ``test.pass``.

        The pass carries its accuracy (not for regression targets), its mean ``loss``
        and, when the run reports it, its perplexity.
        """
        assert self.test_set is not None
        size = len(self.test_set)
        correct = total = 0
        loss_sum = 0.0
        regression = self.regression
        with self.bus.span(TEST_PASS, level=_LEVEL, step=step, epoch=epoch) as sp:
            for start in range(0, size, self.eval_batch_size):
                idx = np.arange(start, min(start + self.eval_batch_size, size))
                x, y = self.test_set.batch(idx)
                y = np.asarray(y, dtype=self.label_dtype)
                out = self.executor.inference({self.input: x, "labels": y})
                if not regression:
                    correct += int(np.sum(np.argmax(out[self.logits], axis=1) == y))
                total += y.size
                if self.loss in out:  # the mean over the batch's examples or positions
                    loss_sum += float(np.asarray(out[self.loss]).reshape(-1)[0]) * y.size
            loss = loss_sum / total if total else math.nan
            record: dict[str, Any] = {"step": step, "epoch": epoch}
            if not regression:
                record["accuracy"] = correct / total if total else 0.0
                sp.set(accuracy=record["accuracy"], correct=correct)
            record.update(loss=loss, count=total)
            if self.reports_perplexity:
                record["perplexity"] = _perplexity(loss)
                sp.set(perplexity=record["perplexity"])
            sp.set(count=total, loss=loss)
        return record

    def _live_parameters(self) -> dict[str, np.ndarray]:
        """The trainable parameters as numpy arrays: the numpy path's own (no copy), or
        copies of the executor's (the native path, or before the first step)."""
        if self.params:
            return self.params
        current = self.executor.get_parameters()
        if self.optimizer_path == NATIVE:
            trainable = set(self.executor.native_parameters())
            return {k: v for k, v in current.items() if k in trainable}
        return dict(current)

    def _test_pass(self, step: int, epoch: int, spent: dict[str, float]) -> dict[str, Any]:
        """A test pass, on the parameters ``prepare_for_eval`` hands back when it is set
        and returns some (the live ones restored after it). Adds the seconds of the
        pass and of the copies to ``spent["tests"]``; the call itself is not among them.
        """
        started = time.perf_counter()
        prepare = self.prepare_for_eval
        if prepare is None:
            result = self.evaluate(step, epoch)
            spent["tests"] += time.perf_counter() - started
            return result
        live = self._live_parameters()
        called = time.perf_counter()
        chosen = prepare(live, self.optimizer)
        own = time.perf_counter() - called
        if chosen is None:
            result = self.evaluate(step, epoch)
        else:
            self.executor.set_parameters(chosen)
            try:
                result = self.evaluate(step, epoch)
            finally:
                self.executor.set_parameters(live)
        spent["tests"] += time.perf_counter() - started - own
        return result

    def _select(self, indices: Any, step: int) -> np.ndarray:
        """``data_selection``'s choice of this step's example indices, checked."""
        assert self.data_selection is not None
        chosen = np.asarray(self.data_selection(np.asarray(indices), step, self._selection_rng))
        if chosen.ndim != 1 or chosen.size == 0 or not np.issubdtype(chosen.dtype, np.integer):
            raise UsageError(
                f"data_selection must return a non-empty 1-d array of example indices; at "
                f"step {step} it returned {chosen.dtype} of shape {chosen.shape}"
            )
        return chosen

    # -- the loop ---------------------------------------------------------------------

    def run(self) -> TrainingResult:
        """Train until a stopping condition holds or the loss diverges."""
        clock = self.clock if self.clock is not None else RunClock(self.bus, self.metrics)
        if not clock.started:  # no clock given, or a second run of this trainer
            clock.begin(optimizer_path=self.optimizer_path)
        try:
            return self._run(clock.t0)
        finally:
            clock.stop()

    def _progress(self) -> None:
        if self.on_progress is not None:
            self.on_progress(self.curves)

    def _run(self, t_start: float) -> TrainingResult:
        stop = self.stop
        self.curves = Curves()
        losses = self.curves.losses
        times = self.curves.step_times_s
        rates = self.curves.throughput_samples_s
        tests = self.curves.test_curve
        status, reason = COMPLETE, "max_epochs"
        best: float | None = None
        best_ppl: float | None = None
        best_loss: float | None = None
        since_best = 0
        reached_at: float | None = None
        ppl_reached_at: float | None = None
        loss_reached_at: float | None = None
        # the kind of the first target reached, and the test seconds until then
        first_target: str | None = None
        target_tests = 0.0
        diverged_at: dict[str, int] | None = None
        step = samples = epochs_done = 0
        bar = _ProgressBar(self.progress, stop.max_epochs)
        # seconds spent in test passes and in on_progress, for the parts of the time
        # to accuracy; parts are taken when the target is first reached
        spent = {"tests": 0.0, "recording": 0.0}
        parts: dict[str, float] = {}

        def reach(kind: str) -> None:
            """Note the first target reached and the test seconds until then."""
            nonlocal first_target, target_tests
            if first_target is None:
                first_target, target_tests = kind, spent["tests"]

        def test(epoch: int) -> str | None:
            nonlocal best, best_ppl, best_loss, since_best
            nonlocal reached_at, ppl_reached_at, loss_reached_at
            self._deliver_steps()  # the steps before the test pass come before it
            result = self._test_pass(step, epoch, spent)
            recorded = spent["recording"]  # before this pass is recorded
            tests.append(result)
            started = time.perf_counter()
            self._progress()
            spent["recording"] += time.perf_counter() - started
            test_loss = float(result.get("loss", math.nan))
            lower = not math.isnan(test_loss) and (best_loss is None or test_loss < best_loss)
            if lower:
                best_loss = test_loss
            if "accuracy" in result:
                acc = float(result["accuracy"])
                bar.note(acc)
                better = best is None or acc > best
                if better:
                    best = acc
            else:  # regression: the loss is the test's figure (lower is better)
                bar.note(test_loss, "loss")
                better = lower
            since_best = 0 if better else since_best + 1
            ppl = result.get("perplexity")
            if ppl is not None and not math.isnan(ppl):
                best_ppl = ppl if best_ppl is None else min(best_ppl, ppl)
            target = stop.target_accuracy
            if target is not None and "accuracy" in result and result["accuracy"] >= target:
                if reached_at is None:
                    reached_at = time.perf_counter() - t_start
                    parts.update(steps=math.fsum(times), tests=spent["tests"], recording=recorded)
                reach("accuracy")
                return "target_accuracy"
            goal = stop.target_perplexity
            if goal is not None and ppl is not None and ppl <= goal:
                if ppl_reached_at is None:
                    ppl_reached_at = time.perf_counter() - t_start
                reach("perplexity")
                return "target_perplexity"
            aim = stop.target_loss
            if aim is not None and test_loss <= aim:  # False for a NaN loss
                if loss_reached_at is None:
                    loss_reached_at = time.perf_counter() - t_start
                reach("loss")
                return "target_loss"
            if stop.patience is not None and since_best >= stop.patience:
                return "plateau"
            return None

        # Looked up once: the loop below runs once per step.
        on_progress, curves, agree = self.on_progress, self.curves, self.agree
        test_every = (
            self.test_every
            if self.test_set is not None and isinstance(self.test_every, int)
            else None
        )
        max_steps, budget = stop.max_steps, stop.time_budget_s
        # the training clock leaves the test passes out of the time budget
        training_clock = stop.budget_clock == "training"
        select = self.data_selection
        run_step = self._native_step if self.optimizer_path == NATIVE else self._step
        if self.optimizer_path != NATIVE:
            executor = self.executor
            streamed = getattr(executor, "inference_and_backprop_streamed", None)
            self._backprop = streamed if callable(streamed) else executor.inference_and_backprop
        isfinite, clock = math.isfinite, time.perf_counter
        if self._counter is not None:
            self._counter.take()  # drop what an epoch that raised left behind
        parts["setup"] = clock() - t_start
        with bar:
            for epoch in range(stop.max_epochs):
                self.sampler.set_epoch(epoch)
                ended: str | None = None
                with self.bus.span(TRAIN_EPOCH, level=_LEVEL, epoch=epoch) as epoch_span:
                    self._counting = counter = self._epoch_counter()
                    self._unpublished = self._step_blocks(epoch, step)
                    first = samples
                    try:
                        for indices in self.sampler:
                            if select is not None:
                                indices = self._select(indices, step)
                            loss, n, seconds = run_step(indices, step, epoch)
                            step += 1
                            samples += n
                            losses.append(loss)
                            times.append(seconds)
                            rates.append(n / seconds if seconds > 0 else math.inf)
                            if on_progress is not None:
                                started = clock()
                                on_progress(curves)
                                spent["recording"] += clock() - started
                            if bar.enabled:
                                bar.advance(epoch, step, loss)
                            if not isfinite(loss):
                                ended = "diverged"
                            elif test_every is not None and step % test_every == 0:
                                ended = test(epoch)
                            if ended is None and max_steps is not None and step >= max_steps:
                                ended = "max_steps"
                            if ended is None and budget is not None:
                                used = clock() - t_start
                                if training_clock:
                                    used -= spent["tests"]
                                if used >= budget:
                                    ended = "time_budget"
                            if agree is not None:
                                ended = agree(ended)
                            if ended == "diverged":
                                status = DIVERGED
                                diverged_at = {"step": step - 1, "epoch": epoch}
                            if ended is not None:
                                break
                    finally:  # delivered before the epoch ends, even when a step raised
                        self._deliver_steps()
                        self._unpublished = None
                    if counter is not None:  # the epoch's one device sync
                        epoch_span.set(correct=counter.take(), count=samples - first)
                    self._counting = None
                epochs_done = epoch + 1
                if ended is None and self.test_set is not None and self.test_every == "epoch":
                    ended = test(epoch)
                    if self.agree is not None:
                        ended = self.agree(ended)
                if ended is not None:
                    reason = ended
                    break
        wall = time.perf_counter() - t_start
        self.bus.publish(RUN_END, level=_LEVEL, status=status, reason=reason)
        results = {m.name: m.safe_result() for m in self.metrics}
        tta = results.get("time_to_accuracy", {}).get("value")
        ttp = results.get("time_to_perplexity", {}).get("value")
        ttl = results.get("time_to_loss", {}).get("value")
        final_ppl = tests[-1].get("perplexity") if tests else None
        final_acc = tests[-1].get("accuracy") if tests else None
        total_time = sum(times)
        reached = float(tta) if isinstance(tta, int | float) else reached_at
        ppl_time = float(ttp) if isinstance(ttp, int | float) else ppl_reached_at
        loss_time = float(ttl) if isinstance(ttl, int | float) else loss_reached_at
        target_time = {"accuracy": reached, "perplexity": ppl_time, "loss": loss_time}.get(
            first_target or ""
        )
        return TrainingResult(
            status=status,
            stop_reason=reason,
            epochs=epochs_done,
            steps=step,
            samples=samples,
            wall_s=wall,
            final_test_accuracy=None if final_acc is None else float(final_acc),
            best_test_accuracy=best,
            time_to_accuracy=reached,
            losses=losses,
            step_times_s=times,
            throughput_samples_s=rates,
            test_curve=tests,
            throughput={
                "samples_per_s": samples / total_time if total_time > 0 else math.nan,
                "samples": float(samples),
                "train_seconds": total_time,
            },
            diverged_at=diverged_at,
            metrics=results,
            optimizer_path=self.optimizer_path,
            final_perplexity=None if final_ppl is None else float(final_ppl),
            best_perplexity=best_ppl,
            time_to_perplexity=ppl_time,
            time_to_accuracy_parts=_tta_parts(reached, parts),
            final_test_loss=_loss_or_none(tests[-1].get("loss", math.nan)) if tests else None,
            best_test_loss=best_loss,
            time_to_loss=loss_time,
            targets=stop.targets(),
            target_reached=first_target if target_time is not None else None,
            time_to_target_training=(
                None if target_time is None else max(0.0, target_time - target_tests)
            ),
            eval_time=target_tests if target_time is not None else spent["tests"],
            regression=self.regression,
        )


def _loss_or_none(value: Any) -> float | None:
    """``value`` as a float, ``None`` when it is NaN (a test pass without a loss)."""
    number = float(value)
    return None if math.isnan(number) else number


def _tta_parts(reached: float | None, parts: dict[str, float]) -> dict[str, float]:
    """The parts of a time to accuracy ``reached`` (:data:`TTA_PARTS`, in its order):
    ``parts`` measured, the ``loop`` the rest. Empty when the target was not reached."""
    if reached is None or "steps" not in parts:
        return {}
    out = {name: parts[name] for name in TTA_PARTS if name in parts}
    out["loop"] = max(0.0, reached - math.fsum(out.values()))
    return out


class _ProgressBar:
    """A rich progress bar over epochs, or nothing when disabled."""

    def __init__(self, enabled: bool, epochs: int) -> None:
        self.enabled = enabled
        self.epochs = epochs
        self._bar: Any = None
        self._task: Any = None
        self._acc = ""

    def __enter__(self) -> _ProgressBar:
        if self.enabled:
            from rich.progress import Progress

            self._bar = Progress(transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task("training", total=self.epochs)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.__exit__(None, None, None)

    def advance(self, epoch: int, step: int, loss: float) -> None:
        if self._bar is not None:
            self._bar.update(
                self._task,
                completed=epoch,
                description=f"epoch {epoch + 1} step {step} loss {loss:.4g}{self._acc}",
            )

    def note(self, value: float, what: str = "") -> None:
        """Show the last test pass's accuracy (or ``what``: its loss, say)."""
        self._acc = f" test {what} {value:.4g}" if what else f" test {value:.3f}"
