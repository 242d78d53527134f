"""The system under test: a graph executor answering LoadGen's queries.

LoadGen asks for samples by index into a *query sample library* (QSL). d5's library
(:func:`sample_library`) holds ``performance_sample_count`` seeded random samples made
by :func:`d5core.lv1.runner.make_feeds`, as ``d5 bench net`` makes its inputs:
sample ``i`` is row ``i`` of those feeds, with a batch dimension of one.

:class:`InferenceSUT` runs the queries on one worker thread, which completes them with
``QuerySamplesComplete``; LoadGen's issuing thread only hands them over. How a query
becomes executor calls depends on the scenario:

- single-stream and server: one sample per query, one call each. In performance mode the
  call is prepared per sample beforehand (:meth:`GraphExecutor.prepare_inference`: inputs
  converted to the framework's tensors once, as an MLPerf QSL loads its samples into
  memory), so that a query times the framework's work and little else;
- multi-stream: the query's samples stacked along the batch dimension, one call (or
  calls of at most ``batch`` samples when asked);
- offline: the one query split into calls of ``batch`` samples (32 unless asked), each
  completed as soon as it is done.

A model whose graph fixes its batch ``B`` runs every call at ``B``: smaller calls are
padded with copies of their last sample, larger ones split. A model without a batch
dimension on its inputs, or whose outputs lack one, is refused with a one-line reason.

In accuracy mode every call goes through :meth:`GraphExecutor.inference`, and each
sample's response carries its outputs: the rows of every graph output, in the graph's
output order, as raw bytes (:func:`decode_response` reads them back).
"""

from __future__ import annotations

import array
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from d5core.errors import EXIT_FAILED, D5Error, UsageError, one_line

if TYPE_CHECKING:
    from d5core.levels.networks import GraphExecutor
    from d5core.loadgen.settings import ScenarioSettings
    from d5core.lv0.timed_accuracy import TimedAccuracy
    from d5core.onnx.network import Network

__all__ = [
    "InferenceSUT",
    "OutputLayout",
    "SUTStats",
    "ScenarioFailed",
    "call_batch",
    "decode_response",
    "fixed_batch",
    "loadgen_handles",
    "make_sut",
    "sample_library",
]


class ScenarioFailed(D5Error):
    """A scenario could not be run to its end: the executor raised, the worker process
    died, or LoadGen failed. Its message is one line; d5 exits with 1."""

    exit_code = EXIT_FAILED


def fixed_batch(network: Network) -> int | None:
    """The batch the model's graph fixes (the first dimension of every input that has
    one), or ``None`` when it is symbolic.

    :raises UsageError: for a model with no input that has a batch dimension.
    """
    batched = [info for info in network.inputs if info.shape]
    if not batched:
        raise UsageError(
            f"{network.name or 'the model'} has no input with a batch dimension, so LoadGen "
            f"cannot issue samples of it; give the model a batched input"
        )
    if any(info.shape[0] is None for info in batched):
        return None
    return int(batched[0].shape[0] or 0)


def call_batch(network: Network, settings: ScenarioSettings, batch: int | None = None) -> int:
    """The samples one executor call runs in ``settings``' scenario: the model's own
    batch when its graph fixes one; else 1 in single-stream and server, the samples
    per query (at most ``batch``) in multi-stream, and ``batch`` (32 unless given) in
    offline.

    :raises UsageError: for a non-positive ``batch``, or one a fixed-batch model cannot
        run.
    """
    from d5core.lv1.runner import DEFAULT_BATCH, resolve_batch

    own = fixed_batch(network)
    if own is not None or (batch is not None and batch <= 0):
        return resolve_batch(network, batch, what=network.name or "the model")
    if settings.scenario == "multi-stream":
        return min(settings.query_size, batch) if batch else settings.query_size
    if settings.scenario == "offline":
        return batch or DEFAULT_BATCH
    return 1


