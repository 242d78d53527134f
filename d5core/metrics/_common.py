"""Helpers shared by the built-in metrics: reading event payloads, JSON-safe numbers."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard

from d5core.bus import BEGIN, END, TRAIN_EPOCH, TRAIN_STEP
from d5core.levels.metrics import Metric, MetricResult

#: What a metric hands the step feed: called with a finished event, its step and epoch.
StepHandler = Callable[[Any, int, int], None]

__all__ = [
    "RUN_END",
    "RUN_START",
    "BlockHandler",
    "Progress",
    "StepBlock",
    "StepFeed",
    "StepHandler",
    "accuracy_of",
    "batch_size_of",
    "block_size_of",
    "completion_events",
    "counts_of",
    "duration_s",
    "finish",
    "json_number",
    "matches",
    "one_line",
    "payload_of",
]

#: Published once when a run first touches data; starts the time-to-accuracy clock.
RUN_START = "run.start"
#: Published once when a run ends; freezes metrics that measure "over the run".
RUN_END = "run.end"

#: Payload keys that may carry the number of samples an event processed, in order.
_BATCH_KEYS = ("batch_size", "samples", "count")


def completion_events(event: str) -> tuple[str, ...]:
    """The events that report ``event`` done: the instant ``event`` and its span's ``.end``.

    A span's ``.begin`` is left out so that a span and an instant event each count once.
    """
    return (event,) if event.endswith(".end") else (event, f"{event}.end")


def one_line(exc: BaseException) -> str:
    """``Type: message`` of an exception on one line."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def payload_of(event: Any) -> Mapping[str, Any]:
    """The payload mapping of ``event`` (empty when it has none)."""
    payload = getattr(event, "payload", None)
    if type(payload) is dict:  # the bus's own payloads: skip the slower ABC check
        return payload
    return payload if isinstance(payload, Mapping) else {}


def duration_s(event: Any) -> float | None:
    """Seconds from ``duration_ns`` in the payload of ``event``, or ``None``."""
    ns = payload_of(event).get("duration_ns")
    if not _is_number(ns) or not math.isfinite(ns):
        return None
    return float(ns) / 1e9


def block_size_of(payload: Mapping[str, Any]) -> int:
    """Calls timed together in one event: ``block_size`` of a ``measure.sample``, else 1."""
    block = payload.get("block_size")
    return int(block) if _is_number(block) and block >= 1 else 1


def matches(payload: Mapping[str, Any], where: Mapping[str, Any] | None) -> bool:
    """Whether ``payload`` has every key of ``where`` with the same value."""
    return not where or all(k in payload and payload[k] == v for k, v in where.items())


def batch_size_of(payload: Mapping[str, Any], key: str | None = None) -> float | None:
    """The number of samples an event processed, from ``key`` or the usual keys."""
    for k in (key,) if key else _BATCH_KEYS:
        value = payload.get(k)
        if _is_number(value) and value >= 0:
            return float(value)
    return None


def accuracy_of(payload: Mapping[str, Any], key: str = "accuracy") -> tuple[float, float] | None:
    """``(accuracy, weight)`` from a payload, or ``None`` if it has none.

    ``correct`` and ``count`` give ``correct / count`` weighted by ``count``; otherwise
    ``key`` (``"accuracy"``) is used, weighted by ``count`` when present, else by 1.
    """
    correct, count = payload.get("correct"), payload.get("count")
    if key == "accuracy" and _is_number(correct) and _is_number(count) and count > 0:
        return float(correct) / float(count), float(count)
    value = payload.get(key)
    if not _is_number(value):
        return None
    weight = float(count) if _is_number(count) and count > 0 else 1.0
    return float(value), weight


def counts_of(payload: Mapping[str, Any]) -> tuple[float, float] | None:
    """``(correct, count)`` from a payload that has both (``count`` positive), else ``None``."""
    correct, count = payload.get("correct"), payload.get("count")
    if _is_number(correct) and _is_number(count) and count > 0:
        return float(correct), float(count)
    return None


def _is_number(value: Any) -> TypeGuard[int | float]:
    kind = type(value)
    if kind is int or kind is float:  # the common case, decided without isinstance
        return True
    return isinstance(value, int | float) and not isinstance(value, bool)


def json_number(value: float) -> float | str:
    """``value``, or ``"nan"``/``"inf"``/``"-inf"``: strict JSON has no such numbers."""
    if math.isfinite(value):
        return value
    return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")


def finish(metric: Metric, result: MetricResult) -> MetricResult:
    """``result`` with the metric's recorded problems added, if it has any."""
    if metric.problems:
        result["problems"] = list(metric.problems)
    return result


