"""A d5 :class:`~d5core.api.Communicator` over ``torch.distributed`` with the gloo backend.

Buffers are numpy arrays handed to gloo as tensors that share their memory
(``torch.from_numpy``): nothing is pickled and nothing is copied except where the
interface asks for a new array or the input is not C-contiguous. Calls that only move
data (broadcast, gathers, point to point) pass a ``uint8`` view of the buffer, so that any
dtype travels; reductions pass the array itself, in a dtype gloo reduces (not numpy's
unsigned 16/32/64-bit integers).

Byte counts are those of d5-plugin-mpi, by :func:`d5core.api.collective_bytes`: the
convention counts what an operation needs, not what gloo's algorithm moves. ``gather``
and ``allgather`` first exchange a shape header of :data:`SHAPE_HEADER_NBYTES` bytes per
rank and count it with the data, as the MPI communicator does.

The process group: one already initialised (``torch.distributed.is_initialized()``) is
used as it is; otherwise it is initialised with the gloo backend from the environment
(:func:`rendezvous`).
"""

from __future__ import annotations

import atexit
import datetime
import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar, NamedTuple

import numpy as np
import torch
import torch.distributed as dist

from d5core.api import (
    ANY_SOURCE,
    ANY_TAG,
    REDUCE_OPS,
    CommRequest,
    Communicator,
    UsageError,
    chunk_counts,
    collective_bytes,
)

__all__ = [
    "RANK_SOURCES",
    "SHAPE_HEADER_NBYTES",
    "GlooCommunicator",
    "GlooRequest",
    "Rendezvous",
    "rendezvous",
]

_clock = time.perf_counter_ns

#: The most dimensions gather/allgather take (as d5-plugin-mpi): the header is
#: ``[ndim, *shape]`` padded to ``1 + _MAX_NDIM`` int64.
_MAX_NDIM = 15
#: Bytes of the shape header each rank contributes to every gather/allgather.
SHAPE_HEADER_NBYTES = (1 + _MAX_NDIM) * np.dtype(np.int64).itemsize
#: Where the rank and size come from, first match wins: torch's own launchers
#: (torchrun), MPICH (and Intel MPI), Open MPI, Slurm.
RANK_SOURCES: tuple[tuple[str, str], ...] = (
    ("RANK", "WORLD_SIZE"),
    ("PMI_RANK", "PMI_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"),
    ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS"),  # a job step's tasks (srun) ...
    ("SLURM_PROCID", "SLURM_NTASKS"),  # ... else the job's
)
#: How long joining the group may take before gloo gives up (d5's watchdog usually
#: stops a stuck job first).
_INIT_TIMEOUT = datetime.timedelta(minutes=10)

_OPS: dict[str, Any] = {
    "sum": dist.ReduceOp.SUM,
    "prod": dist.ReduceOp.PRODUCT,
    "max": dist.ReduceOp.MAX,
    "min": dist.ReduceOp.MIN,
}
#: Tag of :meth:`GlooCommunicator.neighbor_exchange` messages (kept apart from user tags).
_EXCHANGE_TAG = 0x5D5


class Rendezvous(NamedTuple):
    """How this process joins the group: its rank, the size, and rank 0's address."""

    rank: int
    size: int
    master_addr: str | None
    master_port: int | None


def rendezvous(environ: Mapping[str, str] | None = None) -> Rendezvous:
    """Rank, size and rank 0's address from the environment.

    The rank and size are ``RANK``/``WORLD_SIZE`` when set, else those of an MPI or Slurm
    launcher (:data:`RANK_SOURCES`); none of them means one rank. Several ranks need
    ``MASTER_ADDR`` and ``MASTER_PORT`` (torchrun sets them; under ``mpiexec`` or
    ``srun`` the user does).

    :raises UsageError: one line, for a value that is not a number or missing
        ``MASTER_ADDR``/``MASTER_PORT``.
    """
    env = os.environ if environ is None else environ
    rank, size = 0, 1
    for rank_var, size_var in RANK_SOURCES:
        if rank_var in env and size_var in env:
            try:
                rank, size = int(env[rank_var]), int(env[size_var])
            except ValueError:
                raise UsageError(
                    f"{rank_var}={env[rank_var]!r} and {size_var}={env[size_var]!r} must be "
                    "whole numbers (the rank and the number of ranks)"
                ) from None
            if not 0 <= rank < size:
                raise UsageError(
                    f"{rank_var}={rank} is not a rank of {size_var}={size} ranks; "
                    "check the launcher's environment"
                )
            break
    if size == 1:
        return Rendezvous(rank, size, None, None)
    addr, port = env.get("MASTER_ADDR", ""), env.get("MASTER_PORT", "")
    if not addr or not port:
        raise UsageError(
            "the gloo communicator needs MASTER_ADDR and MASTER_PORT on every rank: set them "
            "to rank 0's host and a free TCP port (torchrun sets them itself)"
        )
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"MASTER_PORT={port!r} is not a TCP port; set it to a free port number")
    return Rendezvous(rank, size, addr, int(port))