def sample_library(network: Network, settings: ScenarioSettings) -> list[dict[str, np.ndarray]]:
    """The query sample library: ``settings.sample_count`` samples, each a dict of
    every graph input with a batch dimension of one.

    The samples are the rows of :func:`~d5core.lv1.runner.make_feeds` at batch
    ``sample_count`` with ``settings.seed`` (for a model whose graph fixes its batch
    ``B``: the rows of successive feeds of ``B``, seeded ``seed``, ``seed + 1``, ...),
    so the same settings always give the same samples.
    """
    from d5core.lv1.runner import make_feeds

    count = settings.sample_count
    own = fixed_batch(network)
    chunks: list[dict[str, np.ndarray]] = []
    if own is None:
        chunks.append(make_feeds(network, count, settings.seed))
    else:
        for k in range(-(-count // own)):
            chunks.append(make_feeds(network, own, settings.seed + k))
    samples: list[dict[str, np.ndarray]] = []
    for feeds in chunks:
        rows = {len(v) for v in feeds.values() if np.ndim(v) > 0}
        n = min(rows) if rows else 0
        for i in range(n):
            samples.append(
                {k: (v[i : i + 1].copy() if np.ndim(v) > 0 else v) for k, v in feeds.items()}
            )
    return samples[:count]


@dataclass(frozen=True)
class OutputLayout:
    """How one graph output's row lies in a response: its name, dtype and row shape."""

    name: str
    dtype: str
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OutputLayout:
        return cls(str(data["name"]), str(data["dtype"]), tuple(int(d) for d in data["shape"]))


def decode_response(
    data: bytes, layout: Sequence[OutputLayout | Mapping[str, Any]]
) -> dict[str, np.ndarray]:
    """One sample's outputs, by name, from the bytes its response carried.

    :raises UsageError: when the bytes do not match ``layout``.
    """
    outputs: dict[str, np.ndarray] = {}
    items = [o if isinstance(o, OutputLayout) else OutputLayout.from_json(o) for o in layout]
    expected = sum(o.nbytes for o in items)
    if len(data) != expected:
        raise UsageError(
            f"a response of {len(data)} bytes does not match the outputs' layout "
            f"({expected} bytes); the accuracy log belongs to another model or run"
        )
    offset = 0
    for item in items:
        chunk = data[offset : offset + item.nbytes]
        outputs[item.name] = np.frombuffer(chunk, dtype=item.dtype).reshape(item.shape).copy()
        offset += item.nbytes
    return outputs


@dataclass
class SUTStats:
    """What the system under test did: queries and samples completed, the calls it
    made, the first error (one line) and the accuracy-mode output layout."""

    queries: int = 0
    samples: int = 0
    calls: int = 0
    error: str | None = None
    layout: list[OutputLayout] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "samples": self.samples,
            "calls": self.calls,
            "error": self.error,
            "layout": [o.to_json() for o in self.layout],
        }


#: A call to make: the (response id, sample index) pairs it answers.
_Work = list[tuple[int, int]]


class InferenceSUT:
    """An executor answering LoadGen's queries from one worker thread; see the module
    docstring. Call :meth:`start` before the test and :meth:`stop` after it.

    :param on_error: called (from the worker thread) with a one-line message when the
        executor raises; the default completes that query and every later one without
        running them, so that LoadGen ends, and :meth:`stop` raises the error.
    """

    def __init__(
        self,
        executor: GraphExecutor,
        network: Network,
        settings: ScenarioSettings,
        *,
        batch: int | None = None,
        samples: list[dict[str, np.ndarray]] | None = None,
        on_error: Callable[[str], None] | None = None,
    ) -> None:
        from d5core.measure.engine import synchronizer_of

        self.executor = executor
        self.network = network
        self.settings = settings
        self.accuracy = settings.mode == "accuracy"
        self.fixed = fixed_batch(network)
        self.batch = call_batch(network, settings, batch)
        self.samples = samples if samples is not None else sample_library(network, settings)
        self.output_names = [o.name for o in network.outputs]
        self.stats = SUTStats()
        self._on_error = on_error
        self._sync = synchronizer_of(executor)
        self._queue: queue.SimpleQueue[_Work | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lg: Any = None
        self._prepared: list[Callable[[], object]] = []
        if not self.accuracy and settings.query_size == 1 and settings.scenario != "offline":
            self._prepared = [
                executor.prepare_inference(self._feeds([i])) for i in range(len(self.samples))
            ]
        #: Accuracy while timed: the numbers of the prepared calls whose return value is
        #: kept (drawn at random among the first 16 of the test), and what they
        #: returned, by sample index; see :meth:`timed_accuracy`.
        self._keep_at: frozenset[int] = frozenset()
        self._kept: list[tuple[int, object]] = []
        if self._prepared:
            import random

            self._keep_at = frozenset(random.SystemRandom().sample(range(1, 17), 3))

    # -- feeds and calls ---------------------------------------------------------------

    def _feeds(self, indices: Sequence[int]) -> dict[str, np.ndarray]:
        """The inputs of one call on ``indices``, padded to a fixed batch."""
        rows = list(indices)
        if self.fixed is not None and len(rows) < self.fixed:
            rows += [rows[-1]] * (self.fixed - len(rows))
        first = self.samples[rows[0]]
        if len(rows) == 1:
            return dict(first)
        return {
            name: np.concatenate([self.samples[i][name] for i in rows])
            if np.ndim(value) > 0
            else value
            for name, value in first.items()
        }

    def run_call(self, indices: Sequence[int]) -> list[bytes] | None:
        """Run one call on ``indices``; in accuracy mode return each sample's response
        bytes (else ``None``)."""
        self.stats.calls += 1
        if self._prepared and len(indices) == 1:
            result = self._prepared[indices[0]]()
            if self._sync is not None:
                self._sync()
            if self.stats.calls in self._keep_at:  # a reference, nothing copied
                self._kept.append((indices[0], result))
            return None
        outputs = self.executor.inference(self._feeds(indices))
        if not self.accuracy:
            return None
        return self._rows(outputs, len(indices))

    def _rows(self, outputs: Mapping[str, np.ndarray], n: int) -> list[bytes]:
        arrays = []
        for name in self.output_names:
            value = np.ascontiguousarray(np.asarray(outputs[name]))
            expected = self.fixed or n
            if value.ndim == 0 or value.shape[0] != expected:
                raise UsageError(
                    f"output {name!r} has shape {value.shape}, without the batch dimension "
                    f"of {expected}; LoadGen's accuracy mode needs one row per sample"
                )
            arrays.append(value)
        if not self.stats.layout:
            self.stats.layout = [
                OutputLayout(name, str(v.dtype), tuple(int(d) for d in v.shape[1:]))
                for name, v in zip(self.output_names, arrays, strict=True)
            ]
        return [b"".join(v[i].tobytes() for v in arrays) for i in range(n)]

    def timed_accuracy(self) -> TimedAccuracy:
        """Accuracy while timed: whether the prepared calls kept during the test returned
        what the untimed :meth:`GraphExecutor.inference` gives for the same sample
        (:func:`d5core.lv0.timed_accuracy.check_sampled`); call after the test."""
        from d5core.lv0.timed_accuracy import TimedAccuracy, check_sampled

        if not self._kept:
            return TimedAccuracy("unchecked", detail="no prepared call was sampled")
        names = self.output_names
        for k, (index, result) in enumerate(self._kept):
            expected = self.executor.inference(self._feeds([index]))
            found = check_sampled([result], [expected[n] for n in names], names=names)
            if found.status != "pass":
                return found
            found.checked = k + 1
        self._kept.clear()
        return found

    def warm_up(self, budget_s: float = 0.5, *, max_calls: int = 200) -> dict[str, float]:
        """Run calls until ``budget_s`` is spent (after one untimed call of each kind):
        the median latency of a one-sample call and of a call of ``batch`` samples
        (``single_latency_s``, ``batch_latency_s``), and the samples per second they
        give, at the median (``*_rate``), and the fastest call's latency and rate
        (``*_best_latency_s``, ``*_best_rate``).
        Frameworks that compile or
        trace on the first call do it here, not under load."""
        n = len(self.samples)
        result: dict[str, float] = {}
        kinds = [("single", 1)]
        if self.batch > 1:
            kinds.append(("batch", self.batch))
        for label, size in kinds:
            times: list[float] = []
            start = time.perf_counter()
            for k in range(max_calls + 1):
                indices = [(k * size + j) % n for j in range(size)]
                t0 = time.perf_counter()
                self.run_call(indices)
                if k > 0:
                    times.append(time.perf_counter() - t0)
                if time.perf_counter() - start > budget_s / len(kinds) and len(times) >= 3:
                    break
            median, best = float(np.median(times)), float(min(times))
            result[f"{label}_latency_s"] = median
            result[f"{label}_rate"] = size / median if median > 0 else 0.0
            result[f"{label}_best_latency_s"] = best
            result[f"{label}_best_rate"] = size / best if best > 0 else 0.0
        for key in ("latency_s", "rate", "best_latency_s", "best_rate"):
            result.setdefault(f"batch_{key}", result[f"single_{key}"])
        self.stats.calls = 0
        self._kept.clear()  # calls of the warm-up are not the test's
        return result

    # -- LoadGen's callbacks -------------------------------------------------------------

    def issue_query(self, query_samples: Sequence[Any]) -> None:
        """LoadGen's issue callback: hand the query to the worker thread, split into
        calls of at most :attr:`batch` samples."""
        pairs = [(int(s.id), int(s.index)) for s in query_samples]
        self.stats.queries += 1
        step = self.batch
        for start in range(0, len(pairs), step):
            self._queue.put(pairs[start : start + step])

    def flush_queries(self) -> None:
        """LoadGen's flush callback: nothing is held back, so nothing to flush."""

    def _complete(self, work: _Work, data: list[bytes] | None) -> None:
        lg = self._lg
        if data is None:
            responses = [lg.QuerySampleResponse(rid, 0, 0) for rid, _ in work]
            lg.QuerySamplesComplete(responses)
        else:
            buffers = [array.array("B", d) for d in data]
            responses = [
                lg.QuerySampleResponse(rid, *buf.buffer_info())
                for (rid, _), buf in zip(work, buffers, strict=True)
            ]
            lg.QuerySamplesComplete(responses)  # LoadGen copies the bytes it logs here
        self.stats.samples += len(work)

    def _serve(self) -> None:
        while True:
            work = self._queue.get()
            if work is None:
                return
            if self.stats.error is None:
                try:
                    data = self.run_call([index for _, index in work])
                except Exception as exc:
                    self.stats.error = one_line(exc)
                    if self._on_error is not None:
                        self._on_error(self.stats.error)
                    data = None
                self._complete(work, data)
            else:
                self._complete(work, None)

    def start(self) -> None:
        """Start the worker thread."""
        import mlperf_loadgen as lg

        self._lg = lg
        self._thread = threading.Thread(target=self._serve, name="d5-sut", daemon=True)
        self._thread.start()

    def stop(self) -> SUTStats:
        """Stop the worker thread; return the statistics.

        :raises ScenarioFailed: when the executor raised while answering a query.
        """
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
            self._thread = None
        if self.stats.error is not None:
            raise ScenarioFailed(f"the executor failed while answering a query: {self.stats.error}")
        return self.stats


def make_sut(
    executor: GraphExecutor,
    network: Network,
    settings: ScenarioSettings,
    *,
    batch: int | None = None,
    on_error: Callable[[str], None] | None = None,
) -> tuple[Any, Any, Callable[[], SUTStats]]:
    """LoadGen's SUT and QSL around ``executor``, and the function that closes both.

    Usable in-process: ``sut, qsl, close = make_sut(...)``, then
    ``mlperf_loadgen.StartTestWithLogSettings(sut, qsl, ...)``, then ``close()``, which
    returns what the SUT did (:class:`SUTStats`) and raises :class:`ScenarioFailed` when
    the executor failed.
    """
    system = InferenceSUT(executor, network, settings, batch=batch, on_error=on_error)
    return loadgen_handles(system)


def loadgen_handles(system: InferenceSUT) -> tuple[Any, Any, Callable[[], SUTStats]]:
    """Start ``system``'s worker thread and construct LoadGen's SUT and QSL on it:
    ``(sut, qsl, close)``, as :func:`make_sut` returns them."""
    import mlperf_loadgen as lg

    count = len(system.samples)
    system.start()
    sut = lg.ConstructSUT(system.issue_query, system.flush_queries)
    qsl = lg.ConstructQSL(count, count, lambda indices: None, lambda indices: None)
    closed: list[SUTStats] = []

    def close() -> SUTStats:
        if closed:
            return closed[0]
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
        closed.append(system.stats)
        return system.stop()

    return sut, qsl, close
