"""The metric bus: code under benchmark publishes events, metrics subscribe to them.

Publishing is meant to stay in measured code, so an event nobody listens to costs one
dictionary lookup: no :class:`Event` is built and no clock is read. Subscriptions are
copied on write, so publishing takes no lock.

Event names (a span ``NAME`` is published as ``NAME.begin`` and ``NAME.end``; the end
event's payload carries ``duration_ns``):

=====================  ===================  ================================================
constant               name                 published when / payload
=====================  ===================  ================================================
``OP_FORWARD``         ``op.forward``       an operator's forward pass (span)
``OP_BACKWARD``        ``op.backward``      an operator's backward pass (span)
``GRAPH_NODE``         ``graph.node``       one node of a network executed (span);
                                            ``node``, ``op_type``; backward adds ``direction``
``TRAIN_STEP``         ``train.step``       one optimisation step (span); ``batch_size``,
                                            ``step``, ``epoch``, ``data_t0_ns`` and
                                            ``data_ns`` (reading its batch, just before
                                            the span); the end adds ``loss``,
                                            ``count``, ``lr`` and ``correct`` (when read)
``TRAIN_EPOCH``        ``train.epoch``      one epoch (span); ``epoch``; ``correct`` and
                                            ``count`` of the epoch when training accuracy
                                            was counted on the device
``TEST_PASS``          ``test.pass``        one pass over the test set (span); ``step``,
                                            ``epoch``; the end adds ``accuracy``,
                                            ``correct``, ``count`` and ``loss``
``COMM_CALL``          ``comm.call``        one communication call; ``bytes_sent``,
                                            ``bytes_received``
``MEASURE_SAMPLE``     ``measure.sample``   one sample of the measurement engine;
                                            ``name``, ``index``, ``block_size`` and
                                            ``duration_ns`` (of the whole block)
``VALIDATION``         ``validation``       a validation check finished; its outcome
=====================  ===================  ================================================

A training run also publishes ``run.start`` when its clock starts and ``run.end``
(``status``, ``reason``) when it stops (``RUN_START`` and ``RUN_END`` in
:mod:`d5core.lv2.trainer`); docs/metrics.md lists what a metric attached to a run
sees.

``level`` is the d5 level an event belongs to (0 operators, 1 networks, 2 training,
3 distributed); it is carried, not interpreted, by the bus.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from d5core.errors import one_line

if TYPE_CHECKING:
    from d5core.plugins.manager import HookOutcome, PluginManager

__all__ = [
    "BEGIN",
    "COMM_CALL",
    "END",
    "GRAPH_NODE",
    "MEASURE_SAMPLE",
    "OP_BACKWARD",
    "OP_FORWARD",
    "RUN_END",
    "RUN_START",
    "TEST_PASS",
    "TRAIN_EPOCH",
    "TRAIN_STEP",
    "VALIDATION",
    "Callback",
    "Event",
    "MetricBus",
    "Span",
    "SubscriberError",
    "attach_plugins",
    "get_bus",
    "use_bus",
]

OP_FORWARD = "op.forward"
OP_BACKWARD = "op.backward"
GRAPH_NODE = "graph.node"
TRAIN_STEP = "train.step"
TRAIN_EPOCH = "train.epoch"
TEST_PASS = "test.pass"
COMM_CALL = "comm.call"
MEASURE_SAMPLE = "measure.sample"
VALIDATION = "validation"
#: Published once by the trainer, just before the first touch of data: time-to-accuracy
#: starts here.
RUN_START = "run.start"
#: Published once when training ends; payload ``status``, ``reason``.
RUN_END = "run.end"

#: Suffix of the event that opens a span.
BEGIN = ".begin"
#: Suffix of the event that closes a span; its payload has ``duration_ns``.
END = ".end"

_clock = time.perf_counter_ns
_T = TypeVar("_T")


@dataclass(slots=True)
class Event:
    """One published event.

    :param name: the event name, such as ``"train.step.end"``.
    :param level: the d5 level it belongs to (0–3).
    :param t_ns: :func:`time.perf_counter_ns` when it was published.
    :param payload: the keyword arguments given to :meth:`MetricBus.publish`.
    """

    name: str
    level: int
    t_ns: int
    payload: dict[str, Any]


#: What a subscriber is: a function of one :class:`Event`.
Callback = Callable[[Event], None]


@dataclass
class SubscriberError:
    """A subscriber that raised: the first error, and how many times it raised."""

    event: str
    callback: str
    error: str
    count: int = 1


def _describe(callback: Callable[..., Any]) -> str:
    name = getattr(callback, "__qualname__", None) or type(callback).__qualname__
    module = getattr(callback, "__module__", None)
    return f"{module}.{name}" if module else name


#: How a span is delivered: (begin name, its callbacks, end name, its callbacks).
_SpanRoute = tuple[str, tuple[Callback, ...], str, tuple[Callback, ...]]


class Span:
    """An open span; ``set(**payload)`` adds to the payload of its end event."""

    __slots__ = ("_bus", "_level", "_payload", "_route", "_t0")

    def __init__(
        self, bus: MetricBus, route: _SpanRoute, level: int, payload: dict[str, Any]
    ) -> None:
        self._bus, self._route, self._level, self._payload = bus, route, level, payload
        self._t0 = 0

    def set(self, **payload: Any) -> None:
        """Add ``payload`` to the end event (for values known only inside the span)."""
        self._payload.update(payload)

    def __enter__(self) -> Span:
        begin, begin_subs = self._route[0], self._route[1]
        if begin_subs:
            self._bus._deliver(begin_subs, Event(begin, self._level, _clock(), dict(self._payload)))
        self._t0 = _clock()  # after the begin event: delivering it is not the span's time
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        t1 = _clock()
        end, end_subs = self._route[2], self._route[3]
        if end_subs:
            payload = self._payload
            payload["duration_ns"] = t1 - self._t0
            if exc_type is not None:
                payload["error"] = exc_type.__name__
            self._bus._deliver(end_subs, Event(end, self._level, t1, payload))


class _NullSpan(Span):
    """The span handed out when nobody listens: does nothing, shared by every caller."""

    __slots__ = ()

    def __init__(self) -> None:
        pass

    def set(self, **payload: Any) -> None:
        """Ignore ``payload``: nobody listens."""

    def __enter__(self) -> _NullSpan:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        return None


_NULL_SPAN = _NullSpan()


class MetricBus:
    """Routes published events to the callbacks subscribed to their names.

    A callback that raises is isolated: the publisher and the other subscribers carry
    on, the failure is counted in :attr:`errors` and a :class:`RuntimeWarning` is issued
    the first time that callback fails.
    """

    __slots__ = (
        "_all",
        "_errors",
        "_everyone",
        "_lock",
        "_named",
        "_routes",
        "_shared",
        "_spans",
    )

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # Subscriptions, each a (token, callback) pair, rebuilt into the tuples below.
        self._named: dict[str, list[tuple[object, Callback]]] = {}
        self._everyone: list[tuple[object, Callback]] = []
        self._all: tuple[Callback, ...] = ()
        # name -> every callback for it (named ones, then subscribe_all ones).
        self._routes: dict[str, tuple[Callback, ...]] = {}
        # span name -> its route, for spans with a subscriber to NAME.begin or NAME.end.
        self._spans: dict[str, _SpanRoute] = {}
        self._errors: dict[int, SubscriberError] = {}
        # key -> an object that several subscribers share (see shared()).
        self._shared: dict[str, Any] = {}

    # -- subscribing --------------------------------------------------------

    def subscribe(self, name: str, callback: Callback) -> Callable[[], None]:
        """Call ``callback(event)`` for every event published under ``name``.

        :return: a function that undoes this subscription (calling it twice is harmless).
        """
        token = object()
        with self._lock:
            self._named.setdefault(name, []).append((token, callback))
            self._rebuild()

        def unsubscribe() -> None:
            with self._lock:
                subs = self._named.get(name, [])
                kept = [s for s in subs if s[0] is not token]
                if len(kept) != len(subs):
                    if kept:
                        self._named[name] = kept
                    else:
                        del self._named[name]
                    self._rebuild()

        return unsubscribe

    def subscribe_all(self, callback: Callback) -> Callable[[], None]:
        """Call ``callback(event)`` for every event, whatever its name.

        Such a subscriber makes every publish take the slow path; use it for tracing.

        :return: a function that undoes this subscription.
        """
        token = object()
        with self._lock:
            self._everyone.append((token, callback))
            self._rebuild()

        def unsubscribe() -> None:
            with self._lock:
                kept = [s for s in self._everyone if s[0] is not token]
                if len(kept) != len(self._everyone):
                    self._everyone = kept
                    self._rebuild()

        return unsubscribe

    def _rebuild(self) -> None:
        """Recompute the routing tables; called with the lock held."""
        everyone = tuple(cb for _, cb in self._everyone)
        routes = {
            name: tuple(cb for _, cb in subs) + everyone for name, subs in self._named.items()
        }
        names = {n.removesuffix(BEGIN) for n in routes if n.endswith(BEGIN)}
        names |= {n.removesuffix(END) for n in routes if n.endswith(END)}
        spans = {n: self._span_route(n, routes, everyone) for n in names}
        self._routes, self._all, self._spans = routes, everyone, spans

    @staticmethod
    def _span_route(
        name: str, routes: dict[str, tuple[Callback, ...]], everyone: tuple[Callback, ...]
    ) -> _SpanRoute:
        begin, end = name + BEGIN, name + END
        return begin, routes.get(begin, everyone), end, routes.get(end, everyone)

    def shared(self, key: str, make: Callable[[], _T]) -> _T:
        """The object kept on this bus under ``key``, made by ``make()`` on first use.

        For a subscriber that several metrics share, so that an event is delivered to
        one callback however many metrics read it. ``make`` must not subscribe (the
        object subscribes itself later, when it is first used).
        """
        found = self._shared.get(key)
        if found is None:
            made = make()
            with self._lock:
                found = self._shared.setdefault(key, made)
        return found  # type: ignore[no-any-return]

    def listeners(self, name: str) -> tuple[Callback, ...]:
        """The callbacks an event named ``name`` is delivered to, in delivery order
        (those of ``subscribe_all`` included)."""
        return self._routes.get(name, self._all)

    def wants(self, name: str) -> bool:
        """Whether anybody listens to ``name`` (to skip building an expensive payload)."""
        return bool(self._routes.get(name, self._all))

    # -- publishing ---------------------------------------------------------

    def publish(self, name: str, /, level: int = 0, **payload: Any) -> None:
        """Publish an instant event; returns at once when nobody listens to ``name``."""
        subs = self._routes.get(name, self._all)
        if not subs:
            return
        self._deliver(subs, Event(name, level, _clock(), payload))

    def span(self, name: str, /, level: int = 0, **payload: Any) -> Span:
        """A context manager publishing ``name.begin`` on entry and ``name.end`` on exit.

        The end event's payload has ``duration_ns`` (the time spent inside the block,
        excluding the delivery of the begin event) and ``error`` (the exception's type
        name) when the block raised; exceptions are never swallowed. When nobody listens
        to either event a shared do-nothing span is returned.
        """
        route = self._spans.get(name)
        if route is None:
            if not self._all:
                return _NULL_SPAN
            route = self._span_route(name, self._routes, self._all)
        return Span(self, route, level, payload)

    def _deliver(self, subs: tuple[Callback, ...], event: Event) -> None:
        for callback in subs:
            try:
                callback(event)
            except Exception as exc:
                self._failed(event.name, callback, exc)

    # -- failures -----------------------------------------------------------

    def _failed(self, name: str, callback: Callback, exc: Exception) -> None:
        key = id(callback)
        seen = self._errors.get(key)
        if seen is not None:
            seen.count += 1
            return
        err = SubscriberError(name, _describe(callback), one_line(exc))
        self._errors[key] = err
        warnings.warn(
            f"metric bus subscriber {err.callback} raised {err.error} on {name!r}; "
            f"further errors of this subscriber are only counted (bus.errors)",
            RuntimeWarning,
            stacklevel=3,
        )

    @property
    def errors(self) -> list[SubscriberError]:
        """One entry per subscriber that raised: its first error and the count."""
        return list(self._errors.values())


_bus_lock = threading.Lock()
_current = MetricBus()


def get_bus() -> MetricBus:
    """The process-wide bus (the one installed by the innermost :func:`use_bus`)."""
    return _current


@contextmanager
def use_bus(bus: MetricBus | None = None) -> Iterator[MetricBus]:
    """Install ``bus`` (a fresh one by default) as the process-wide bus for a block.

    The previous bus is restored on exit. Meant for one run or one test at a time.
    """
    global _current
    new = MetricBus() if bus is None else bus
    with _bus_lock:
        previous, _current = _current, new
    try:
        yield new
    finally:
        with _bus_lock:
            _current = previous


#: The key under which :func:`attach_plugins` marks a bus it attached the plugins to.
_PLUGINS_KEY = "d5.plugins"


def attach_plugins(bus: MetricBus, manager: PluginManager | None = None) -> list[HookOutcome]:
    """Let every plugin subscribe to ``bus`` through the ``d5_bus_subscribe`` hook, once.

    This is the hook's one call site. A run calls it on its bus when it starts: the
    trainer (:class:`~d5core.lv2.trainer.RunClock`) on a training run's bus, a
    ``d5 bench`` worker and a validation on the process-wide bus. A second call for the
    same bus does nothing and returns the outcomes of the first. A plugin that raises
    is left out and reported (a :class:`~d5core.plugins.PluginWarning`), and the others
    subscribe.

    :param manager: the plugin manager; the process-wide one by default.
    :return: one outcome per plugin that implements the hook.
    """
    attached: dict[str, list[HookOutcome]] = bus.shared(_PLUGINS_KEY, dict)
    if "outcomes" not in attached:
        outcomes: list[HookOutcome] = []
        attached["outcomes"] = outcomes  # before the call: a plugin may start a run itself
        if manager is None:
            from d5core.plugins.manager import get_plugin_manager

            manager = get_plugin_manager()
        outcomes.extend(manager.call_each("d5_bus_subscribe", bus=bus))
    return attached["outcomes"]