def _join(where: Rendezvous) -> None:
    """Initialise the default process group with gloo for ``where``; it is destroyed
    when the process exits (gloo may abort a process that exits with its group alive)."""
    atexit.register(_leave)
    if where.size == 1:
        store = dist.HashStore()  # type: ignore[attr-defined]  # in memory: no address
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        return
    # env:// reads MASTER_ADDR/MASTER_PORT and, under torchrun, joins the agent's store.
    os.environ.setdefault("MASTER_ADDR", str(where.master_addr))
    os.environ.setdefault("MASTER_PORT", str(where.master_port))
    try:
        dist.init_process_group("gloo", init_method="env://", rank=where.rank,
                                world_size=where.size, timeout=_INIT_TIMEOUT)  # fmt: skip
    except (RuntimeError, ValueError) as exc:  # gloo's own, often many lines: the first
        first = next((line.strip() for line in str(exc).splitlines() if line.strip()), "")
        raise UsageError(
            f"gloo could not join rank {where.rank} of {where.size} at "
            f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']} ({first}); check that "
            "MASTER_ADDR is an address every rank reaches, and set GLOO_SOCKET_IFNAME to the "
            "interface between the hosts when this host's name resolves to a loopback address"
        ) from None


def _leave() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def _op(op: str) -> Any:
    try:
        return _OPS[op]
    except KeyError:
        raise ValueError(
            f"unknown reduction {op!r}; expected one of {', '.join(REDUCE_OPS)}"
        ) from None