def _int_or(value: Any, default: int) -> int:
    return int(value) if _is_number(value) and math.isfinite(value) else default


@dataclass(frozen=True, slots=True)
class StepBlock:
    """Finished training steps of one epoch, handed to the :class:`StepFeed` together.

    Column by column, what the ``train.step.end`` events of these steps would have
    carried: step ``first_step + i`` of ``epoch`` trained ``batch_sizes[i]`` samples at
    learning rate ``lrs[i]`` in ``seconds[i]``, to a loss of ``losses[i]``. ``correct``
    holds each step's correct predictions when they were counted on the host, and is
    ``None`` when nobody counted them per step (the trainer's device counter reports
    them with the end of the epoch instead). ``starts_ns``, ``data_t0_ns`` and
    ``data_ns`` (:func:`time.perf_counter_ns`) say when each step began and when and how
    long its batch was read, where the publisher kept them (a trace draws them).
    """

    epoch: int
    first_step: int
    batch_sizes: Sequence[int]
    losses: Sequence[float]
    seconds: Sequence[float]
    lrs: Sequence[float]
    correct: Sequence[int] | None = None
    starts_ns: Sequence[int] | None = None
    data_t0_ns: Sequence[int] | None = None
    data_ns: Sequence[int] | None = None

    def __len__(self) -> int:
        return len(self.losses)


#: What a metric hands the step feed to read a :class:`StepBlock` at once.
BlockHandler = Callable[[StepBlock], None]


class Progress:
    """Where training is: completed steps and epochs, as a :class:`StepFeed` counts them.

    Payloads that carry ``step`` or ``epoch`` are believed; otherwise steps and epochs
    are numbered from 0 in the order their events arrive.
    """

    def __init__(self) -> None:
        self.steps_done = 0
        self.epochs_done = 0
        self.step: int | None = None
        self.epoch = 0

    def on_step(self, event: Any) -> tuple[int, int]:
        """Count a finished step; return its ``(step, epoch)``."""
        payload = payload_of(event)
        step, epoch = payload.get("step"), payload.get("epoch")
        # plain ints, as the trainer publishes them, need no checking (once per step)
        self.step = step if type(step) is int else _int_or(step, self.steps_done)
        self.epoch = epoch if type(epoch) is int else _int_or(epoch, self.epochs_done)
        self.steps_done += 1
        return self.step, self.epoch

    def on_epoch(self, event: Any) -> None:
        """Count a finished epoch."""
        self.epochs_done = _int_or(payload_of(event).get("epoch"), self.epochs_done) + 1
        self.epoch = self.epochs_done - 1

    def at(self, event: Any) -> tuple[int | None, int]:
        """The ``(step, epoch)`` of an event between steps, such as a test pass: its
        payload's, else those of the last finished step."""
        payload = payload_of(event)
        step = payload.get("step")
        return (
            int(step) if _is_number(step) and math.isfinite(step) else self.step,
            _int_or(payload.get("epoch"), self.epoch),
        )


