"""A d5 :class:`~d5core.api.Communicator` over mpi4py.

Every call moves numpy buffers with mpi4py's upper-case (buffer) methods; nothing is
pickled. Byte counts follow :func:`d5core.api.collective_bytes` and take in
every byte a call hands to MPI: ``gather`` and ``allgather`` first exchange a shape header
of :data:`SHAPE_HEADER_NBYTES` bytes per rank, and count it with the data.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

import numpy as np
from mpi4py import MPI

from d5core.api import (
    ANY_SOURCE,
    ANY_TAG,
    REDUCE_OPS,
    CommRequest,
    Communicator,
    chunk_counts,
    collective_bytes,
)

__all__ = ["SHAPE_HEADER_NBYTES", "MPICommunicator", "MPIRequest"]

_clock = time.perf_counter_ns

_OPS: dict[str, MPI.Op] = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
#: The most dimensions gather/allgather take: their shape header is ``[ndim, *shape]``
#: padded to ``1 + _MAX_NDIM`` int64.
_MAX_NDIM = 15
#: Bytes of the shape header each rank contributes to every gather/allgather.
SHAPE_HEADER_NBYTES = (1 + _MAX_NDIM) * np.dtype(np.int64).itemsize


def _mpi_op(op: str) -> MPI.Op:
    try:
        return _OPS[op]
    except KeyError:
        raise ValueError(
            f"unknown reduction {op!r}; expected one of {', '.join(REDUCE_OPS)}"
        ) from None


def _contiguous(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array)


def _shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)


def _source(source: int) -> int:
    return MPI.ANY_SOURCE if source == ANY_SOURCE else source


def _tag(tag: int) -> int:
    return MPI.ANY_TAG if tag == ANY_TAG else tag


class MPIRequest(CommRequest):
    """A pending ``isend``/``irecv``; counted when :meth:`wait` completes it."""

    def __init__(
        self,
        comm: MPICommunicator,
        request: MPI.Request,
        array: np.ndarray,
        op: str,
        t0_ns: int,
    ) -> None:
        self._comm, self._request, self._array, self._op = comm, request, array, op
        self._post_ns = _clock() - t0_ns
        self._done = False

    def wait(self) -> np.ndarray:
        if not self._done:
            t0 = _clock()
            self._request.Wait()
            self._done = True
            n = self._array.nbytes
            sent, received = (n, 0) if self._op == "isend" else (0, n)
            self._comm._record(self._op, sent, received, t0 - self._post_ns)
        return self._array

    def test(self) -> bool:
        return self._done or bool(self._request.Test())


class MPICommunicator(Communicator):
    """The ranks of an MPI communicator (``MPI.COMM_WORLD`` unless ``comm`` is given)."""

    name = "mpi"
    #: What each rank adds to every gather/allgather (for ``expected_bytes``).
    shape_header_nbytes: ClassVar[int] = SHAPE_HEADER_NBYTES

    def __init__(self, comm: MPI.Comm | None = None) -> None:
        super().__init__()
        self.comm: MPI.Comm = MPI.COMM_WORLD if comm is None else comm
        self._rank = self.comm.Get_rank()
        self._size = self.comm.Get_size()

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
        src = _contiguous(array)
        out = np.empty_like(src)
        self.comm.Allreduce(src, out, op=_mpi_op(op))
        self._count("allreduce", src.nbytes, t0)
        return out

    def allreduce_inplace(self, array: np.ndarray, op: str = "sum") -> None:
        t0 = _clock()
        mop = _mpi_op(op)
        if array.flags.c_contiguous and array.flags.writeable:
            self.comm.Allreduce(MPI.IN_PLACE, array, op=mop)
        else:
            buf = np.ascontiguousarray(array).copy()
            self.comm.Allreduce(MPI.IN_PLACE, buf, op=mop)
            array[...] = buf
        self._count("allreduce", array.nbytes, t0)

    def reduce(self, array: np.ndarray, root: int = 0, op: str = "sum") -> np.ndarray | None:
        t0 = _clock()
        src = _contiguous(array)
        out = np.empty_like(src) if self._rank == root else None
        self.comm.Reduce(src, out, op=_mpi_op(op), root=root)
        self._count("reduce", src.nbytes, t0, root)
        return out

    def broadcast(self, array: np.ndarray, root: int = 0) -> np.ndarray:
        t0 = _clock()
        if self._rank == root:
            buf = np.array(array, copy=True, order="C")
        else:
            buf = np.empty(array.shape, dtype=array.dtype)
        self.comm.Bcast(buf, root=root)
        self._count("broadcast", buf.nbytes, t0, root)
        return buf

    def _shapes(self, array: np.ndarray, root: int | None = None) -> list[tuple[int, ...]]:
        """Every rank's shape (allgathered; with ``root``, gathered there: ``[]`` elsewhere)."""
        if array.ndim > _MAX_NDIM:
            raise ValueError(f"gather/allgather support up to {_MAX_NDIM} dimensions")
        header = np.zeros(_MAX_NDIM + 1, dtype=np.int64)
        header[0] = array.ndim
        header[1 : 1 + array.ndim] = array.shape
        if root is None:
            headers = np.empty((self._size, _MAX_NDIM + 1), dtype=np.int64)
            self.comm.Allgather(header, headers)
        elif self._rank == root:
            headers = np.empty((self._size, _MAX_NDIM + 1), dtype=np.int64)
            self.comm.Gather(header, headers, root=root)
        else:
            self.comm.Gather(header, None, root=root)
            return []
        return [tuple(int(s) for s in h[1 : 1 + int(h[0])]) for h in headers]

    def _split(self, flat: np.ndarray, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
        out, start = [], 0
        for shape in shapes:
            count = int(np.prod(shape, dtype=np.int64))
            out.append(flat[start : start + count].reshape(shape))
            start += count
        return out

    def gather(self, array: np.ndarray, root: int = 0) -> list[np.ndarray] | None:
        t0 = _clock()
        src = _contiguous(array)
        shapes = self._shapes(src, root)
        header = SHAPE_HEADER_NBYTES if self._size > 1 else 0
        if self._rank != root:
            self.comm.Gatherv(src, None, root=root)
            self._record("gather", header + (src.nbytes if self._size > 1 else 0), 0, t0)
            return None
        counts = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        flat = np.empty(sum(counts), dtype=src.dtype)
        self.comm.Gatherv(src, (flat, counts), root=root)
        received = (sum(counts) - counts[root]) * src.dtype.itemsize
        self._record("gather", 0, (self._size - 1) * header + received, t0)
        return self._split(flat, shapes)

    def allgather(self, array: np.ndarray) -> list[np.ndarray]:
        t0 = _clock()
        src = _contiguous(array)
        shapes = self._shapes(src)
        counts = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        flat = np.empty(sum(counts), dtype=src.dtype)
        if len(set(counts)) == 1:
            self.comm.Allgather(src, flat)
        else:
            self.comm.Allgatherv(src, (flat, counts))
        others = self._size - 1
        received = (sum(counts) - counts[self._rank]) * src.dtype.itemsize
        header = others * SHAPE_HEADER_NBYTES
        self._record("allgather", header + others * src.nbytes, header + received, t0)
        return self._split(flat, shapes)

    def reduce_scatter(self, array: np.ndarray, op: str = "sum") -> np.ndarray:
        t0 = _clock()
        src = _contiguous(array).reshape(-1)
        counts = chunk_counts(src.size, self._size)
        out = np.empty(counts[self._rank], dtype=src.dtype)
        mop = _mpi_op(op)
        if len(set(counts)) == 1:
            self.comm.Reduce_scatter_block(src, out, op=mop)
        else:
            self.comm.Reduce_scatter(src, out, recvcounts=counts, op=mop)
        self._count("reduce_scatter", src.nbytes, t0)
        return out

    def neighbor_exchange(
        self, array: np.ndarray, neighbors: Sequence[int]
    ) -> dict[int, np.ndarray]:
        t0 = _clock()
        src = _contiguous(array)
        out: dict[int, np.ndarray] = {}
        requests: list[MPI.Request] = []
        for n in dict.fromkeys(int(x) for x in neighbors):
            if n == self._rank:
                out[n] = src.copy()
                continue
            buf = np.empty_like(src)
            out[n] = buf
            requests.append(self.comm.Irecv(buf, source=n, tag=_EXCHANGE_TAG))
            requests.append(self.comm.Isend(src, dest=n, tag=_EXCHANGE_TAG))
        MPI.Request.Waitall(requests)
        moved = (len(requests) // 2) * src.nbytes
        self._record("neighbor_exchange", moved, moved, t0)
        return out

    def barrier(self) -> None:
        t0 = _clock()
        self.comm.Barrier()
        self._record("barrier", 0, 0, t0)

    # -- point to point -------------------------------------------------------

    def send(self, array: np.ndarray, dest: int, tag: int = 0) -> None:
        t0 = _clock()
        src = _contiguous(array)
        self.comm.Send(src, dest=dest, tag=tag)
        self._record("send", src.nbytes, 0, t0)

    def recv_from(
        self, shape: Sequence[int] | int, dtype: Any, source: int = ANY_SOURCE, tag: int = 0
    ) -> tuple[np.ndarray, int]:
        t0 = _clock()
        buf = np.empty(_shape(shape), dtype=dtype)
        status = MPI.Status()
        self.comm.Recv(buf, source=_source(source), tag=_tag(tag), status=status)
        got = status.Get_count(MPI.BYTE)
        if got != buf.nbytes:
            raise ValueError(f"received {got} bytes into a buffer of {buf.nbytes}")
        self._record("recv", 0, buf.nbytes, t0)
        return buf, int(status.Get_source())

    def isend(self, array: np.ndarray, dest: int, tag: int = 0) -> CommRequest:
        t0 = _clock()
        src = _contiguous(array)
        return MPIRequest(self, self.comm.Isend(src, dest=dest, tag=tag), src, "isend", t0)

    def irecv(
        self, shape: Sequence[int] | int, dtype: Any, source: int = ANY_SOURCE, tag: int = 0
    ) -> CommRequest:
        t0 = _clock()
        buf = np.empty(_shape(shape), dtype=dtype)
        request = self.comm.Irecv(buf, source=_source(source), tag=_tag(tag))
        return MPIRequest(self, request, buf, "irecv", t0)

    # -- the library underneath -----------------------------------------------

    def raw_collective(self, name: str) -> Callable[[np.ndarray], Any] | None:
        """mpi4py's own call for ``name``, uncounted: ``Allreduce`` in place (sum),
        ``Bcast`` from rank 0 in place, ``Allgather`` into a new array, the ping-pong's
        round trip (``Send`` then ``Recv`` on rank 0, the reverse on rank 1, in place),
        and ``reduce_local``: ``MPI_Reduce_local`` (sum) of the buffer into a scratch
        buffer of its size (returned), the kernel MPICH's allreduce adds with; ``None``
        for other names (see :meth:`d5core.api.Communicator.raw_collective`)."""
        comm, size, rank = self.comm, self._size, self._rank
        scratch: dict[tuple[tuple[int, ...], str], np.ndarray] = {}

        def allreduce(buf: np.ndarray) -> None:
            comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)

        def broadcast(buf: np.ndarray) -> None:
            comm.Bcast(buf, root=0)

        def allgather(buf: np.ndarray) -> np.ndarray:
            out = np.empty((size, *buf.shape), dtype=buf.dtype)
            comm.Allgather(buf, out)
            return out

        def pingpong(buf: np.ndarray) -> None:
            if rank == 0:
                comm.Send(buf, dest=1, tag=_PINGPONG_TAG)
                comm.Recv(buf, source=1, tag=_PINGPONG_TAG)
            elif rank == 1:
                comm.Recv(buf, source=0, tag=_PINGPONG_TAG)
                comm.Send(buf, dest=0, tag=_PINGPONG_TAG)

        def reduce_local(buf: np.ndarray) -> np.ndarray:
            key = (buf.shape, buf.dtype.str)
            into = scratch.get(key)
            if into is None:
                into = scratch[key] = np.zeros_like(buf)
            MPI.SUM.Reduce_local(buf, into)
            return into

        calls: dict[str, Callable[[np.ndarray], Any]] = {
            "allreduce": allreduce,
            "broadcast": broadcast,
            "allgather": allgather,
            "pingpong": pingpong,
            "reduce_local": reduce_local,
        }
        return calls.get(name)


#: Tag of the raw ping-pong's messages (``raw_collective("pingpong")``).
_PINGPONG_TAG = 0x9D6
#: Tag of :meth:`MPICommunicator.neighbor_exchange` messages (kept apart from user tags).
_EXCHANGE_TAG = 0x5D5