def _tensor(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing ``array``'s memory (C-contiguous and writeable)."""
    try:
        return torch.from_numpy(array)
    except TypeError:
        raise ValueError(f"gloo cannot reduce arrays of dtype {array.dtype}") from None


def _bytes(array: np.ndarray) -> torch.Tensor:
    """A ``uint8`` tensor over ``array``'s memory (C-contiguous)."""
    return torch.from_numpy(array.reshape(-1).view(np.uint8))


def _shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def _source(source: int) -> int | None:
    return None if source == ANY_SOURCE else source


def _tag(tag: int) -> int:
    if tag == ANY_TAG:
        raise ValueError("gloo receives by tag only: ANY_TAG is not supported, name the tag")
    return tag


def _writable_copy(array: np.ndarray) -> np.ndarray:
    return np.array(array, copy=True, order="C")


def _readable(array: np.ndarray) -> np.ndarray:
    """``array`` when it can be handed to gloo as it is, else a C-contiguous copy."""
    if array.flags.c_contiguous and array.flags.writeable:
        return array
    return _writable_copy(array)


class GlooRequest(CommRequest):
    """A pending ``isend``/``irecv``; counted when :meth:`wait` completes it."""

    def __init__(
        self, comm: GlooCommunicator, work: Any, array: np.ndarray, op: str, t0_ns: int
    ) -> None:
        self._comm, self._work, self._array, self._op = comm, work, array, op
        self._post_ns = _clock() - t0_ns
        self._done = False

    def wait(self) -> np.ndarray:
        if not self._done:
            t0 = _clock()
            self._work.wait()
            self._done = True
            n = self._array.nbytes
            sent, received = (n, 0) if self._op == "isend" else (0, n)
            self._comm._record(self._op, sent, received, t0 - self._post_ns)
        return self._array

    def test(self) -> bool:
        return self._done or bool(self._work.is_completed())


class GlooCommunicator(Communicator):
    """The ranks of ``torch.distributed``'s default process group, over gloo.

    Where gloo has no direct call, the call is built from those it has: ``gather`` and
    ``allgather`` of pieces of different sizes pad every piece to the largest (gloo's
    gather and allgather take equal sizes; the padding is not counted), and
    ``recv_from`` with :data:`~d5core.api.ANY_SOURCE` uses gloo's receive from any rank.
    ``reduce_scatter`` is gloo's own (``reduce_scatter_single`` for equal chunks, the list
    form otherwise). Two limits of gloo: receiving needs a tag (``ANY_TAG`` is refused),
    and a message larger than the receive buffer ends the process in gloo itself (a
    smaller one is not detected).

    :param environ: where :func:`rendezvous` reads the rank, size and address (default:
        the process environment); unused when the group is already initialised.
    """

    name = "gloo"
    #: What each rank adds to every gather/allgather (for ``expected_bytes``).
    shape_header_nbytes: ClassVar[int] = SHAPE_HEADER_NBYTES

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        super().__init__()
        if not dist.is_initialized():
            _join(rendezvous(environ))
        self._rank = int(dist.get_rank())
        self._size = int(dist.get_world_size())

    @property
    def rank(self) -> int:
        return self._rank

    @property
    def size(self) -> int:
        return self._size

    def _count(self, op: str, nbytes: int, t0: int, root: int = 0) -> None:
        sent, received = collective_bytes(op, nbytes, self._size, self._rank, root)
        self._record(op, sent, received, t0)

    # -- collectives ----------------------------------------------------------

    def allreduce(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        t0 = _clock()
        out = _writable_copy(array)
        dist.all_reduce(_tensor(out), op=_op(op))
        self._count("allreduce", out.nbytes, t0)
        return out

    def allreduce_inplace(self, array: np.ndarray, op: str = "sum") -> None:
        t0 = _clock()
        gop = _op(op)
        if array.flags.c_contiguous and array.flags.writeable:
            dist.all_reduce(_tensor(array), op=gop)
        else:
            buf = _writable_copy(array)
            dist.all_reduce(_tensor(buf), op=gop)
            array[...] = buf
        self._count("allreduce", array.nbytes, t0)

    def reduce(self, array: np.ndarray, root: int = 0, op: str = "sum") -> np.ndarray | None:
        t0 = _clock()
        buf = _writable_copy(array)  # gloo writes into every rank's tensor
        dist.reduce(_tensor(buf), dst=root, op=_op(op))
        self._count("reduce", buf.nbytes, t0, root)
        return buf if self._rank == root else None

    def broadcast(self, array: np.ndarray, root: int = 0) -> np.ndarray:
        t0 = _clock()
        if self._rank == root:
            buf = _writable_copy(array)
        else:
            buf = np.empty(array.shape, dtype=array.dtype)
        dist.broadcast(_bytes(buf), src=root)
        self._count("broadcast", buf.nbytes, t0, root)
        return buf

    def _shapes(self, array: np.ndarray) -> list[tuple[int, ...]]:
        """Every rank's shape, on every rank (gloo's gather needs each piece's size
        everywhere, since pieces of different sizes are padded to the largest)."""
        if array.ndim > _MAX_NDIM:
            raise ValueError(f"gather/allgather support up to {_MAX_NDIM} dimensions")
        header = np.zeros(_MAX_NDIM + 1, dtype=np.int64)
        header[0] = array.ndim
        header[1 : 1 + array.ndim] = array.shape
        headers = np.empty((self._size, _MAX_NDIM + 1), dtype=np.int64)
        dist.all_gather_single(torch.from_numpy(headers.reshape(-1)), torch.from_numpy(header))
        return [tuple(int(s) for s in h[1 : 1 + int(h[0])]) for h in headers]

    def _padded(self, src: np.ndarray, shapes: list[tuple[int, ...]]) -> tuple[np.ndarray, int]:
        """``src``'s bytes padded to the largest piece, and that piece's byte size."""
        item = src.dtype.itemsize
        width = max(int(np.prod(s, dtype=np.int64)) for s in shapes) * item
        raw = src.reshape(-1).view(np.uint8)
        if raw.size == width:
            return raw, width
        padded = np.zeros(width, dtype=np.uint8)
        padded[: raw.size] = raw
        return padded, width

    @staticmethod
    def _unpad(table: np.ndarray, shapes: list[tuple[int, ...]], dtype: Any) -> list[np.ndarray]:
        out = []
        item = np.dtype(dtype).itemsize
        for row, shape in zip(table, shapes, strict=True):
            count = int(np.prod(shape, dtype=np.int64))
            out.append(row[: count * item].view(dtype).reshape(shape))
        return out

    def gather(self, array: np.ndarray, root: int = 0) -> list[np.ndarray] | None:
        t0 = _clock()
        src = np.ascontiguousarray(array)
        if self._size == 1:
            self._record("gather", 0, 0, t0)
            return [src.copy()]
        shapes = self._shapes(src)
        piece, width = self._padded(src, shapes)
        if self._rank != root:
            dist.gather(torch.from_numpy(piece), None, dst=root)
            self._record("gather", SHAPE_HEADER_NBYTES + src.nbytes, 0, t0)
            return None
        table = np.empty((self._size, width), dtype=np.uint8)
        dist.gather(torch.from_numpy(piece), list(torch.from_numpy(table).unbind(0)), dst=root)
        counts = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        received = (sum(counts) - counts[root]) * src.dtype.itemsize
        self._record("gather", 0, (self._size - 1) * SHAPE_HEADER_NBYTES + received, t0)
        return self._unpad(table, shapes, src.dtype)

    def allgather(self, array: np.ndarray) -> list[np.ndarray]:
        t0 = _clock()
        src = np.ascontiguousarray(array)
        if self._size == 1:
            self._record("allgather", 0, 0, t0)
            return [src.copy()]
        shapes = self._shapes(src)
        piece, width = self._padded(src, shapes)
        table = np.empty((self._size, width), dtype=np.uint8)
        dist.all_gather_single(torch.from_numpy(table.reshape(-1)), torch.from_numpy(piece))
        counts = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        others = self._size - 1
        received = (sum(counts) - counts[self._rank]) * src.dtype.itemsize
        header = others * SHAPE_HEADER_NBYTES
        self._record("allgather", header + others * src.nbytes, header + received, t0)
        return self._unpad(table, shapes, src.dtype)

    def reduce_scatter(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        t0 = _clock()
        src = _readable(np.ascontiguousarray(array)).reshape(-1)
        counts = chunk_counts(src.size, self._size)
        out = np.empty(counts[self._rank], dtype=src.dtype)
        gop = _op(op)
        if self._size == 1:
            out[...] = src
        elif len(set(counts)) == 1:
            dist.reduce_scatter_single(_tensor(out), _tensor(src), op=gop)
        else:
            chunks = list(torch.split(_tensor(src), counts))
            dist.reduce_scatter(_tensor(out), chunks, op=gop)
        self._count("reduce_scatter", src.nbytes, t0)
        return out

    def neighbor_exchange(
        self, array: np.ndarray, neighbors: Sequence[int]
    ) -> dict[int, np.ndarray]:
        t0 = _clock()
        src = _readable(np.ascontiguousarray(array))
        out: dict[int, np.ndarray] = {}
        works: list[Any] = []
        for n in dict.fromkeys(int(x) for x in neighbors):
            if n == self._rank:
                out[n] = src.copy()
                continue
            buf = np.empty_like(src)
            out[n] = buf
            works.append(dist.irecv(_bytes(buf), src=n, tag=_EXCHANGE_TAG))
            works.append(dist.isend(_bytes(src), dst=n, tag=_EXCHANGE_TAG))
        for work in works:
            work.wait()
        moved = (len(works) // 2) * src.nbytes
        self._record("neighbor_exchange", moved, moved, t0)
        return out

    def barrier(self) -> None:
        t0 = _clock()
        dist.barrier()
        self._record("barrier", 0, 0, t0)

    # -- point to point -------------------------------------------------------

    def send(self, array: np.ndarray, dest: int, tag: int = 0) -> None:
        t0 = _clock()
        src = _readable(np.ascontiguousarray(array))
        dist.send(_bytes(src), dst=dest, tag=tag)
        self._record("send", src.nbytes, 0, t0)

    def recv_from(
        self, shape: Sequence[int] | int, dtype: Any, source: int = ANY_SOURCE, tag: int = 0
    ) -> tuple[np.ndarray, int]:
        t0 = _clock()
        buf = np.empty(_shape(shape), dtype=dtype)
        sender = dist.recv(_bytes(buf), src=_source(source), tag=_tag(tag))
        self._record("recv", 0, buf.nbytes, t0)
        return buf, int(sender)

    def isend(self, array: np.ndarray, dest: int, tag: int = 0) -> CommRequest:
        t0 = _clock()
        src = _readable(np.ascontiguousarray(array))
        return GlooRequest(self, dist.isend(_bytes(src), dst=dest, tag=tag), src, "isend", t0)

    def irecv(
        self, shape: Sequence[int] | int, dtype: Any, source: int = ANY_SOURCE, tag: int = 0
    ) -> CommRequest:
        t0 = _clock()
        buf = np.empty(_shape(shape), dtype=dtype)
        work = dist.irecv(_bytes(buf), src=_source(source), tag=_tag(tag))
        return GlooRequest(self, work, buf, "irecv", t0)

    # -- the library underneath -----------------------------------------------

    def raw_collective(self, name: str) -> Callable[[np.ndarray], Any] | None:
        """``torch.distributed``'s own call for ``name``, uncounted: ``all_reduce`` in
        place (sum), ``broadcast`` from rank 0 in place, ``all_gather_single`` into a new
        array; each wraps the buffer with ``torch.from_numpy`` (no copy), as a user of
        torch with numpy data would. ``None`` for other collectives (see
        :meth:`d5core.api.Communicator.raw_collective`)."""
        size = self._size

        def allreduce(buf: np.ndarray) -> None:
            dist.all_reduce(torch.from_numpy(buf))

        def broadcast(buf: np.ndarray) -> None:
            dist.broadcast(torch.from_numpy(buf), src=0)

        def allgather(buf: np.ndarray) -> np.ndarray:
            out = np.empty((size, *buf.shape), dtype=buf.dtype)
            flat = torch.from_numpy(out.reshape(-1))
            dist.all_gather_single(flat, torch.from_numpy(buf.reshape(-1)))
            return out

        calls: dict[str, Callable[[np.ndarray], Any]] = {
            "allreduce": allreduce,
            "broadcast": broadcast,
            "allgather": allgather,
        }
        return calls.get(name)