class StepFeed:
    """The one subscriber of finished steps and epochs that the built-in metrics share.

    Every metric that reads ``train.step`` completions (the loss curve, training
    accuracy, throughput, the step times) or only needs to know where training is (the
    test accuracies, time to accuracy) joins the feed of its bus instead of subscribing
    on its own: each finished step is then delivered to one callback, which reads the
    step and epoch once (:attr:`progress`, shared) and calls the handlers of the metrics
    that want every step. A metric that only needs the position joins without a
    handler and costs nothing per step. A handler that raises is isolated as with
    :meth:`Metric.listen`: the failure is recorded in that metric's ``problems``.

    **Blocks.** A member that also gives ``on_steps`` can read many steps at once, as a
    :class:`StepBlock`. When the feed alone listens to the steps and every member that
    reads them reads blocks (:meth:`takes_blocks`), a publisher may hand the feed the
    finished steps of an epoch in blocks (:meth:`deliver`) instead of publishing one
    ``train.step`` span per step: the trainer does so, and delivers the block before any
    test pass and before the end of the epoch, so members see the same steps in the same
    order as from the events. Any other listener of ``train.step`` (a plugin's metric, a
    tracer) makes the trainer publish every step again.

    :attr:`progress` counts the steps and epochs seen since the feed was first joined
    on its bus (payloads with ``step`` and ``epoch``, as the trainer's, are believed).
    """

    #: The key of the feed on its bus (:meth:`d5core.bus.MetricBus.shared`).
    KEY = "d5.metrics.step_feed"

    def __init__(self, bus: Any) -> None:
        self.bus = bus
        self.progress = Progress()
        self._members: list[
            tuple[object, Metric, StepHandler | None, StepHandler | None, BlockHandler | None]
        ] = []
        self._on_steps: tuple[tuple[Metric, StepHandler], ...] = ()
        self._on_epochs: tuple[tuple[Metric, StepHandler], ...] = ()
        self._on_blocks: tuple[tuple[Metric, BlockHandler], ...] = ()
        self._all_read_blocks = True
        self._unsubscribe: list[Callable[[], None]] = []

    @classmethod
    def of(cls, bus: Any) -> StepFeed:
        """The feed of ``bus``, made on first use."""
        feed: StepFeed = bus.shared(cls.KEY, lambda: cls(bus))
        return feed

    def join(
        self,
        metric: Metric,
        on_step: StepHandler | None = None,
        on_epoch: StepHandler | None = None,
        on_steps: BlockHandler | None = None,
    ) -> Progress:
        """Add ``metric``; its :meth:`~Metric.detach` takes it out again.

        :param on_step: called with each finished step's event, step and epoch.
        :param on_epoch: called with each finished epoch's event, the last step and
            the epoch, after :attr:`progress` counted it.
        :param on_steps: called with a :class:`StepBlock` of finished steps, in place of
            ``on_step`` for those steps; it must record them exactly as ``on_step``
            would. A metric with ``on_step`` and without ``on_steps`` makes every step
            be published as an event.
        :return: the shared :attr:`progress`.
        """
        token = object()
        self._members.append((token, metric, on_step, on_epoch, on_steps))
        self._rebuild()
        if not self._unsubscribe:
            for name in completion_events(TRAIN_STEP):
                self._unsubscribe.append(self.bus.subscribe(name, self._on_step))
            for name in completion_events(TRAIN_EPOCH):
                self._unsubscribe.append(self.bus.subscribe(name, self._on_epoch))
        metric.on_detach(lambda: self._leave(token))
        return self.progress

    def _leave(self, token: object) -> None:
        self._members = [m for m in self._members if m[0] is not token]
        self._rebuild()
        if not self._members:
            unsubscribe, self._unsubscribe = self._unsubscribe, []
            for undo in unsubscribe:
                undo()

    def _rebuild(self) -> None:
        members = self._members
        self._on_steps = tuple((m, f) for _, m, f, _, _ in members if f is not None)
        self._on_epochs = tuple((m, f) for _, m, _, f, _ in members if f is not None)
        self._on_blocks = tuple((m, b) for _, m, _, _, b in members if b is not None)
        self._all_read_blocks = all(b is not None for _, _, f, _, b in members if f is not None)

    def takes_blocks(self) -> bool:
        """Whether finished steps may be handed over in blocks (:meth:`deliver`).

        True when the feed is subscribed, it alone listens to the completions of
        ``train.step``, nobody listens to ``train.step.begin`` and every member that
        reads steps reads blocks. Subscriptions change the answer: a publisher asks
        again at each epoch.
        """
        if not self._unsubscribe or not self._all_read_blocks:
            return False
        bus, mine = self.bus, (self._on_step,)
        return (
            not bus.listeners(TRAIN_STEP + BEGIN)
            and bus.listeners(TRAIN_STEP + END) == mine
            and bus.listeners(TRAIN_STEP) in (mine, ())
        )

    def deliver(self, block: StepBlock) -> None:
        """Hand the members ``block``, finished steps not published as events.

        :attr:`progress` moves to the block's last step first.
        """
        n = len(block)
        if not n:
            return
        progress = self.progress
        progress.step, progress.epoch = block.first_step + n - 1, block.epoch
        progress.steps_done += n
        for metric, handler in self._on_blocks:
            try:
                handler(block)
            except Exception as exc:
                _record(metric, TRAIN_STEP + END, exc)

    def _on_step(self, event: Any) -> None:
        step, epoch = self.progress.on_step(event)
        for metric, handler in self._on_steps:
            try:
                handler(event, step, epoch)
            except Exception as exc:
                _record(metric, getattr(event, "name", "?"), exc)

    def _on_epoch(self, event: Any) -> None:
        progress = self.progress
        progress.on_epoch(event)
        for metric, handler in self._on_epochs:
            try:
                handler(event, progress.step if progress.step is not None else -1, progress.epoch)
            except Exception as exc:
                _record(metric, getattr(event, "name", "?"), exc)


def _record(metric: Metric, event: str, exc: Exception) -> None:
    """Record a failed handler in ``metric``'s problems, as :meth:`Metric.listen` does."""
    message = f"handling {event!r} raised {one_line(exc)}"
    if message not in metric.problems:
        metric.problems.append(message)
