"""Level 3 interfaces: communicators between ranks.

A :class:`Communicator` moves numpy buffers (never pickled objects) between the ranks of a
job and counts what it moves. Byte counts follow one algorithm-independent convention,
the one nccl-tests' bus bandwidth assumes (see :func:`collective_bytes` and
``docs/distributed.md``), so that volumes from different communicators compare.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from d5core.bus import COMM_CALL, get_bus
from d5core.levels.training import Optimizer

__all__ = [
    "ANY_SOURCE",
    "ANY_TAG",
    "REDUCE_OPS",
    "CommCost",
    "CommRequest",
    "Communicator",
    "CompletedRequest",
    "Compressor",
    "DistributedOptimizer",
    "RankLauncher",
    "chunk_counts",
    "collective_bytes",
]

#: ``source`` for :meth:`Communicator.recv` that accepts a message from any rank.
ANY_SOURCE = -1
#: ``tag`` for :meth:`Communicator.recv` that accepts any tag.
ANY_TAG = -1
#: Reduction operators every communicator supports.
REDUCE_OPS: tuple[str, ...] = ("sum", "prod", "max", "min")

_clock = time.perf_counter_ns


def chunk_counts(length: int, size: int) -> list[int]:
    """Split ``length`` elements into ``size`` near-equal chunks (first ones larger).

    The split :meth:`Communicator.reduce_scatter` uses, the same as ``np.array_split``.
    """
    base, extra = divmod(length, size)
    return [base + (1 if r < extra else 0) for r in range(size)]


def collective_bytes(op: str, nbytes: int, size: int, rank: int, root: int = 0) -> tuple[int, int]:
    """Bytes ``(sent, received)`` this rank counts for one collective, by d5's convention.

    ``nbytes`` is this rank's input in bytes (``allgather``/``gather``: its own piece).
    Counts are those of the bandwidth-optimal algorithms nccl-tests' bus bandwidth assumes,
    whatever algorithm the library really ran; summed over ranks, sent equals received.
    Integer division rounds down; one rank counts nothing.

    ==================  =========================  =========================
    op                  sent                       received
    ==================  =========================  =========================
    allreduce           2(n-1)/n * B               2(n-1)/n * B
    reduce_scatter      (n-1)/n * B                (n-1)/n * B
    allgather           (n-1) * b                  (n-1) * b
    broadcast           root (n-1) * B, others 0   root 0, others B
    reduce              root 0, others B           root (n-1) * B, others 0
    gather              root 0, others b           root (n-1) * b, others 0
    barrier             0                          0
    ==================  =========================  =========================

    (``allgather``/``gather`` with pieces of different sizes count exact bytes received;
    the table's ``(n-1) * b`` is for equal pieces.)
    """
    n = size
    if n <= 1:
        return 0, 0
    if op == "allreduce":
        v = 2 * (n - 1) * nbytes // n
        return v, v
    if op == "reduce_scatter":
        v = (n - 1) * nbytes // n
        return v, v
    if op == "allgather":
        return (n - 1) * nbytes, (n - 1) * nbytes
    if op == "broadcast":
        return ((n - 1) * nbytes, 0) if rank == root else (0, nbytes)
    if op in ("reduce", "gather"):
        return (0, (n - 1) * nbytes) if rank == root else (nbytes, 0)
    if op == "barrier":
        return 0, 0
    raise ValueError(f"no byte-count convention for collective {op!r}")


class CommRequest(ABC):
    """A non-blocking send or receive; :meth:`wait` completes it."""

    @abstractmethod
    def wait(self) -> np.ndarray:
        """Block until done; return the array received (``irecv``) or sent (``isend``)."""

    @abstractmethod
    def test(self) -> bool:
        """Whether the operation has completed (never blocks)."""


class CompletedRequest(CommRequest):
    """A request that is already complete (for communicators without non-blocking calls)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def wait(self) -> np.ndarray:
        return self._array

    def test(self) -> bool:
        return True


class Communicator(ABC):
    """Moves numpy buffers between the ranks of a job; registered in ``d5.communication``.

    Every call counts the bytes it sends and receives (by :func:`collective_bytes`; point
    to point exactly), the calls per operation and the seconds spent, and publishes
    ``COMM_CALL`` (level 3; ``op``, ``bytes_sent``, ``bytes_received``, ``duration_ns``,
    ``rank``) when someone listens. Implementations call :meth:`_record` once per call.

    Reductions take ``op`` in :data:`REDUCE_OPS`. Inputs are never modified except by
    ``*_inplace`` calls; results are new arrays.
    """

    name: ClassVar[str] = ""

    def __init__(self) -> None:
        self._bytes_sent = 0
        self._bytes_received = 0
        self._calls: dict[str, int] = {}
        self._ns = 0

    # -- identity -------------------------------------------------------------

    @property
    @abstractmethod
    def rank(self) -> int:
        """This process's rank, from 0."""

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of ranks."""

    def ring_neighbors(self) -> list[int]:
        """``[left, right]``: ranks ``rank - 1`` and ``rank + 1`` modulo ``size``."""
        r, n = self.rank, self.size
        return [(r - 1) % n, (r + 1) % n]

    # -- collectives ----------------------------------------------------------

    @abstractmethod
    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        """Combine ``array`` from every rank with ``op`` and return the result on all."""

    @abstractmethod
    def allreduce_inplace(self, array: np.ndarray, op: str = "sum") -> None:
        """Like :meth:`allreduce`, writing the result into ``array``."""

    @abstractmethod
    def reduce(self, array: np.ndarray, root: int = 0, op: str = "sum") -> np.ndarray | None:
        """Combine ``array`` from every rank on ``root``; ``None`` on the other ranks."""

    @abstractmethod
    def broadcast(self, array: np.ndarray, root: int = 0) -> np.ndarray:
        """Return ``root``'s array on every rank (others pass an array of its shape/dtype)."""

    @abstractmethod
    def gather(self, array: np.ndarray, root: int = 0) -> list[np.ndarray] | None:
        """Every rank's array, in rank order, on ``root``; ``None`` elsewhere.

        Shapes may differ between ranks; the dtype must be the same.
        """

    @abstractmethod
    def allgather(self, array: np.ndarray) -> list[np.ndarray]:
        """Every rank's array, in rank order, on every rank (shapes may differ)."""

    @abstractmethod
    def reduce_scatter(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        """Reduce ``array`` over ranks and return chunk ``rank`` of the flat result.

        The flat view is split into ``size`` chunks by :func:`chunk_counts`; the result is
        one-dimensional. Every rank passes the same shape.
        """

    @abstractmethod
    def neighbor_exchange(
        self, array: np.ndarray, neighbors: Sequence[int]
    ) -> dict[int, np.ndarray]:
        """Send ``array`` to each neighbour and receive one array of its shape/dtype from each.

        Repeated neighbours count once; exchanging with oneself returns a copy. Every
        rank must name the ranks that name it.
        """

    @abstractmethod
    def barrier(self) -> None:
        """Wait until every rank has reached this call."""

    # -- point to point -------------------------------------------------------

    @abstractmethod
    def send(self, array: np.ndarray, dest: int, tag: int = 0) -> None:
        """Send ``array`` to rank ``dest`` (blocking)."""

    @abstractmethod
    def recv_from(
        self, shape: Sequence[int] | int, dtype: Any, source: int = ANY_SOURCE, tag: int = 0
    ) -> tuple[np.ndarray, int]:
        """Receive an array of ``shape``/``dtype``; return it and the rank that sent it.

        ``source`` may be :data:`ANY_SOURCE`, ``tag`` may be :data:`ANY_TAG`.
        """

    def recv(
        self, shape: Sequence[int] | int, dtype: Any, source: int = ANY_SOURCE, tag: int = 0
    ) -> np.ndarray:
        """Receive an array of ``shape``/``dtype`` from ``source`` (or :data:`ANY_SOURCE`)."""
        return self.recv_from(shape, dtype, source, tag)[0]

    def isend(self, array: np.ndarray, dest: int, tag: int = 0) -> CommRequest:
        """Start sending ``array``; the default sends at once (blocking)."""
        self.send(array, dest, tag)
        return CompletedRequest(array)

    def irecv(
        self, shape: Sequence[int] | int, dtype: Any, source: int = ANY_SOURCE, tag: int = 0
    ) -> CommRequest:
        """Start receiving; the default receives at once (blocking)."""
        return CompletedRequest(self.recv(shape, dtype, source, tag))

    # -- the library underneath ----------------------------------------------

    def raw_collective(self, name: str) -> Callable[[np.ndarray], Any] | None:
        """The communication library's own call for collective ``name``, bypassing d5.

        ``d5 bench comm`` times it beside d5's call to show what d5 adds. Optional: the
        default returns ``None`` (no baseline; only d5's call is timed). ``name`` is one
        of ``"allreduce"``, ``"broadcast"``, ``"allgather"`` and ``"pingpong"``; the
        callable takes a C-contiguous buffer and does what d5's call does with it, without
        d5's counting: ``allreduce`` sums it over the ranks in place (as
        :meth:`allreduce_inplace`), ``broadcast`` fills it with rank 0's buffer in place,
        ``allgather`` gathers every rank's buffer (of equal size) into a new array,
        ``pingpong`` is one round trip between ranks 0 and 1 in place (rank 0 sends the
        buffer and receives it back into it; other ranks return at once). One more name
        is no collective: ``"reduce_local"`` adds the buffer element-wise (sum) into a
        scratch buffer of the same shape and type that the callable keeps and returns
        (the sum of every buffer given so far), with the kernel the library's own
        reductions use; the ping-pong job times it as the reduction rate ``R`` of the
        cost models (numpy's add when ``None``). ``None`` for a name the library has no
        direct call for.
        """
        return None

    # -- accounting -----------------------------------------------------------

    def _record(self, op: str, sent: int, received: int, t0_ns: int) -> None:
        """Count one call of ``op`` that started at ``t0_ns`` (``perf_counter_ns``)."""
        dt = _clock() - t0_ns
        self._bytes_sent += sent
        self._bytes_received += received
        self._calls[op] = self._calls.get(op, 0) + 1
        self._ns += dt
        bus = get_bus()
        if bus.wants(COMM_CALL):
            bus.publish(
                COMM_CALL,
                level=3,
                op=op,
                bytes_sent=sent,
                bytes_received=received,
                duration_ns=dt,
                rank=self.rank,
            )

    def counters(self) -> dict[str, Any]:
        """``bytes_sent``, ``bytes_received`` (ints), ``calls`` (per op) and ``seconds``."""
        return {
            "bytes_sent": self._bytes_sent,
            "bytes_received": self._bytes_received,
            "calls": dict(self._calls),
            "seconds": self._ns / 1e9,
        }

    def reset_counters(self) -> None:
        """Zero every counter, :attr:`comm_seconds` included."""
        self._bytes_sent = self._bytes_received = self._ns = 0
        self._calls = {}

    @property
    def comm_seconds(self) -> float:
        """Total seconds spent in communication calls since the last reset."""
        return self._ns / 1e9


# -------------------------------------------------------------------------
# Distributed optimizers (level 3): a scheme wrapped around a local optimizer
# -------------------------------------------------------------------------


class Compressor(ABC):
    """Turns a gradient into a smaller payload of arrays and back; keeps error feedback.

    :meth:`compress` returns the payload arrays to communicate for parameter ``name``;
    :meth:`decompress` rebuilds a dense gradient from one rank's payload. A compressor
    with :attr:`error_feedback` adds the residual it kept for ``name`` (what the last
    payload left out) to the next gradient before compressing, per parameter.
    """

    #: The name users select the compressor by (``compression={"name": ...}``).
    name: ClassVar[str] = ""

    def __init__(self, *, error_feedback: bool = True, seed: int = 0) -> None:
        #: Whether what a payload leaves out is carried over to the next gradient.
        self.error_feedback = error_feedback
        #: Seed of the compressor's random numbers (with :attr:`rank`).
        self.seed = seed
        #: The rank compressing; set by the distributed optimizer.
        self.rank = 0
        #: The error-feedback residual of each parameter, by name.
        self.residuals: dict[str, np.ndarray] = {}

    def accumulate(self, name: str, grad: np.ndarray) -> np.ndarray:
        """``grad`` plus ``name``'s residual (a new array) when error feedback is on."""
        residual = self.residuals.get(name)
        if not self.error_feedback or residual is None:
            return np.array(grad, copy=True)
        return np.asarray(residual + grad)

    def remember(self, name: str, accumulated: np.ndarray, sent: np.ndarray) -> None:
        """Keep ``accumulated - sent`` as ``name``'s residual when error feedback is on."""
        if self.error_feedback:
            self.residuals[name] = accumulated - sent

    @abstractmethod
    def compress(self, name: str, grad: np.ndarray) -> tuple[np.ndarray, ...]:
        """The payload arrays that stand for ``grad`` (of parameter ``name``)."""

    @abstractmethod
    def decompress(
        self, payload: Sequence[np.ndarray], shape: tuple[int, ...], dtype: np.dtype[Any]
    ) -> np.ndarray:
        """The dense gradient of ``shape`` and ``dtype`` that ``payload`` stands for."""

    @abstractmethod
    def payload_nbytes(self, size: int, itemsize: int) -> list[int]:
        """The byte size of each payload array for a gradient of ``size`` elements."""


@dataclass(frozen=True)
class CommCost:
    """The predicted communication of one step of a scheme, by a latency-bandwidth model.

    A message of ``m`` bytes costs ``L + G*m`` seconds (``L``: latency, ``G``: seconds per
    byte, both fitted to a ping-pong by ``d5 bench comm --collective pingpong``); in the
    rounds of a collective, where two ranks send to each other at once, a byte costs
    ``Gx`` (fitted to the same run's exchanges), and a reduction adds ``R`` seconds per
    byte it adds up. The cost of a step is the sum along its critical path:
    :attr:`messages` latencies, :attr:`critical_bytes` bytes moved and
    :attr:`reduced_bytes` bytes reduced. Schemes that communicate every ``k`` steps give
    the per-step average, so counts may be fractional.
    """

    #: Latency terms on the critical path per step (messages sent one after another).
    messages: float
    #: Bytes moved one after another on the critical path per step (what ``G`` multiplies).
    critical_bytes: float
    #: Bytes the busiest rank sends per step as the communicator counts them (the
    #: convention of :func:`collective_bytes`; what ``expected_bytes`` gives per step).
    bytes_sent: float
    #: ``messages * L``, seconds.
    latency_seconds: float
    #: ``critical_bytes * G``, seconds.
    bandwidth_seconds: float
    #: The algorithm the model assumes, such as ``"ring"`` or ``"recursive doubling"``.
    algorithm: str
    #: The model in one short line, such as ``"2L log2 P + 2 B G (P-1)/P"``.
    formula: str
    #: Bytes added up by reductions on the critical path per step (what ``R`` multiplies).
    reduced_bytes: float = 0.0
    #: ``reduced_bytes * R``, seconds.
    reduce_seconds: float = 0.0

    @property
    def seconds(self) -> float:
        """Predicted seconds of communication per step."""
        return self.latency_seconds + self.bandwidth_seconds + self.reduce_seconds

    @property
    def bound(self) -> str:
        """``"bandwidth"`` when the bytes (moved and reduced) cost more than the
        latencies, else ``"latency"``."""
        volume = self.bandwidth_seconds + self.reduce_seconds
        return "bandwidth" if volume > self.latency_seconds else "latency"

    @classmethod
    def of(
        cls,
        *,
        messages: float,
        critical_bytes: float,
        bytes_sent: float,
        latency_s: float,
        seconds_per_byte: float,
        algorithm: str,
        formula: str,
        reduced_bytes: float = 0.0,
        reduce_s_per_byte: float = 0.0,
    ) -> CommCost:
        """The cost of ``messages`` latencies, ``critical_bytes`` bytes and
        ``reduced_bytes`` bytes reduced, at ``L`` = ``latency_s``, ``seconds_per_byte``
        (``G`` or ``Gx``, whichever the rounds pay) and ``R`` = ``reduce_s_per_byte``."""
        return cls(
            messages=float(messages),
            critical_bytes=float(critical_bytes),
            bytes_sent=float(bytes_sent),
            latency_seconds=float(messages) * float(latency_s),
            bandwidth_seconds=float(critical_bytes) * float(seconds_per_byte),
            algorithm=algorithm,
            formula=formula,
            reduced_bytes=float(reduced_bytes),
            reduce_seconds=float(reduced_bytes) * float(reduce_s_per_byte),
        )


class DistributedOptimizer(Optimizer):
    """A communication scheme around a local optimizer; registered in ``d5.optimizers``.

    Built as ``cls(local, comm, *, compression=None, **options)``; ``options`` may hold
    only the names in :attr:`option_defaults`. :meth:`step` does the whole scheme
    (communication and the local update), so a trainer calls it like any optimizer.
    Gradients and parameters are flattened in sorted name order, the same on every rank.
    """

    #: Options besides ``compression``, with their defaults.
    option_defaults: ClassVar[Mapping[str, int | float | str | None]] = {}
    #: Whether the scheme accepts a compressor.
    supports_compression: ClassVar[bool] = False

    def __init__(
        self,
        local: Optimizer,
        comm: Communicator,
        *,
        compression: Compressor | None = None,
        **options: Any,
    ) -> None:
        from d5core.errors import UsageError

        if not isinstance(local, Optimizer) or isinstance(local, DistributedOptimizer):
            raise UsageError(f"{self.name!r}: local must be a non-distributed Optimizer")
        unknown = sorted(set(options) - set(self.option_defaults))
        if unknown:
            known = ", ".join(["compression", *self.option_defaults])
            raise UsageError(f"{self.name!r} has no option {unknown[0]!r}; its options: {known}")
        if compression is not None and not self.supports_compression:
            raise UsageError(f"{self.name!r} does not support compression")
        #: The optimizer that applies updates on this rank.
        self.local = local
        #: The communicator between the ranks.
        self.comm = comm
        #: The compressor of gradients, or ``None``.
        self.compression = compression
        if compression is not None:
            compression.rank = comm.rank
        #: Every option, defaults filled in.
        self.options: dict[str, Any] = {**self.option_defaults, **options}
        super().__init__(lr=local.lr)
        #: Scheme steps taken.
        self.t = 0
        #: The item size of the parameters of the last step, for :meth:`expected_bytes`.
        self.itemsize: int | None = None

    @property
    def lr(self) -> float:
        """The local optimizer's learning rate."""
        return float(self.local.lr)

    @lr.setter
    def lr(self, value: float) -> None:
        self.local.lr = float(value)

    @staticmethod
    def flatten(arrays: Mapping[str, np.ndarray], names: Sequence[str]) -> np.ndarray:
        """``arrays[name]`` for each of ``names``, raveled and concatenated (a copy)."""
        if not names:
            return np.zeros(0)
        return np.concatenate([np.ravel(arrays[n]) for n in names])

    @staticmethod
    def unflatten(
        flat: np.ndarray, like: Mapping[str, np.ndarray], names: Sequence[str]
    ) -> dict[str, np.ndarray]:
        """Views of ``flat`` shaped like ``like[name]`` for each of ``names``."""
        out: dict[str, np.ndarray] = {}
        offset = 0
        for n in names:
            size = int(np.size(like[n]))
            out[n] = flat[offset : offset + size].reshape(np.shape(like[n]))
            offset += size
        return out

    def names(self, params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> list[str]:
        """The sorted names of the gradients, checked against ``params``."""
        from d5core.errors import UsageError

        for key, grad in grads.items():
            if key not in params:
                raise UsageError(f"optimizer {self.name!r}: gradient {key!r} has no parameter")
            if np.shape(grad) != np.shape(params[key]):
                raise UsageError(
                    f"optimizer {self.name!r}: gradient {key!r} has shape {np.shape(grad)}, "
                    f"parameter has {np.shape(params[key])}"
                )
        return sorted(grads)

    def step(self, params: Mapping[str, np.ndarray], grads: Mapping[str, np.ndarray]) -> None:
        """Do one step of the scheme: communicate and update ``params`` in place."""
        self.t += 1
        names = self.names(params, grads)
        if names:
            self.itemsize = int(np.asarray(params[names[0]]).dtype.itemsize)
        self.scheme_step(params, grads, names)

    @abstractmethod
    def scheme_step(
        self,
        params: Mapping[str, np.ndarray],
        grads: Mapping[str, np.ndarray],
        names: Sequence[str],
    ) -> None:
        """The scheme itself, over the gradients ``names`` (sorted)."""

    @abstractmethod
    def expected_bytes(
        self, param_sizes: Mapping[str, int], steps: int, *, itemsize: int | None = None
    ) -> tuple[int, int]:
        """Bytes this rank sends and receives in ``steps`` steps, as the communicator's
        :meth:`~Communicator.counters` count them, for parameters of ``param_sizes``
        elements each, of ``itemsize`` bytes (default: that of the last step's
        parameters, else 4)."""

    @classmethod
    def communication_cost(
        cls,
        *,
        ranks: int,
        params: int | Mapping[str, int],
        itemsize: int,
        latency_s: float,
        seconds_per_byte: float,
        options: Mapping[str, Any],
        exchange_s_per_byte: float | None = None,
        reduce_s_per_byte: float = 0.0,
    ) -> CommCost | None:
        """Predict the communication of one step of this scheme (``d5 model comm``).

        Optional; the default returns ``None`` (the scheme has no model).

        :param ranks: the number of ranks ``P`` (1 or more).
        :param params: the number of parameters, or the element count of each parameter
            by name (compressors and per-parameter calls depend on the split).
        :param itemsize: bytes per parameter element.
        :param latency_s: ``L``, seconds per message.
        :param seconds_per_byte: ``G``, seconds per byte.
        :param options: the scheme's options as ``--scheme-option`` gives them
            (``compression`` included).
        :param exchange_s_per_byte: ``Gx``, seconds per byte when two ranks send to each
            other at once (a collective's rounds, a neighbour exchange); ``None``: ``G``.
        :param reduce_s_per_byte: ``R``, seconds per byte a reduction inside the
            communication adds up (0: not counted).
        :return: the cost of one step (averaged over a period for periodic schemes).
        :raises UsageError: one line, for an option the scheme does not take.
        """
        return None


class RankLauncher(Protocol):
    """What a communication plugin's ``d5_rank_launcher`` hook returns."""

    @property
    def name(self) -> str:
        """The launcher's name in messages and in ``d5_diagnose_rank_failure``."""

    @property
    def communicator(self) -> str:
        """The ``d5.communication`` entry the ranks it starts use."""

    def command(self, ranks: int, argv: Sequence[str]) -> Sequence[str]:
        """The command line that runs ``argv`` on ``ranks`` ranks."""

    def hides(self, line: str) -> bool:
        """Whether ``line`` of the job's output is the launcher's own noise."""
